/**
 * The thread budget accepts what TorchServe accepts (two workers per model beside other models,
 * minWorkers: 2 in model-config.yaml, min_worker=2 beside another model) on a 2-core machine:
 * every worker then runs with one intra-op thread, and one warning says the machine is
 * oversubscribed. Only absurd requests (min_worker=1000) are refused (waiting-and-running.test.ts).
 * Real worker threads, archives on disk.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp, type MarinaApp } from '../src/index.ts';
import { writeSleepyModel } from './fixtures.ts';
import { tempDir, testConfig } from './helpers.ts';

describe('thread budget with many models on 2 cores', () => {
  let dir: Awaited<ReturnType<typeof tempDir>>;
  let app: MarinaApp;
  const warnings: string[] = [];

  beforeAll(async () => {
    dir = await tempDir('marina-thread-budget-');
    // TorchServe-normal: no workers in the archives, default_workers_per_model=2, load_models=all.
    for (const name of ['one', 'two', 'three']) await writeSleepyModel(`${dir.path}/store`, name, 'batchSize: 1\n');
    await writeSleepyModel(dir.path, 'yaml-two', 'minWorkers: 2\nmaxWorkers: 2\n');
    app = await buildApp(
      testConfig(
        { modelStore: `${dir.path}/store`, loadModels: 'all', defaultWorkersPerModel: 2, cpuCount: 2 },
        dir.path,
      ),
      { log: (level, message) => level === 'warn' && warnings.push(message) },
    );
  });

  afterAll(async () => {
    await app?.close();
    await dir?.cleanup();
  });

  it('loads every archive of load_models=all with default_workers_per_model=2, one thread each, and warns once', async () => {
    const result = await app.loadStartupModels();
    expect(result.failed).toEqual([]);
    expect(result.loaded.map((m) => m.modelName).sort()).toEqual(['one', 'three', 'two']);
    for (const name of ['one', 'two', 'three']) {
      const [d] = app.registry.describe(name);
      expect(d!.state).toBe('resident');
      expect(d!.workers.map((w) => [w.status, w.intraOpNumThreads])).toEqual([
        ['READY', 1],
        ['READY', 1],
      ]);
    }
    expect(warnings.filter((w) => w.includes('oversubscribed'))).toHaveLength(1);
  });

  it('registers an archive whose model-config.yaml asks for minWorkers: 2, and scales another to min_worker=2, warning no more', async () => {
    const registered = await app.registry.register({ url: 'yaml-two', archivePath: `${dir.path}/yaml-two` });
    expect(registered).toMatchObject({ workersRequested: 2, workersReady: 2 });
    await app.registry.scale('one', undefined, { minWorkers: 3, maxWorkers: 3, synchronous: true });
    expect(app.registry.describe('one')[0]!.workers).toHaveLength(3);
    expect(app.registry.stats().every((s) => s.intraOpNumThreads === 1)).toBe(true);
    expect(warnings.filter((w) => w.includes('oversubscribed'))).toHaveLength(1);
  });
});
