import { once } from 'node:events';
import { existsSync, watch } from 'node:fs';
import { readFile, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { writeSampleJpeg } from '@marina/model-zoo';
import { buildApp, type MarinaApp } from '../src/index.ts';
import { createServerPlugins } from '../src/server-plugins.ts';
import { tempDir, testConfig, writeModelFolder } from './helpers.ts';
import { writeClassifierModel } from './fixtures.ts';

/** Resolves once `path` exists: a watch on its folder, checked again after the watch is set up so no creation is missed. */
async function untilFileExists(path: string): Promise<void> {
  const watcher = watch(dirname(path));
  const created = new Promise<void>((resolve) => watcher.on('change', () => existsSync(path) && resolve()));
  try {
    if (!existsSync(path)) await created;
  } finally {
    watcher.close();
  }
}

/**
 * A handler whose warm-up request (`{"gate": true}`) writes `warming`, then blocks its thread until a file named `open`
 * appears in the model's folder: the test decides when warm-up ends, so "not ready before the
 * warm-up finished" is checked on states, not on timing. Other requests echo their value.
 */
const gatedHandlerSource = `
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
let modelDir;
export function initialize(context) { modelDir = context.modelDir; }
export function handle(data) {
  return data.map((row) => {
    if (row.body && row.body.gate) {
      writeFileSync(join(modelDir, 'warming'), '');
      const cell = new Int32Array(new SharedArrayBuffer(4));
      while (!existsSync(join(modelDir, 'open'))) Atomics.wait(cell, 0, 0, 5);
      return { warmed: true };
    }
    return { echo: row.body && row.body.value };
  });
}
`;

describe('warm-up (model-config.yaml warmup:)', { timeout: 60_000 }, () => {
  let dir: { path: string; cleanup: () => Promise<void> } | undefined;
  let app: MarinaApp | undefined;

  afterEach(async () => {
    await app?.close();
    await dir?.cleanup();
    app = undefined;
    dir = undefined;
  });

  /** The app with its management routes, as the server builds it (describe and readiness are asked over HTTP). */
  async function buildWithManagement(root: string): Promise<MarinaApp> {
    const config = testConfig({}, root);
    return buildApp(config, { plugins: await createServerPlugins(config) });
  }

  async function describeModel(name: string) {
    const response = await app!.management.inject({ method: 'GET', url: `/models/${name}` });
    return response.json()[0] as { workers: Array<{ status: string; warmupMs?: number }> };
  }

  async function isReady(name: string): Promise<boolean> {
    const response = await app!.management.inject({ method: 'GET', url: `/v1/models/${name}` });
    return (response.json() as { ready: boolean }).ready;
  }

  it('warms an image classifier up with a synthetic image at each batch size, and describe reports the time', async () => {
    dir = await tempDir();
    const folder = await writeClassifierModel(dir.path, 'tiny', {
      modelConfigYaml: 'batchSize: 2\nmaxBatchDelay: 5\nwarmup:\n  runs: 2\n  batchSizes: [1, 2]\n',
    });
    app = await buildWithManagement(dir.path);
    await app.registry.register({ url: 'tiny', archivePath: folder, synchronous: true });
    const [worker] = (await describeModel('tiny')).workers;
    expect(worker!.status).toBe('READY');
    expect(worker!.warmupMs).toBeTypeOf('number');
    expect(worker!.warmupMs).toBeGreaterThanOrEqual(0);
    const image = join(dir.path, 'cat.jpg');
    await writeSampleJpeg({ outputPath: image, width: 64, height: 48 });
    const response = await app.inference.inject({
      method: 'POST',
      url: '/predictions/tiny',
      payload: await readFile(image),
      headers: { 'content-type': 'image/jpeg' },
    });
    expect(response.statusCode).toBe(200);
  });

  it('keeps a model not ready until its warm-up with the sample input has finished', async () => {
    dir = await tempDir();
    const folder = await writeModelFolder({
      dir: join(dir.path, 'gated'),
      modelName: 'gated',
      handler: 'gated_handler.mjs',
      modelConfigYaml: 'minWorkers: 1\nwarmup:\n  input: warmup.json\n',
      files: { 'gated_handler.mjs': gatedHandlerSource, 'warmup.json': JSON.stringify({ gate: true }) },
    });
    app = await buildWithManagement(dir.path);
    await app.registry.register({ url: 'gated', archivePath: folder, synchronous: false });
    // Once the worker is inside its warm-up (it wrote `warming`), it stays LOADING until the gate opens.
    await untilFileExists(join(folder, 'warming'));
    expect((await describeModel('gated')).workers.map((w) => w.status)).toEqual(['LOADING']);
    expect(await isReady('gated')).toBe(false);
    expect(existsSync(join(folder, 'open'))).toBe(false);
    // The worker's load (warm-up included) ends with the registry's workerLoaded event.
    const loaded = once(app.registry.events, 'workerLoaded');
    await writeFile(join(folder, 'open'), '');
    await loaded;
    expect(await isReady('gated')).toBe(true);
    const [worker] = (await describeModel('gated')).workers;
    expect(worker!.status).toBe('READY');
    expect(worker!.warmupMs).toBeTypeOf('number');
    const response = await app.inference.inject({ method: 'POST', url: '/predictions/gated', payload: { value: 7 } });
    expect(response.json()).toEqual({ echo: 7 });
  });

  it('fails to load a custom handler that has warm-up but no sample input, with MARINA_ERR_WARMUP_FAILED', async () => {
    dir = await tempDir();
    const folder = await writeModelFolder({
      dir: join(dir.path, 'custom'),
      modelName: 'custom',
      handler: 'gated_handler.mjs',
      modelConfigYaml: 'warmup:\n  runs: 1\n',
      files: { 'gated_handler.mjs': gatedHandlerSource },
    });
    app = await buildWithManagement(dir.path);
    const error = await app.registry
      .register({ url: 'custom', archivePath: folder, synchronous: true })
      .catch((e: unknown) => e);
    expect(error).toMatchObject({ code: 'MARINA_ERR_WORKER_START_FAILED' });
    expect((error as Error).message).toContain('MARINA_ERR_WARMUP_FAILED');
    expect((error as Error).message).toContain('warmup.input');
  });

  it('refuses a warmup.input outside the archive', async () => {
    dir = await tempDir();
    await writeFile(join(dir.path, 'outside.json'), '{"gate": false}');
    const folder = await writeModelFolder({
      dir: join(dir.path, 'escape'),
      modelName: 'escape',
      handler: 'gated_handler.mjs',
      modelConfigYaml: 'warmup:\n  input: ../outside.json\n',
      files: { 'gated_handler.mjs': gatedHandlerSource },
    });
    app = await buildWithManagement(dir.path);
    const error = await app.registry
      .register({ url: 'escape', archivePath: folder, synchronous: true })
      .catch((e: unknown) => e);
    expect((error as Error).message).toContain('MARINA_ERR_ARCHIVE_PATH_ESCAPE');
  });
});
