import { afterEach, describe, expect, it } from 'vitest';
import { buildApp, resolveIntraOpThreads, type MarinaApp } from '../src/index.ts';
import { createSessionOptions } from '../src/backend/ort-session.ts';
import { tempDir, testConfig } from './helpers.ts';
import { writeSleepyModel } from './fixtures.ts';

describe('intra-op thread defaults', () => {
  it('prefers the model setting, then OMP_NUM_THREADS, then cores divided among all workers', () => {
    expect(resolveIntraOpThreads({ configured: 3, ompNumThreads: 2, cpuCount: 8, totalWorkers: 4 })).toEqual({
      intraOpNumThreads: 3,
      source: 'model config',
    });
    expect(resolveIntraOpThreads({ configured: undefined, ompNumThreads: 2, cpuCount: 8, totalWorkers: 4 })).toEqual({
      intraOpNumThreads: 2,
      source: 'OMP_NUM_THREADS',
    });
    expect(
      resolveIntraOpThreads({ configured: undefined, ompNumThreads: undefined, cpuCount: 8, totalWorkers: 3 }),
    ).toEqual({ intraOpNumThreads: 2, source: 'cores' });
    expect(
      resolveIntraOpThreads({ configured: undefined, ompNumThreads: undefined, cpuCount: 2, totalWorkers: 5 }),
    ).toEqual({ intraOpNumThreads: 1, source: 'cores' });
  });

  it('lets intra-op threads spin by default, and a server-wide MARINA_ORT_ALLOW_SPINNING=0 turns it off for a shared machine', () => {
    const spinning = { session: { 'intra_op.allow_spinning': '1', force_spinning_stop: '1' } };
    expect(createSessionOptions({ intraOpNumThreads: 2 })).toEqual({
      graphOptimizationLevel: 'all',
      intraOpNumThreads: 2,
      interOpNumThreads: 1,
      executionMode: 'sequential',
      executionProviders: ['cpu'],
      extra: spinning,
    });
    expect(createSessionOptions({ intraOpNumThreads: 2, allowSpinning: false }).extra).toEqual({
      session: { 'intra_op.allow_spinning': '0' },
    });
  });

  // Starting several real workers takes seconds on a loaded machine: allow it (no assertion depends on it).
  describe('with real workers', { timeout: 60_000 }, () => {
    let app: MarinaApp | undefined;
    let cleanup: (() => Promise<void>) | undefined;
    afterEach(async () => {
      await app?.close();
      await cleanup?.();
    });

    it('splits the cores among every model loaded at startup, never oversubscribing', async () => {
      const dir = await tempDir();
      cleanup = dir.cleanup;
      await writeSleepyModel(dir.path, 'one', 'minWorkers: 2\n');
      await writeSleepyModel(dir.path, 'two', 'minWorkers: 1\n');
      await writeSleepyModel(dir.path, 'pinned', 'minWorkers: 1\nintraOpNumThreads: 3\n');
      app = await buildApp(testConfig({ cpuCount: 8, modelStore: dir.path, loadModels: 'all' }, dir.path));
      const { loaded, failed } = await app.loadStartupModels();
      expect(failed).toEqual([]);
      expect(loaded.map((m) => m.modelName).sort()).toEqual(['one', 'pinned', 'two']);
      const threads = (name: string) => app!.registry.describe(name)[0]!.workers.map((w) => w.intraOpNumThreads);
      // 4 workers in all share 8 cores: 2 each; the model's own setting wins.
      expect(threads('one')).toEqual([2, 2]);
      expect(threads('two')).toEqual([2]);
      expect(threads('pinned')).toEqual([3]);
      expect(app.registry.stats().find((s) => s.modelName === 'one')).toMatchObject({
        workers: 2,
        intraOpNumThreads: 2,
      });
    });

    it('re-splits the cores when workers are scaled, replacing workers without losing a request', async () => {
      const dir = await tempDir();
      cleanup = dir.cleanup;
      const folder = await writeSleepyModel(dir.path, 'elastic');
      app = await buildApp(testConfig({ cpuCount: 2 }, dir.path));
      await app.registry.register({ url: 'elastic', archivePath: folder, synchronous: true });
      const threads = () =>
        app!.registry
          .describe('elastic')[0]!
          .workers.filter((w) => w.status !== 'UNLOADING')
          .map((w) => w.intraOpNumThreads)
          .sort();
      const version = app.registry.getVersion('elastic');
      // Waits for the worker set to show `expected`, re-checked at each change of the version.
      const until = (expected: number[]) =>
        new Promise<number[]>((resolve) => {
          const check = () => {
            if (JSON.stringify(threads()) !== JSON.stringify(expected)) return;
            version.off('progress', check);
            resolve(threads());
          };
          version.on('progress', check);
          check();
        });
      expect(threads()).toEqual([2]);
      // Requests keep flowing while workers are replaced.
      const inFlight = Array.from({ length: 30 }, (_, i) =>
        new Promise((r) => setTimeout(r, i * 20)).then(() =>
          app!.inference.inject({ method: 'POST', url: '/predictions/elastic', payload: { sleepMs: 20, value: i } }),
        ),
      );
      await app.registry.scale('elastic', undefined, { minWorkers: 2, maxWorkers: 2, synchronous: true });
      expect(await until([1, 1])).toEqual([1, 1]);
      await app.registry.scale('elastic', undefined, { minWorkers: 1, maxWorkers: 1, synchronous: true });
      expect(await until([2])).toEqual([2]);
      const responses = await Promise.all(inFlight);
      expect(responses.map((r) => r.statusCode)).toEqual(responses.map(() => 200));
      expect(responses.map((r) => r.json().echo)).toEqual(responses.map((_, i) => i));
    });

    it('uses OMP_NUM_THREADS when set', async () => {
      const dir = await tempDir();
      cleanup = dir.cleanup;
      const folder = await writeSleepyModel(dir.path, 'omp');
      app = await buildApp(testConfig({ cpuCount: 8, ompNumThreads: 3 }, dir.path));
      await app.registry.register({ url: 'omp', archivePath: folder, synchronous: true });
      expect(app.registry.describe('omp')[0]!.workers.map((w) => w.intraOpNumThreads)).toEqual([3]);
    });
  });
});
