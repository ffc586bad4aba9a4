import { join } from 'node:path';
import { readFile } from 'node:fs/promises';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { writeSampleJpeg } from '@marina/model-zoo';
import { buildApp, type MarinaApp } from '../src/index.ts';
import { writeClassifierModel } from './fixtures.ts';
import { tempDir, testConfig, writeModelFolder } from './helpers.ts';

// A handler as users write one: it imports the libraries Marina runs on by their bare names,
// although the archive is extracted to a folder with no node_modules above it.
const sizeHandler = `
import sharp from 'sharp';
import * as ort from 'onnxruntime-node';
export async function handle(data) {
  return Promise.all(data.map(async (row) => {
    const { width, height } = await sharp(row.body).metadata();
    const tensor = new ort.Tensor('float32', new Float32Array([width, height]), [2]);
    return { width, height, tensorDims: tensor.dims };
  }));
}
`;

let dir: { path: string; cleanup: () => Promise<void> };
let app: MarinaApp;

/** POSTs the test's JPEG to a model's TorchServe prediction route. */
async function postImage(server: MarinaApp, model: string) {
  return server.inference.inject({
    method: 'POST',
    url: `/predictions/${model}`,
    payload: await readFile(join(dir.path, 'image.jpg')),
    headers: { 'content-type': 'image/jpeg' },
  });
}

beforeAll(async () => {
  dir = await tempDir();
  app = await buildApp(testConfig({}, dir.path));
  const folder = await writeModelFolder({
    dir: join(dir.path, 'sizer'),
    modelName: 'sizer',
    handler: 'size_handler.mjs',
    files: { 'size_handler.mjs': sizeHandler },
  });
  await app.registry.register({ url: 'sizer', archivePath: folder, synchronous: true });
});

afterAll(async () => {
  await app?.close();
  await dir?.cleanup();
});

it("resolves a custom handler's bare imports of sharp and onnxruntime-node from Marina's own packages", async () => {
  const imagePath = join(dir.path, 'image.jpg');
  await writeSampleJpeg({ outputPath: imagePath, width: 64, height: 48 });
  const res = await postImage(app, 'sizer');
  expect(res.statusCode, res.body).toBe(200);
  expect(res.json()).toEqual({ width: 64, height: 48, tensorDims: [2] });
});

it('resolves them too in a worker that started as a spare thread (a model loaded under model_memory_budget)', async () => {
  // Under a budget every load is given a spare thread (started before its model was known, or
  // started for it), whose handler import hooks were registered before it knew its model.
  const budgeted = await buildApp(testConfig({ residency: { memoryBudgetBytes: 4 * 2 ** 30 } }, dir.path));
  try {
    const first = await writeClassifierModel(dir.path, 'first');
    await budgeted.registry.register({ url: 'first', archivePath: first, synchronous: true });
    await budgeted.registry.register({ url: 'sizer', archivePath: join(dir.path, 'sizer'), synchronous: true });
    const res = await postImage(budgeted, 'sizer');
    expect(res.statusCode, res.body).toBe(200);
    expect(res.json()).toEqual({ width: 64, height: 48, tensorDims: [2] });
  } finally {
    await budgeted.close();
  }
});

it("resolves them in a thread a built-in handler's model left for it (evicted to make room, its thread recycled)", async () => {
  // A built-in handler's worker never registers the import hooks (they cost each worker a thread
  // of their own); the custom handler that takes its thread registers them before its import. The
  // process's memory is read through a deterministic probe (100 MiB per live worker) so that the
  // budget holds exactly one model and the second load evicts the first.
  const MiB = 2 ** 20;
  const budgeted = await buildApp(
    testConfig({ residency: { memoryBudgetBytes: 150 * MiB, unloadGraceSeconds: 1 } }, dir.path),
    { readMemoryBytes: () => budgeted.registry.stats().reduce((sum, s) => sum + s.workers * 100 * MiB, 0) },
  );
  try {
    const first = await writeClassifierModel(dir.path, 'first-recycled');
    await budgeted.registry.register({ url: 'first-recycled', archivePath: first, synchronous: true });
    await budgeted.registry.register({ url: 'sizer', archivePath: join(dir.path, 'sizer') });
    const classified = await postImage(budgeted, 'first-recycled');
    expect(classified.statusCode, classified.body).toBe(200);
    const firstThread = budgeted.registry.getVersion('first-recycled').pool.workers[0]!.threadId;
    expect(firstThread).toBeGreaterThan(0);
    const res = await postImage(budgeted, 'sizer');
    expect(res.statusCode, res.body).toBe(200);
    expect(res.json()).toEqual({ width: 64, height: 48, tensorDims: [2] });
    expect(budgeted.registry.describe('first-recycled')[0]).toMatchObject({ state: 'registered' });
    expect(budgeted.registry.getVersion('sizer').pool.workers[0]!.threadId).toBe(firstThread);
  } finally {
    await budgeted.close();
  }
});
