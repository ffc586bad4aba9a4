import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
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

/**
 * A real 2-thread session of the options Marina gives it, and the threads onnxruntime started for
 * it (its intra-op pool): every thread that appeared while the session was created. Threads that
 * merely appeared then (libuv's pool) sleep and add nothing.
 */
async function openSession(modelPath: string, modelConfig: Record<string, unknown>): Promise<{ session: ort.InferenceSession; pool: string[] }> {
  const before = threadIds();
  const session = await ort.InferenceSession.create(modelPath, createSessionOptions({ intraOpNumThreads: 2 }, readOrtModelSettings(modelConfig)));
  return { session, pool: [...threadIds()].filter((tid) => !before.has(tid)) };
}

/** CPU time the session's pool threads use in the 300 ms after a run returns (a wait long enough for onnxruntime's spin, about 50 ms on the project's machine). */
async function cpuAfterRun(opened: { session: ort.InferenceSession; pool: string[] }, feeds: Record<string, ort.Tensor>): Promise<number> {
  await opened.session.run(feeds);
  const start = cpuNs(opened.pool);
  await sleep(300);
  return cpuNs(opened.pool) - start;
}

describe.runIf(process.platform === 'linux')('intra-op spinning after a run (real onnxruntime sessions, thread CPU from /proc)', { timeout: 60_000 }, () => {
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
      // Warm-up runs (first-run allocation), each followed by the quiet wait.
      await cpuAfterRun(stopping, feeds);
      await cpuAfterRun(spinning, feeds);
      // A stopped thread sleeps: it runs only for the instant it takes to stop (well under 2 ms).
      // A spinning one burns its core until its spin ends, tens of ms of CPU.
      const stoppedNs = await cpuAfterRun(stopping, feeds);
      const spunNs = await cpuAfterRun(spinning, feeds);
      expect(stoppedNs).toBeLessThan(2e6);
      expect(spunNs).toBeGreaterThan(2e6);
    } finally {
      await stopping.session.release();
      await spinning.session.release();
    }
  });
});
