import { afterEach, describe, expect, it } from 'vitest';
import { buildApp, type MarinaApp } from '../src/index.ts';
import { useSchedBatch, WORKER_SCHED_BATCH_ENV } from '../src/workers/use-sched-batch.ts';
import { SCHED_BATCH, SCHED_OTHER, newThreadPolicies, threadPolicies } from './thread-policies.ts';
import { tempDir, testConfig } from './helpers.ts';
import { writeClassifierModel } from './fixtures.ts';

describe('worker threads under SCHED_BATCH', () => {
  it('is off with MARINA_WORKER_SCHED_BATCH=0 and off the Linux kernel, saying so', () => {
    expect(useSchedBatch({ [WORKER_SCHED_BATCH_ENV]: '0' }, 'linux')).toEqual({
      applied: false,
      reason: `${WORKER_SCHED_BATCH_ENV}=0`,
      isOff: true,
    });
    expect(useSchedBatch({}, 'darwin')).toMatchObject({ applied: false, isOff: true });
  });

  describe.runIf(process.platform === 'linux')('with real workers', { timeout: 60_000 }, () => {
    let app: MarinaApp | undefined;
    let cleanup: (() => Promise<void>) | undefined;
    const savedEnv = process.env[WORKER_SCHED_BATCH_ENV];
    afterEach(async () => {
      await app?.close();
      app = undefined;
      await cleanup?.();
      if (savedEnv === undefined) delete process.env[WORKER_SCHED_BATCH_ENV];
      else process.env[WORKER_SCHED_BATCH_ENV] = savedEnv;
    });

    const serveClassifier = async () => {
      const dir = await tempDir();
      cleanup = dir.cleanup;
      // Two intra-op threads: onnxruntime starts a pool thread beside the worker's own.
      const folder = await writeClassifierModel(dir.path, 'cls', {
        modelConfigYaml: 'minWorkers: 1\nintraOpNumThreads: 2\n',
      });
      app = await buildApp(testConfig({ cpuCount: 2 }, dir.path));
      await app.registry.register({ url: 'cls', archivePath: folder, synchronous: true });
    };

    it('puts a worker thread and the onnxruntime pool it starts under SCHED_BATCH, and leaves the HTTP thread alone', async () => {
      delete process.env[WORKER_SCHED_BATCH_ENV];
      const before = threadPolicies();
      await serveClassifier();
      // The worker's JavaScript thread and onnxruntime's intra-op pool thread, at least.
      expect(newThreadPolicies(before).filter((p) => p === SCHED_BATCH).length).toBeGreaterThanOrEqual(2);
      expect(threadPolicies().get(process.pid)).toBe(SCHED_OTHER);
    });

    it('leaves every thread under the default policy with MARINA_WORKER_SCHED_BATCH=0', async () => {
      process.env[WORKER_SCHED_BATCH_ENV] = '0';
      const before = threadPolicies();
      await serveClassifier();
      const started = newThreadPolicies(before);
      expect(started.length).toBeGreaterThanOrEqual(2);
      expect(started.filter((p) => p === SCHED_BATCH)).toEqual([]);
    });
  });
});
