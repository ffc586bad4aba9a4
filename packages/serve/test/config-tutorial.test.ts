import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { loadConfig } from '../src/config/load-config.ts';
import { useTempDirs } from './temp-dirs.ts';

const newTempDir = useTempDirs('marina-config-tutorial-');

const EXAMPLES = fileURLToPath(new URL('../../../examples/resnet-152/', import.meta.url));

/** Loads an example as `serve --start --disable-token-auth --enable-model-api --ts-config <file>` would, from a folder with a model store. */
async function loadExample(file: string, env: NodeJS.ProcessEnv = {}) {
  const cwd = newTempDir();
  mkdirSync(path.join(cwd, 'model_store'));
  return loadConfig({
    cliOptions: { tsConfig: path.join(EXAMPLES, file), disableTokenAuth: true, enableModelApi: true },
    env,
    cwd,
  });
}

describe('the ResNet-152 tutorial configurations', () => {
  it('config.properties: one worker loading resnet-152.mar, no warnings beyond allowed_urls', async () => {
    const config = await loadExample('config.properties');
    expect(config.loadModels).toEqual([{ url: 'resnet-152.mar' }]);
    expect(config.models).toEqual({
      'resnet-152': { '1.0': { defaultVersion: true, marName: 'resnet-152.mar', minWorkers: 1, maxWorkers: 1 } },
    });
    expect(config.disableTokenAuthorization).toBe(true);
    expect(config.enableModelApi).toBe(true);
    expect(config.inferenceAddress.raw).toBe('http://127.0.0.1:8080');
    expect(config.unknownKeys).toEqual([]);
    expect(config.warnings.filter((warning) => !warning.startsWith('allowed_urls is the default'))).toEqual([]);
  });

  it('config-batch.properties: batchSize 8, maxBatchDelay 100 ms, responseTimeout 200 s (JSON without backslashes)', async () => {
    const config = await loadExample('config-batch.properties');
    expect(config.models['resnet-152']?.['1.0']).toEqual({
      defaultVersion: true,
      marName: 'resnet-152.mar',
      minWorkers: 1,
      maxWorkers: 1,
      batchSize: 8,
      maxBatchDelayMs: 100,
      responseTimeoutSec: 200,
    });
  });

  it('config-workers.properties: two workers, netty threads, OMP_NUM_THREADS from the environment', async () => {
    const config = await loadExample('config-workers.properties', { OMP_NUM_THREADS: '1' });
    expect(config.models['resnet-152']?.['1.0']).toMatchObject({ minWorkers: 2, maxWorkers: 2 });
    expect(config.defaultWorkersPerModel).toBe(2);
    expect(config.numberOfNettyThreads).toBe(4);
    expect(config.ompNumThreads).toBe(1);
  });
});
