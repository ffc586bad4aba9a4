import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { BatchAggregator, type DispatchReason } from '../src/scheduling/batch-aggregator.ts';
import { Job } from '../src/scheduling/job.ts';
import { JobQueue } from '../src/scheduling/job-queue.ts';

/** A fake pool: named workers, some idle; dispatches are recorded. */
function setup(options: { batchSize: number; maxBatchDelayMs: number; workers: string[]; busy?: number }) {
  const idle = [...options.workers];
  let busy = options.busy ?? 0;
  const queue = new JobQueue({ capacity: 100, label: "model 'm' version '1'" });
  const sent: Array<{ worker: string; ids: string[]; reason: DispatchReason }> = [];
  const aggregator = new BatchAggregator<string>({
    queue,
    batchSize: options.batchSize,
    maxBatchDelayMs: options.maxBatchDelayMs,
    acquireIdleWorker: () => idle.shift(),
    busyWorkerCount: () => busy,
    dispatch: (worker, jobs, reason) => {
      busy++;
      sent.push({ worker, ids: jobs.map((j) => j.requestId), reason });
    },
  });
  let n = 0;
  const add = (count = 1) => {
    for (let i = 0; i < count; i++) queue.offer(new Job({ requestId: `r${n++}`, input: {} }));
    aggregator.pump();
  };
  const finish = (worker: string) => {
    busy--;
    idle.push(worker);
    aggregator.pump();
  };
  return { aggregator, queue, sent, add, finish, setBusy: (b: number) => (busy = b) };
}

describe('BatchAggregator', () => {
  beforeEach(() => vi.useFakeTimers());
  afterEach(() => vi.useRealTimers());

  it('sends a lone job at once when nothing else is queued and no worker is busy', () => {
    const t = setup({ batchSize: 8, maxBatchDelayMs: 10_000, workers: ['w1'] });
    t.add();
    expect(t.sent).toEqual([{ worker: 'w1', ids: ['r0'], reason: 'idle' }]);
  });

  it('fills batches from the queue while the workers are busy', () => {
    const t = setup({ batchSize: 3, maxBatchDelayMs: 100, workers: ['w1'] });
    t.add();
    t.add(7);
    expect(t.sent).toHaveLength(1);
    t.finish('w1');
    expect(t.sent[1]).toEqual({ worker: 'w1', ids: ['r1', 'r2', 'r3'], reason: 'full' });
    t.finish('w1');
    expect(t.sent[2]).toEqual({ worker: 'w1', ids: ['r4', 'r5', 'r6'], reason: 'full' });
    t.finish('w1');
    // One left, no other worker busy: no point waiting.
    expect(t.sent[3]).toEqual({ worker: 'w1', ids: ['r7'], reason: 'idle' });
  });

  it('waits up to maxBatchDelay from the first job when other workers are busy, then sends what it has', () => {
    const t = setup({ batchSize: 4, maxBatchDelayMs: 100, workers: ['w2'], busy: 1 });
    t.add();
    vi.advanceTimersByTime(60);
    t.add();
    expect(t.sent).toEqual([]);
    expect(t.aggregator.isCollecting).toBe(true);
    vi.advanceTimersByTime(39);
    expect(t.sent).toEqual([]);
    vi.advanceTimersByTime(1);
    expect(t.sent).toEqual([{ worker: 'w2', ids: ['r0', 'r1'], reason: 'delay' }]);
  });

  it('sends as soon as the batch being collected is full, before the delay', () => {
    const t = setup({ batchSize: 3, maxBatchDelayMs: 1000, workers: ['w2'], busy: 1 });
    t.add();
    t.add();
    t.add();
    expect(t.sent).toEqual([{ worker: 'w2', ids: ['r0', 'r1', 'r2'], reason: 'full' }]);
    vi.advanceTimersByTime(2000);
    expect(t.sent).toHaveLength(1);
  });

  it('collects one batch at a time and never dispatches without an idle worker', () => {
    const t = setup({ batchSize: 2, maxBatchDelayMs: 50, workers: [], busy: 2 });
    t.add(5);
    expect(t.sent).toEqual([]);
    expect(t.queue.size).toBe(5);
  });

  it('sends a partial batch at once when maxBatchDelay is 0', () => {
    const t = setup({ batchSize: 4, maxBatchDelayMs: 0, workers: ['w2'], busy: 1 });
    t.add();
    expect(t.sent).toEqual([{ worker: 'w2', ids: ['r0'], reason: 'delay' }]);
  });

  it('flush sends the batch being collected', () => {
    const t = setup({ batchSize: 4, maxBatchDelayMs: 1000, workers: ['w2'], busy: 1 });
    t.add();
    t.aggregator.flush();
    expect(t.sent).toEqual([{ worker: 'w2', ids: ['r0'], reason: 'flush' }]);
  });
});

describe('JobQueue', () => {
  it('rejects at once when full, naming the model, the size and what to do', () => {
    const q = new JobQueue({ capacity: 1, label: "model 'resnet' version '1.0'" });
    q.offer(new Job({ requestId: 'a', input: {} }));
    expect(() => q.offer(new Job({ requestId: 'b', input: {} }))).toThrow(/model 'resnet' version '1.0' is overloaded: its job queue is full \(1 requests waiting.*Retry after/);
    expect(q.poll()?.requestId).toBe('a');
    expect(q.remainingCapacity).toBe(1);
  });
});
