import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { setImmediate } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as ort from 'onnxruntime-node';
import { writeSlowModel } from '@marina/model-zoo';
import { createSessionOptions, readOrtModelSettings } from '../src/backend/ort-session.ts';
import { tempDir } from './helpers.ts';

/** This process's thread ids. */
function threadIds(): Set<string> {
  return new Set(readdirSync(`/proc/${process.pid}/task`));
}

/** Nanoseconds the threads have run on a CPU (the first field of each thread's schedstat). */
function cpuNs(tids: Iterable<string>): number {
  let sum = 0;
  for (const tid of tids) {
    try {
      sum += Number(readFileSync(`/proc/${process.pid}/task/${tid}/schedstat`, 'utf8').split(' ')[0]);
    } catch {
      // the thread has ended
    }
  }
  return sum;
}

/** A thread's scheduler state (R runnable, S sleeping, …), or undefined once it has ended. */
function threadState(tid: string): string | undefined {
  try {
    const stat = readFileSync(`/proc/${process.pid}/task/${tid}/stat`, 'utf8');
    // The state follows the command name, which is in parentheses and may hold spaces.
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[0];
  } catch {
    return undefined;
  }
}

/**
 * A real 2-thread session of the options Marina gives it, and the threads onnxruntime started for
 * it (its intra-op pool): every thread that appeared while the session was created. Threads that
 * merely appeared then (libuv's pool) sleep and add nothing.
 */
async function openSession(
  modelPath: string,
  modelConfig: Record<string, unknown>,
): Promise<{ session: ort.InferenceSession; pool: string[] }> {
  const before = threadIds();
  const session = await ort.InferenceSession.create(
    modelPath,
    createSessionOptions({ intraOpNumThreads: 2 }, readOrtModelSettings(modelConfig)),
  );
  return { session, pool: [...threadIds()].filter((tid) => !before.has(tid)) };
}

/**
 * CPU time the session's pool threads use from the moment a run returns until every one of them
 * sleeps. It waits on the threads' state, read on each turn of the event loop: a spinning thread
 * stays runnable until its spin ends, a stopped one goes to sleep at once.
 */
async function cpuUntilAsleep(
  opened: { session: ort.InferenceSession; pool: string[] },
  feeds: Record<string, ort.Tensor>,
): Promise<number> {
  await opened.session.run(feeds);
  const start = cpuNs(opened.pool);
  while (opened.pool.some((tid) => (threadState(tid) ?? 'S') !== 'S')) await setImmediate();
  return cpuNs(opened.pool) - start;
}

describe.runIf(process.platform === 'linux')(
  'intra-op spinning after a run (real onnxruntime sessions, thread CPU from /proc)',
  { timeout: 60_000 },
  () => {
    let dir: { path: string; cleanup: () => Promise<void> };
    let modelPath: string;
    let feeds: Record<string, ort.Tensor>;
    beforeAll(async () => {
      dir = await tempDir();
      modelPath = join(dir.path, 'slow.onnx');
      // Batch 8 × 512-wide MatMuls: enough work per operator for onnxruntime to use both threads.
      await writeSlowModel({ outputPath: modelPath, layers: 40, width: 512 });
      feeds = { input: new ort.Tensor('float32', new Float32Array(8 * 512).fill(0.5), [8, 512]) };
    });
    afterAll(async () => {
      await dir?.cleanup();
    });

    it('stops as the run returns by default; with forceSpinningStop: false the pool threads go on spinning after it', async () => {
      const stopping = await openSession(modelPath, {});
      const spinning = await openSession(modelPath, { onnxruntime: { forceSpinningStop: false } });
      try {
        expect(stopping.pool.length).toBeGreaterThan(0);
        expect(spinning.pool.length).toBeGreaterThan(0);
        // Warm-up runs (first-run allocation), each followed by the wait for sleeping threads.
        await cpuUntilAsleep(stopping, feeds);
        await cpuUntilAsleep(spinning, feeds);
        // A stopped thread sleeps: it runs only for the instant it takes to stop (well under 2 ms).
        // A spinning one burns its core until its spin ends, tens of ms of CPU.
        const stoppedNs = await cpuUntilAsleep(stopping, feeds);
        const spunNs = await cpuUntilAsleep(spinning, feeds);
        expect(stoppedNs).toBeLessThan(2e6);
        expect(spunNs).toBeGreaterThan(2e6);
      } finally {
        await stopping.session.release();
        await spinning.session.release();
      }
    });
  },
);
