/**
 * A shadow version's workers run at the lowest CPU priority (SCHED_IDLE), so its copies take only
 * spare CPU: real workers and sessions, each thread's policy read from /proc. The version's workers
 * are replaced when it becomes the shadow and again when it stops being one (a thread cannot raise
 * its own priority back).
 */
import { once } from 'node:events';
import { join } from 'node:path';
import { writeTinyClassifier } from '@marina/model-zoo';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp, type MarinaApp } from '../src/index.ts';
import { SHADOW_SCHED_IDLE_ENV, useSchedIdle, WORKER_SCHED_BATCH_ENV } from '../src/workers/use-sched-batch.ts';
import type { ModelVersion } from '../src/scheduling/model-version.ts';
import { until } from './gate-harness.ts';
import { SCHED_BATCH, SCHED_IDLE, newThreadPolicies, threadPolicies } from './thread-policies.ts';
import { tempDir, testConfig, writeModelFolder } from './helpers.ts';

/** Resolves once the version serves with exactly its one worker, READY, at `priority`. */
const servesAt = (version: ModelVersion, priority: 'normal' | 'background') =>
  until(version, () => {
    const workers = version.describe().workers;
    return workers.length === 1 && workers[0]!.status === 'READY' && workers[0]!.cpuPriority === priority;
  });

describe('shadow workers at background CPU priority', () => {
  it('is off with MARINA_SHADOW_SCHED_IDLE=0 and off the Linux kernel (a priority there is the whole process)', () => {
    expect(useSchedIdle({ [SHADOW_SCHED_IDLE_ENV]: '0' }, 'linux')).toEqual({
      applied: false,
      reason: `${SHADOW_SCHED_IDLE_ENV}=0`,
      isOff: true,
    });
    expect(useSchedIdle({}, 'darwin')).toMatchObject({ applied: false, isOff: true });
  });

  describe.runIf(process.platform === 'linux')('with real workers', { timeout: 120_000 }, () => {
    let app: MarinaApp;
    let cleanup: () => Promise<void>;
    const savedEnv = [process.env[WORKER_SCHED_BATCH_ENV], process.env[SHADOW_SCHED_IDLE_ENV]];

    beforeAll(async () => {
      delete process.env[WORKER_SCHED_BATCH_ENV];
      delete process.env[SHADOW_SCHED_IDLE_ENV];
      const dir = await tempDir();
      cleanup = dir.cleanup;
      // The pressure gate off: this machine's load must not hold the copy this test waits for.
      app = await buildApp(testConfig({ cpuCount: 2, shadowMaxCpuPressurePercent: 100 }, dir.path));
      for (const [version, seed] of [
        ['1.0', 1],
        ['2.0', 2],
      ] as const) {
        const folder = await writeModelFolder({
          dir: join(dir.path, `tiny_v${version}`),
          modelName: 'tiny',
          modelVersion: version,
          handler: 'tensor',
          // Two intra-op threads: onnxruntime starts a pool thread beside the worker's own.
          modelConfigYaml: 'minWorkers: 1\nmaxWorkers: 1\nintraOpNumThreads: 2\n',
          writeModel: (path) => writeTinyClassifier({ outputPath: path, inputSize: 8, seed }),
        });
        await app.registry.register({ url: folder, archivePath: folder, synchronous: true });
      }
    }, 120_000);

    afterAll(async () => {
      await app?.close();
      await cleanup?.();
      for (const [i, name] of [WORKER_SCHED_BATCH_ENV, SHADOW_SCHED_IDLE_ENV].entries()) {
        if (savedEnv[i] === undefined) delete process.env[name];
        else process.env[name] = savedEnv[i];
      }
    });

    it("runs the shadow's new workers under SCHED_IDLE, answers its copies there, and gives it normal workers again when it stops being the shadow", async () => {
      const live = app.registry.getVersion('tiny', '1.0');
      const shadow = app.registry.getVersion('tiny', '2.0');
      await servesAt(shadow, 'normal');
      const liveWorker = live.describe().workers[0]!.id;

      const beforeShadow = threadPolicies();
      app.registry.setTrafficPolicy('tiny', { weights: { '1.0': 100 }, shadow: { version: '2.0', percent: 100 } });
      await servesAt(shadow, 'background');
      // The replacement's JavaScript thread and onnxruntime's pool thread, at least; nothing else new runs under SCHED_IDLE.
      const started = newThreadPolicies(beforeShadow);
      expect(started.filter((p) => p === SCHED_IDLE).length).toBeGreaterThanOrEqual(2);
      // The live version kept its worker, at normal priority, and the HTTP thread is untouched.
      expect(live.describe().workers.map((w) => [w.id, w.cpuPriority])).toEqual([[liveWorker, 'normal']]);
      expect(threadPolicies().get(process.pid)).not.toBe(SCHED_IDLE);

      // A live request is answered by 1.0; its copy runs on the background worker and is compared.
      const copied = once(app.registry.events, 'shadow');
      const answer = await app.registry.predict({
        modelName: 'tiny',
        requestId: 'live-1',
        input: { body: { inputs: { input: { shape: [1, 3, 8, 8], data: new Array(192).fill(0.25) } } } },
      });
      expect(answer.modelVersion).toBe('1.0');
      const [outcome] = await copied;
      expect(outcome).toMatchObject({ modelName: 'tiny', modelVersion: '2.0', outcome: 'answered' });
      expect(outcome.agreement).toBeGreaterThan(0);

      // No longer the shadow: a worker that can run at normal priority replaces the background one.
      const beforeNormal = threadPolicies();
      app.registry.setTrafficPolicy('tiny', { weights: { '1.0': 90, '2.0': 10 } });
      await servesAt(shadow, 'normal');
      const restarted = newThreadPolicies(beforeNormal);
      expect(restarted.filter((p) => p === SCHED_BATCH).length).toBeGreaterThanOrEqual(2);
      expect(restarted.filter((p) => p === SCHED_IDLE)).toEqual([]);
      expect(live.describe().workers.map((w) => w.id)).toEqual([liveWorker]);
    });
  });
});
