import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { isMarinaError, type MarinaError } from '@marina/errors';
import { assertModelStoreConfigured, configFromProperties, loadConfig } from '../src/config/load-config.ts';
import type { ServerConfig } from '../src/config/server-config.ts';
import { useTempDirs } from './temp-dirs.ts';
import { marinaErrorOf } from './marina-error-of.ts';

const newTempDir = useTempDirs('marina-config-malformed-');

function dirWith(text: string): string {
  const cwd = newTempDir();
  writeFileSync(path.join(cwd, 'config.properties'), text);
  return cwd;
}

async function load(text: string): Promise<ServerConfig> {
  return loadConfig({ cliOptions: {}, env: {}, cwd: dirWith(text) });
}

function errorOf(action: () => unknown): MarinaError {
  try {
    action();
  } catch (error) {
    if (isMarinaError(error)) return error;
    throw error;
  }
  throw new Error('expected an error');
}

function loadError(text: string): Promise<MarinaError> {
  return marinaErrorOf(load(text));
}

describe('malformed configuration', () => {
  it('stops on a line without separator or value, with file:line and the text', async () => {
    const error = await loadError('job_queue_size=5\n\ninference_address\n');
    expect(error.code).toBe('MARINA_ERR_CONFIG_LINE_MALFORMED');
    expect(error.message).toMatch(/config\.properties:3: malformed line 'inference_address': expected 'key=value'/);
    expect(error.details).toMatchObject({ line: 3 });
  });

  it('stops on a bad number, naming key, value, line and what is allowed', async () => {
    const error = await loadError('# queue\njob_queue_size=abc');
    expect(error.code).toBe('MARINA_ERR_CONFIG_VALUE_INVALID');
    expect(error.message).toContain(
      'config.properties:2: job_queue_size=abc must be integer (Jobs queued per model version; default 100)',
    );
  });

  it('lists every bad value at once', async () => {
    const error = await loadError('job_queue_size=0\nmax_request_size=-5\nenable_model_api=yes');
    expect(error.message).toContain('config.properties:1: job_queue_size=0 must be >= 1');
    expect(error.message).toContain('config.properties:2: max_request_size=-5 must be >= 1');
    expect(error.message).toContain('config.properties:3: enable_model_api=yes must be boolean');
  });

  it('accepts booleans in any case, like Java', async () => {
    expect((await load('enable_model_api=True')).enableModelApi).toBe(true);
  });

  it('warns about unknown keys, with a suggestion, and keeps going', async () => {
    const config = await load('inferance_address=http://127.0.0.1:1\nmy_setting=1');
    expect(config.unknownKeys).toEqual(['inferance_address', 'my_setting']);
    expect(config.warnings).toContain(
      'unknown config key(s) ignored: inferance_address (config.properties:1; did you mean inference_address?), my_setting (config.properties:2)',
    );
    expect(config.inferenceAddress.port).toBe(8080);
  });

  it('notes TorchServe keys it does not use in one informational warning', async () => {
    const config = await load('vmargs=-Xmx4g\nnumber_of_gpu=1\nipex_enable=true');
    expect(config.unknownKeys).toEqual([]);
    expect(config.warnings).toContain(
      'TorchServe key(s) that Marina does not use, ignored: vmargs, number_of_gpu, ipex_enable',
    );
  });

  it.each([
    ['inference_address=127.0.0.1:8080', 'is not a valid address'],
    ['inference_address=http://127.0.0.1:70000', 'is not a valid address'],
    ['management_address=unix:/tmp/sock', 'Unix sockets are not supported yet'],
  ])('stops on the address %s', async (line, text) => {
    const error = await loadError(line);
    expect(error.code).toBe('MARINA_ERR_CONFIG_ADDRESS_INVALID');
    expect(error.message).toContain('config.properties:1:');
    expect(error.message).toContain(text);
  });

  it('stops on an https address without key and certificate files', () => {
    expect(errorOf(() => configFromProperties({ inference_address: 'https://127.0.0.1:8443' })).code).toBe(
      'MARINA_ERR_CONFIG_TLS_FILES_MISSING',
    );
  });

  it('stops on an allowed_urls entry that is not a regular expression', () => {
    const error = errorOf(() => configFromProperties({ allowed_urls: 'https://ok/.*,file://(unclosed' }));
    expect(error.code).toBe('MARINA_ERR_CONFIG_ALLOWED_URLS_INVALID');
    expect(error.message).toContain("allowed_urls entry 'file://(unclosed'");
  });

  it.each([
    ['all,a.mar', 'cannot be combined'],
    ['bad name=a.mar', "invalid model name 'bad name'"],
    ['m=', 'has no archive after ='],
  ])('stops on the load_models value %s', (value, text) => {
    const error = errorOf(() => configFromProperties({ load_models: value }));
    expect(error.code).toBe('MARINA_ERR_CONFIG_LOAD_MODELS_INVALID');
    expect(error.message).toContain(text);
  });

  it('stops when the model store does not exist', async () => {
    const error = await loadError('model_store=nowhere');
    expect(error.code).toBe('MARINA_ERR_CONFIG_MODEL_STORE_NOT_FOUND');
    expect(error.message).toContain('config.properties:1: the model store');
  });

  it("requires a model store to serve, as TorchServe's launcher", async () => {
    const config = await load('job_queue_size=5');
    expect(errorOf(() => assertModelStoreConfigured(config)).message).toContain(
      'Missing mandatory parameter --model-store',
    );
    const cwd = dirWith('model_store=store');
    mkdirSync(path.join(cwd, 'store'));
    const withStore = await loadConfig({ cliOptions: {}, env: {}, cwd });
    expect(() => assertModelStoreConfigured(withStore)).not.toThrow();
  });

  it('stops on an OMP_NUM_THREADS that is not a whole number', async () => {
    const error = await loadConfig({ cliOptions: {}, env: { OMP_NUM_THREADS: 'two' }, cwd: dirWith('') }).then(
      () => ({ code: 'none', message: '' }),
      (caught: unknown) => caught as MarinaError,
    );
    expect(error.code).toBe('MARINA_ERR_CONFIG_VALUE_INVALID');
    expect(error.message).toContain("OMP_NUM_THREADS='two'");
  });
});
