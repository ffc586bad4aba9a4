import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { writeTinyTensorModel } from '@marina/model-zoo';
import { buildApp, type MarinaApp } from '../src/index.ts';
import { tempDir, testConfig, writeModelFolder } from './helpers.ts';

describe('loading models at startup', () => {
  let dir: { path: string; cleanup: () => Promise<void> };
  let app: MarinaApp;
  let result: Awaited<ReturnType<MarinaApp['loadStartupModels']>>;

  beforeAll(async () => {
    dir = await tempDir();
    const store = join(dir.path, 'store');
    await mkdir(store);
    await writeModelFolder({
      dir: join(store, 'good'),
      modelName: 'good',
      handler: 'tensor',
      writeModel: (p) => writeTinyTensorModel({ outputPath: p }),
    });
    await writeModelFolder({
      dir: join(store, 'garbage-weights'),
      modelName: 'garbage',
      handler: 'tensor',
      writeModel: (p) => writeFile(p, 'this is not an onnx model'),
    });
    await writeFile(join(store, 'broken.mar'), 'PK\u0003\u0004 truncated zip');
    await writeFile(join(store, 'notes.txt'), 'not an archive, ignored');
    app = await buildApp(testConfig({ modelStore: store, loadModels: 'all' }, dir.path));
    result = await app.loadStartupModels();
  });

  afterAll(async () => {
    await app?.close();
    await dir?.cleanup();
  });

  it('reports each model that fails and skips it', () => {
    expect(result.loaded).toEqual([{ modelName: 'good', modelVersion: '1.0' }]);
    expect(result.failed.map((f) => f.url).sort()).toEqual(['broken.mar', 'garbage-weights']);
    const garbage = result.failed.find((f) => f.url === 'garbage-weights')!;
    expect(garbage.error.code).toBe('MARINA_ERR_WORKER_START_FAILED');
    expect(garbage.error.message).toContain('garbage');
    expect(app.registry.list().map((m) => m.modelName)).toEqual(['good']);
  });

  it('serves the models that loaded', async () => {
    const res = await app.inference.inject({
      method: 'POST',
      url: '/predictions/good',
      payload: { data: [[0, 0, 0, 0]] },
    });
    expect(res.statusCode).toBe(200);
    expect(res.json().outputs.output.data).toEqual([1, 1, 1, 1]);
    const ping = await app.inference.inject({ method: 'GET', url: '/ping' });
    expect(ping.statusCode).toBe(200);
    expect(ping.json()).toEqual({ status: 'Healthy' });
  });
});
