import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { join } from 'node:path';
import { writeTinyTensorModel } from '@marina/model-zoo';
import { buildApp, type MarinaApp } from '../src/index.ts';
import type { BatchDoneEvent } from '../src/registry/model-registry-api.ts';
import { tempDir, testConfig, writeModelFolder } from './helpers.ts';

describe('dynamic batching through real workers and HTTP', () => {
  let dir: { path: string; cleanup: () => Promise<void> };
  let app: MarinaApp;
  const batches: BatchDoneEvent[] = [];

  beforeAll(async () => {
    dir = await tempDir();
    const folder = await writeModelFolder({
      dir: join(dir.path, 'affine'),
      modelName: 'affine',
      handler: 'tensor',
      writeModel: (path) => writeTinyTensorModel({ outputPath: path }),
      modelConfigYaml: 'batchSize: 8\nmaxBatchDelay: 5000\nminWorkers: 1\n',
    });
    app = await buildApp(testConfig({}, dir.path));
    app.registry.events.on('batch', (e) => batches.push(e));
    await app.registry.register({ url: 'affine', archivePath: folder, synchronous: true });
  });

  afterAll(async () => {
    await app?.close();
    await dir?.cleanup();
  });

  it('answers a lone request at once instead of waiting out maxBatchDelay', async () => {
    batches.length = 0;
    const res = await app.inference.inject({
      method: 'POST',
      url: '/predictions/affine',
      payload: { data: [[1, 2, 3, 4]] },
    });
    expect(res.statusCode).toBe(200);
    expect(res.json()).toEqual({ outputs: { output: { shape: [1, 4], data: [3, 5, 7, 9] } } });
    expect(batches).toHaveLength(1);
    expect(batches[0]).toMatchObject({ batchSize: 1, dispatchReason: 'idle' });
  });

  it('returns each concurrent caller its own result and forms batches larger than one', async () => {
    batches.length = 0;
    const n = 40;
    const responses = await Promise.all(
      Array.from({ length: n }, (_, i) =>
        app.inference.inject({
          method: 'POST',
          url: '/predictions/affine',
          headers: { 'content-type': 'application/json' },
          payload: JSON.stringify({ inputs: { input: { shape: [1, 4], data: [i, i + 0.5, -i, 2 * i] } } }),
        }),
      ),
    );
    responses.forEach((res, i) => {
      expect(res.statusCode).toBe(200);
      expect(res.json().outputs.output.data).toEqual([2 * i + 1, 2 * (i + 0.5) + 1, -2 * i + 1, 4 * i + 1]);
    });
    expect(batches.reduce((a, b) => a + b.batchSize, 0)).toBe(n);
    expect(Math.max(...batches.map((b) => b.batchSize))).toBeGreaterThan(1);
    expect(batches.every((b) => b.batchSize <= 8)).toBe(true);
  });
});
