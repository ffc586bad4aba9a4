/**
 * The config.properties the bench writes for a server: one model by default, or (the traffic
 * experiment) several archives in load_models and the whole models JSON given.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { writeServerConfig } from '../src/server-process.ts';

const dir = mkdtempSync(join(tmpdir(), 'marina-bench-config-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const base = {
  serveBin: 'serve.js',
  modelStoreDir: '/store',
  archiveFileName: 'm.mar',
  modelName: 'm',
  modelVersion: '1.0',
  workDir: dir,
  ports: [1, 2, 3] as [number, number, number],
};

function keys(path: string): Map<string, string> {
  return new Map(
    readFileSync(path, 'utf8')
      .trim()
      .split('\n')
      .map((line) => [line.slice(0, line.indexOf('=')), line.slice(line.indexOf('=') + 1)] as [string, string]),
  );
}

describe('writeServerConfig', () => {
  it('loads the one model, with its settings as the models JSON', async () => {
    const config = keys(await writeServerConfig({ ...base, settings: { minWorkers: 2 } }));
    expect(config.get('load_models')).toBe('m=m.mar');
    expect(JSON.parse(config.get('models')!)).toEqual({ m: { '1.0': { minWorkers: 2 } } });
  });

  it('takes load_models and the whole models JSON as given (several versions, a traffic policy)', async () => {
    const modelsJson = {
      m: { '1.0': { minWorkers: 1 }, '2.0': { minWorkers: 1 }, $traffic: { weights: { '1.0': 90, '2.0': 10 } } },
    };
    const config = keys(
      await writeServerConfig({
        ...base,
        settings: { minWorkers: 5 },
        loadModels: 'm=v1.mar,m=v2.mar',
        modelsJson,
      }),
    );
    expect(config.get('load_models')).toBe('m=v1.mar,m=v2.mar');
    expect(JSON.parse(config.get('models')!)).toEqual(modelsJson);
    expect(config.get('management_address')).toBe('http://127.0.0.1:2');
  });

  it("writes a property given over a default in the default's place, each key once", async () => {
    const path = await writeServerConfig({
      ...base,
      properties: { enable_metrics_api: 'true', model_memory_budget: '600MB' },
    });
    const lines = readFileSync(path, 'utf8').trim().split('\n');
    expect(lines.filter((line) => line.startsWith('enable_metrics_api='))).toEqual(['enable_metrics_api=true']);
    expect(lines.indexOf('enable_metrics_api=true')).toBeLessThan(lines.indexOf('disable_token_authorization=true'));
    expect(keys(path).get('model_memory_budget')).toBe('600MB');
  });
});
