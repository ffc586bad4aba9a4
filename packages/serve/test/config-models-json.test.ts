import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import type { MarinaError } from '@marina/errors';
import { loadConfig } from '../src/config/load-config.ts';
import type { ServerConfig } from '../src/config/server-config.ts';
import { useTempDirs } from './temp-dirs.ts';
import { marinaErrorOf } from './marina-error-of.ts';

const newTempDir = useTempDirs('marina-config-models-');

async function load(text: string): Promise<ServerConfig> {
  const cwd = newTempDir();
  writeFileSync(path.join(cwd, 'config.properties'), text);
  return loadConfig({ cliOptions: {}, env: {}, cwd });
}

function loadError(text: string): Promise<MarinaError> {
  return marinaErrorOf(load(text));
}

const EXPECTED = {
  'resnet-152': {
    '1.0': {
      defaultVersion: true,
      marName: 'resnet-152.mar',
      minWorkers: 1,
      maxWorkers: 2,
      batchSize: 8,
      maxBatchDelayMs: 100,
      responseTimeoutSec: 200,
    },
  },
};

const BODY = [
  '  "resnet-152": {',
  '    "1.0": {',
  '        "defaultVersion": true,',
  '        "marName": "resnet-152.mar",',
  '        "minWorkers": 1,',
  '        "maxWorkers": 2,',
  '        "batchSize": 8,',
  '        "maxBatchDelay": 100,',
  '        "responseTimeout": 200',
  '    }',
  '  }',
];

describe('the models= JSON', () => {
  it("reads TorchServe's multi-line form with trailing backslashes", async () => {
    const text = ['models={\\', ...BODY.map((line) => `${line}\\`), '}', 'job_queue_size=10'].join('\n');
    const config = await load(text);
    expect(config.models).toEqual(EXPECTED);
    expect(config.jobQueueSize).toBe(10);
  });

  it('reads the same JSON pasted without backslashes', async () => {
    const config = await load(['models={', ...BODY, '}', 'job_queue_size=10'].join('\n'));
    expect(config.models).toEqual(EXPECTED);
    expect(config.jobQueueSize).toBe(10);
  });

  it('reads it with the value on the line after a lone models=\\ and with CRLF line ends', async () => {
    const config = await load(['models=\\', '{', ...BODY, '}', 'job_queue_size=10'].join('\r\n'));
    expect(config.models).toEqual(EXPECTED);
    expect(config.jobQueueSize).toBe(10);
  });

  it('reads it on one line, with braces inside strings not counted', async () => {
    const config = await load('models={"m": {"1.0": {"marName": "we{ird}.mar", "batchSize": 2}}}\njob_queue_size=3');
    expect(config.models).toEqual({ m: { '1.0': { marName: 'we{ird}.mar', batchSize: 2 } } });
    expect(config.jobQueueSize).toBe(3);
  });

  it('ignores values of 0 or below, as TorchServe does', async () => {
    const config = await load(
      'models={"m": {"1.0": {"minWorkers": 0, "maxWorkers": -1, "batchSize": 4, "maxBatchDelay": 0}}}',
    );
    expect(config.models).toEqual({ m: { '1.0': { batchSize: 4 } } });
  });

  it('warns about settings it does not know and keeps going', async () => {
    const config = await load('models={"m": {"1.0": {"batchSize": 4, "batchsize": 8}}}');
    expect(config.models).toEqual({ m: { '1.0': { batchSize: 4 } } });
    expect(config.warnings).toContain('models: m version 1.0: unknown setting(s) batchsize ignored');
  });

  it('stops on a missing comma with file, line, column, the line and a caret', async () => {
    const lines = [
      '# models below',
      'models={',
      '  "m": {',
      '    "1.0": {',
      '      "minWorkers": 1',
      '      "maxWorkers": 1',
      '    }',
      '  }',
      '}',
    ];
    const error = await loadError(lines.join('\n'));
    expect(error.code).toBe('MARINA_ERR_CONFIG_MODELS_JSON_INVALID');
    expect(error.message).toMatch(/config\.properties:6:7: invalid JSON in the value of 'models': expected ','/);
    expect(error.message).toContain('\n          "maxWorkers": 1\n          ^');
    expect(error.details).toMatchObject({ line: 6, column: 7, text: '      "maxWorkers": 1' });
  });

  it('reports positions in the file for the backslash form too', async () => {
    const lines = [
      'models={\\',
      '  "m": {\\',
      '    "1.0": {\\',
      '      "minWorkers": 1,\\',
      '      "maxWorkers": 1,\\',
      '    }\\',
      '  }\\',
      '}',
    ];
    const error = await loadError(lines.join('\n'));
    expect(error.code).toBe('MARINA_ERR_CONFIG_MODELS_JSON_INVALID');
    expect(error.details).toMatchObject({ line: 6, column: 5, text: '    }\\' });
    expect(error.message).toContain('trailing commas are not allowed');
  });

  it('reports a missing closing brace at the line it ran into', async () => {
    const error = await loadError('models={"m": {"1.0": {"batchSize": 1}}\nload_models=all');
    expect(error.code).toBe('MARINA_ERR_CONFIG_MODELS_JSON_INVALID');
    expect(error.details).toMatchObject({ line: 2, column: 1 });
  });

  it('stops on a value of the wrong type, pointing at it in the file', async () => {
    const error = await loadError(
      ['models={', '  "m": {', '    "1.0": {', '      "batchSize": "eight"', '    }', '  }', '}'].join('\n'),
    );
    expect(error.code).toBe('MARINA_ERR_CONFIG_MODELS_INVALID');
    expect(error.message).toContain('config.properties:4:20: models m > 1.0 > batchSize must be integer');
  });

  it('stops when maxWorkers is below minWorkers', async () => {
    const error = await loadError('models={"m": {"1.0": {"minWorkers": 3, "maxWorkers": 2}}}');
    expect(error.code).toBe('MARINA_ERR_CONFIG_MODELS_INVALID');
    expect(error.message).toContain('maxWorkers (2) is below minWorkers (3)');
  });

  it('stops when models is not an object of versions', async () => {
    const error = await loadError('models={"m": 3}');
    expect(error.code).toBe('MARINA_ERR_CONFIG_MODELS_INVALID');
    expect(error.message).toContain('models m must be object');
  });
});
