/**
 * No request is ever left without an answer (issue 16 "Deadlines", "Scale from zero", "Tidy
 * ownership"): scale to zero, unregister with a stuck worker, client deadlines, registration
 * racing close. Real worker threads; every wait is on the model version's state.
 */
import { existsSync } from 'node:fs';
import { cp } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGateApp, until, type GateApp } from './gate-harness.ts';
import { writeGateModel } from './fixtures.ts';
import { marinaErrorOf } from './marina-error-of.ts';
import { registrationsFromSnapshot } from '../src/snapshot/restore-snapshot.ts';

let t: GateApp;
const folders: Record<string, string> = {};

beforeAll(async () => {
  t = await startGateApp({ cpuCount: 8 });
  const models: Array<[string, string]> = [
    ['halted', 'minWorkers: 1\nbatchSize: 1\n'],
    ['leaving', 'minWorkers: 1\nbatchSize: 1\nresponseTimeout: 1\n'],
    ['deadline', 'minWorkers: 1\nbatchSize: 1\nclientTimeoutInMills: 300\n'],
    ['lazy', 'batchSize: 1\n'],
    ['restored', 'batchSize: 1\n'],
  ];
  // Threads pinned: no worker is replaced to re-split the cores while a test watches it.
  for (const [name, yaml] of models) folders[name] = await writeGateModel(t.dir, name, `${yaml}intraOpNumThreads: 1\n`);
  for (const name of ['halted', 'leaving', 'deadline'])
    await t.app.registry.register({ url: name, archivePath: folders[name]!, synchronous: true });
}, 120_000);

afterAll(async () => {
  await t?.close();
});

describe('every admitted request gets an answer', { timeout: 60_000 }, () => {
  it('scaling to max_worker=0 answers the queued requests at once (503, no Retry-After); the running ones finish', async () => {
    const version = t.app.registry.getVersion('halted');
    const gate = t.gate();
    const a = t.post('halted', { gate: gate.path, value: 'a' });
    await until(version, () => version.runningJobs === 1);
    const b = t.post('halted', { value: 'b' });
    const c = t.post('halted', { value: 'c' });
    await until(version, () => version.queue.waiting === 2);

    await t.app.registry.scale('halted', undefined, { minWorkers: 0, maxWorkers: 0, synchronous: false });
    const rc = await c;
    expect(rc.status).toBe(503);
    expect(rc.json.marinaCode).toBe('MARINA_ERR_NO_WORKERS');
    expect(rc.headers.get('retry-after')).toBeNull();
    await gate.open();
    // a was running and b already in the retiring worker's hands: both are served.
    expect((await a).status).toBe(200);
    expect((await b).json.value).toBe('b');
    const later = await t.post('halted', { value: 'later' });
    expect(later.status).toBe(503);
    expect(later.json.marinaCode).toBe('MARINA_ERR_NO_WORKERS');
    expect(later.headers.get('retry-after')).toBeNull();
    await until(version, () => version.pool.workers.length === 0);
  });

  it('unregister with a stuck worker answers everything: 504 for the stuck batch at responseTimeout, 503 for what no worker is left to run', async () => {
    const version = t.app.registry.getVersion('leaving');
    const gate = t.gate();
    const a = t.post('leaving', { gate: gate.path, value: 'a' });
    await until(version, () => version.runningJobs === 1);
    const b = t.post('leaving', { value: 'b' });
    const c = t.post('leaving', { value: 'c' });
    await until(version, () => version.queue.waiting === 2);

    await t.app.registry.unregister('leaving');
    const [ra, rb, rc] = await Promise.all([a, b, c]);
    expect(ra.status).toBe(504);
    expect(ra.json.marinaCode).toBe('MARINA_ERR_RESPONSE_TIMEOUT');
    for (const r of [rb, rc]) {
      expect(r.status).toBe(503);
      expect(r.json.marinaCode).toBe('MARINA_ERR_MODEL_UNLOADING');
    }
    expect(version.pendingJobs).toBe(0);
    expect((await t.post('leaving', {})).status).toBe(404);
  });

  it('answers a request that waited longer than clientTimeoutInMills without running it, queued or in a prefetched batch', async () => {
    const version = t.app.registry.getVersion('deadline');
    const batches: number[] = [];
    version.on('batch', (e) => batches.push(e.batchSize));
    const gate = t.gate();
    const a = t.post('deadline', { gate: gate.path, value: 'a' });
    await until(version, () => version.runningJobs === 1);
    // b goes into the busy worker's prefetched batch (batchSize 1): it still waits for a.
    const b = t.post('deadline', { value: 'b' });
    await until(version, () => version.queue.waiting === 1 && version.queue.size === 0);
    // c stays in the queue: the worker already holds its one prefetched batch.
    const c = t.post('deadline', { value: 'c' });
    await until(version, () => version.queue.size === 1);
    // Both are answered at their deadlines while a still runs (the gate is closed).
    for (const response of [await b, await c]) {
      expect(response.status).toBe(503);
      expect(response.json.marinaCode).toBe('MARINA_ERR_CLIENT_TIMEOUT');
      expect(response.json.message).toContain('clientTimeoutInMills (300 ms)');
      expect(response.headers.get('retry-after')).toBe('1');
    }
    expect(existsSync(gate.path)).toBe(false);
    expect(t.app.registry.describe('deadline')[0]!.clientTimeoutInMills).toBe(300);
    await gate.open();
    expect((await a).status).toBe(200);
    // b's batch was already in the worker's hands, so it runs there (its answer is dropped); c never reached the handler.
    await until(version, () => batches.length === 2);
    expect(batches).toEqual([1, 1]);
    await until(version, () => version.pendingJobs === 0);
  });

  it('starts a worker on demand for a model scaled to zero that may autoscale (min 0, max 1)', async () => {
    await t.app.registry.register({
      url: 'lazy',
      archivePath: folders.lazy!,
      synchronous: true,
      initialWorkers: 0,
      maxWorkers: 1,
    });
    expect(t.app.registry.describe('lazy')[0]).toMatchObject({ minWorkers: 0, maxWorkers: 1, workers: [] });
    const r = await t.post('lazy', { value: 'woken' });
    expect(r.status).toBe(200);
    expect(r.json.value).toBe('woken');
    expect(t.app.registry.describe('lazy')[0]!.workers).toHaveLength(1);
  });

  it('serves a model restored from a snapshot taken at 0 workers (min 0, max 2), instead of 503 forever', async () => {
    const [registration] = registrationsFromSnapshot(
      {
        modelStore: t.dir,
        models: {
          restored: {
            '1.0': {
              defaultVersion: true,
              marName: 'restored',
              url: folders.restored!,
              minWorkers: 0,
              maxWorkers: 2,
              batchSize: 1,
              maxBatchDelay: 100,
              responseTimeout: 120,
            },
          },
        },
      },
      { modelStore: t.dir },
    );
    await t.app.registry.register({ ...registration!, modelName: 'restored' });
    expect(t.app.registry.describe('restored')[0]).toMatchObject({ minWorkers: 0, maxWorkers: 2, workers: [] });
    const r = await t.post('restored', { value: 'back' });
    expect(r.status).toBe(200);
    expect(r.json.value).toBe('back');
  });

  it('unregistering a downloaded model removes its extracted copy', async () => {
    const downloaded = join(t.dir, 'downloaded-copy');
    await cp(folders.lazy!, downloaded, { recursive: true });
    await t.app.registry.register({
      url: 'http://127.0.0.1/copy.mar',
      archivePath: downloaded,
      modelName: 'copy',
      isDownloaded: true,
      synchronous: true,
      initialWorkers: 0,
      maxWorkers: 0,
    });
    const { modelDir } = t.app.registry.getVersion('copy');
    expect(existsSync(modelDir)).toBe(true);
    await t.app.registry.unregister('copy');
    expect(existsSync(downloaded)).toBe(false);
    expect(existsSync(modelDir)).toBe(false);
  });
});

describe('registration racing close()', { timeout: 60_000 }, () => {
  it('a register that is still opening its archive when close() starts is refused and starts no worker', async () => {
    const other = await startGateApp();
    try {
      const folder = await writeGateModel(other.dir, 'late');
      const registering = other.app.registry.register({ url: 'late', archivePath: folder, synchronous: true });
      const closing = other.app.registry.close();
      const error = await marinaErrorOf(registering);
      expect(error.code).toBe('MARINA_ERR_SERVER_CLOSING');
      await closing;
      expect(other.app.registry.list()).toEqual([]);
      expect(other.app.registry.stats()).toEqual([]);
    } finally {
      await other.close();
    }
  });
});
