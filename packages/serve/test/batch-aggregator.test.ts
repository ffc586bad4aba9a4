import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import {
  BatchAggregator,
  TOP_LEVEL_HOLD_MS,
  TOP_LEVEL_QUIET_BATCHES,
  type BatchTaker,
  type DispatchReason,
} from '../src/scheduling/batch-aggregator.ts';
import { Job } from '../src/scheduling/job.ts';
import { JobQueue } from '../src/scheduling/job-queue.ts';
import { createServeError } from '../src/errors.ts';

/**
 * Fake workers (pure scheduling logic, fake timers): a worker holds a running batch and at most
 * one prefetched batch, as the real Worker does; `start` makes its prefetched batch run (it then
 * asks for the next), `finish` ends its running batch.
 */
class FakeWorker implements BatchTaker {
  running: string[] | undefined;
  prefetched: string[] | undefined;
  constructor(readonly name: string) {}
  get isIdle() {
    return this.running === undefined && this.prefetched === undefined;
  }
  get wantsBatch() {
    return this.prefetched === undefined;
  }
}

function setup(options: {
  batchSize: number;
  maxBatchDelayMs: number;
  workers: number;
  capacity?: number;
  isIdleWaiting?: boolean;
}) {
  const workers = Array.from({ length: options.workers }, (_, i) => new FakeWorker(`w${i + 1}`));
  const queue = new JobQueue({ capacity: options.capacity ?? 100, label: "model 'm' version '1'" });
  const sent: Array<{ worker: string; ids: string[]; reason: DispatchReason }> = [];
  const aggregator = new BatchAggregator<FakeWorker>({
    queue,
    batchSize: options.batchSize,
    maxBatchDelayMs: options.maxBatchDelayMs,
    ...(options.isIdleWaiting ? { isIdleWaiting: true } : {}),
    workers: () => workers,
    dispatch: (worker, jobs, reason) => {
      worker.prefetched = jobs.map((j) => j.requestId);
      sent.push({ worker: worker.name, ids: worker.prefetched, reason });
    },
    expired: () => createServeError.MARINA_ERR_CLIENT_TIMEOUT('expired'),
  });
  let n = 0;
  const jobs: Job[] = [];
  const add = (count = 1, clientTimeoutMs?: number) => {
    for (let i = 0; i < count; i++) {
      const job = new Job({ requestId: `r${n++}`, input: {}, clientTimeoutMs });
      jobs.push(job);
      queue.offer(job);
    }
    aggregator.pump();
  };
  const worker = (name: string) => workers.find((w) => w.name === name)!;
  /** The worker's prefetched batch starts running: it asks for its next one. */
  const start = (name: string) => {
    const w = worker(name);
    queue.markStarted(w.prefetched!.length);
    w.running = w.prefetched;
    w.prefetched = undefined;
    aggregator.pump();
  };
  const finish = (name: string) => {
    worker(name).running = undefined;
    aggregator.pump();
  };
  /** The current turn of the event loop ends (the fake timers run the aggregator's setImmediate). */
  const endTurn = () => vi.advanceTimersByTime(0);
  return { aggregator, queue, sent, add, start, finish, jobs, endTurn };
}

describe('BatchAggregator (workers pull)', () => {
  beforeEach(() => vi.useFakeTimers());
  afterEach(() => vi.useRealTimers());

  it('gives an idle worker what is queued at the end of the turn, even a lone job with a long maxBatchDelay', () => {
    const t = setup({ batchSize: 8, maxBatchDelayMs: 10_000, workers: 1 });
    t.add();
    expect(t.sent).toEqual([]);
    t.endTurn();
    expect(t.sent).toEqual([{ worker: 'w1', ids: ['r0'], reason: 'idle' }]);
  });

  it('with batch_wait_when_idle, an idle worker waits maxBatchDelay for a partial batch, as TorchServe', () => {
    const t = setup({ batchSize: 4, maxBatchDelayMs: 1_000, workers: 1, isIdleWaiting: true });
    t.add();
    t.endTurn();
    vi.advanceTimersByTime(999);
    expect(t.sent).toEqual([]);
    t.add(1);
    vi.advanceTimersByTime(1);
    expect(t.sent).toEqual([{ worker: 'w1', ids: ['r0', 'r1'], reason: 'delay' }]);
    // A full batch still goes at once.
    t.start('w1');
    t.finish('w1');
    t.add(4);
    expect(t.sent.at(-1)).toEqual({ worker: 'w1', ids: ['r2', 'r3', 'r4', 'r5'], reason: 'full' });
  });

  it('sends the jobs that arrive in one turn to an idle worker as one batch, and a full batch at once', () => {
    const t = setup({ batchSize: 4, maxBatchDelayMs: 10_000, workers: 2 });
    t.add();
    t.add();
    t.add();
    expect(t.sent).toEqual([]);
    t.endTurn();
    expect(t.sent).toEqual([{ worker: 'w1', ids: ['r0', 'r1', 'r2'], reason: 'idle' }]);
    t.add(4);
    expect(t.sent[1]).toEqual({ worker: 'w2', ids: ['r3', 'r4', 'r5', 'r6'], reason: 'full' });
  });

  it('keeps at most one prefetched batch per worker; the rest stays in the queue', () => {
    const t = setup({ batchSize: 2, maxBatchDelayMs: 100, workers: 1 });
    t.add(7);
    expect(t.sent).toEqual([{ worker: 'w1', ids: ['r0', 'r1'], reason: 'full' }]);
    expect(t.queue.size).toBe(5);
    expect(t.queue.waiting).toBe(7);
    t.start('w1');
    // Starting batch k asks for batch k+1, formed now from the queue.
    expect(t.sent[1]).toEqual({ worker: 'w1', ids: ['r2', 'r3'], reason: 'full' });
    expect(t.queue.waiting).toBe(5);
    t.finish('w1');
    expect(t.sent).toHaveLength(2);
  });

  it("collects a busy worker's next batch for up to maxBatchDelay, then sends what it has", () => {
    const t = setup({ batchSize: 4, maxBatchDelayMs: 100, workers: 1 });
    t.add();
    t.endTurn();
    t.start('w1');
    t.add();
    vi.advanceTimersByTime(60);
    t.add();
    expect(t.sent).toHaveLength(1);
    expect(t.aggregator.isCollecting).toBe(true);
    vi.advanceTimersByTime(39);
    expect(t.sent).toHaveLength(1);
    vi.advanceTimersByTime(1);
    expect(t.sent[1]).toEqual({ worker: 'w1', ids: ['r1', 'r2'], reason: 'delay' });
  });

  it('sends the batch being collected as soon as it is full, or as soon as its worker becomes idle', () => {
    const t = setup({ batchSize: 3, maxBatchDelayMs: 1000, workers: 1 });
    t.add();
    t.endTurn();
    t.start('w1');
    t.add(3);
    expect(t.sent[1]).toEqual({ worker: 'w1', ids: ['r1', 'r2', 'r3'], reason: 'full' });
    t.start('w1');
    t.add();
    expect(t.sent).toHaveLength(2);
    t.finish('w1');
    t.endTurn();
    expect(t.sent[2]).toEqual({ worker: 'w1', ids: ['r4'], reason: 'idle' });
  });

  it("prefers an idle worker to a busy one's prefetch", () => {
    const t = setup({ batchSize: 4, maxBatchDelayMs: 1000, workers: 2 });
    t.add();
    t.endTurn();
    t.start('w1');
    t.add();
    t.endTurn();
    expect(t.sent.map((s) => s.worker)).toEqual(['w1', 'w2']);
  });

  it('sends a partial batch at once when maxBatchDelay is 0, and without waiting once flushing', () => {
    const t = setup({ batchSize: 4, maxBatchDelayMs: 0, workers: 1 });
    t.add();
    t.endTurn();
    t.start('w1');
    t.add();
    expect(t.sent[1]).toEqual({ worker: 'w1', ids: ['r1'], reason: 'delay' });
    const u = setup({ batchSize: 4, maxBatchDelayMs: 1000, workers: 1 });
    u.add();
    u.endTurn();
    u.start('w1');
    u.add();
    u.aggregator.flush();
    u.aggregator.pump();
    expect(u.sent[1]).toEqual({ worker: 'w1', ids: ['r1'], reason: 'flush' });
  });

  it('answers a queued job whose client timeout ran out, at its deadline, without a worker pulling', async () => {
    const t = setup({ batchSize: 1, maxBatchDelayMs: 0, workers: 1 });
    t.add();
    t.start('w1');
    t.add(1, 500);
    t.add(1, 500);
    expect(t.queue.size).toBe(1);
    vi.advanceTimersByTime(500);
    const expired = t.jobs[2]!;
    expect(expired.isSettled).toBe(true);
    await expect(expired.promise).rejects.toMatchObject({ code: 'MARINA_ERR_CLIENT_TIMEOUT' });
    expect(t.queue.size).toBe(0);
    expect(t.jobs[1]!.isSettled).toBe(false);
  });
});

describe('JobQueue', () => {
  it('rejects at once when full, naming the model, the size and what to do', () => {
    const q = new JobQueue({ capacity: 1, label: "model 'resnet' version '1.0'" });
    q.offer(new Job({ requestId: 'a', input: {} }));
    expect(() => q.offer(new Job({ requestId: 'b', input: {} }))).toThrow(
      /model 'resnet' version '1.0' is overloaded: its job queue is full \(1 requests waiting.*Retry after/,
    );
    expect(q.poll()?.requestId).toBe('a');
    expect(q.remainingCapacity).toBe(1);
  });

  it('counts a prefetched batch as waiting until it starts, and puts it back at the front when it never does', () => {
    const q = new JobQueue({ capacity: 4, label: "model 'm' version '1'" });
    for (const id of ['a', 'b', 'c']) q.offer(new Job({ requestId: id, input: {} }));
    const taken = q.take(2);
    expect(q.size).toBe(1);
    expect(q.waiting).toBe(3);
    q.offer(new Job({ requestId: 'd', input: {} }));
    expect(() => q.offer(new Job({ requestId: 'e', input: {} }))).toThrow(/queue is full/);
    q.returnToFront(taken);
    expect(q.waiting).toBe(4);
    expect([q.poll(), q.poll(), q.poll(), q.poll()].map((j) => j?.requestId)).toEqual(['a', 'b', 'c', 'd']);
  });

  it('keeps FIFO order when its ring wraps around and when jobs return to the front past its start', () => {
    const q = new JobQueue({ capacity: 8, label: "model 'm' version '1'" });
    const out: string[] = [];
    let n = 0;
    const offer = (count: number) => {
      for (let i = 0; i < count; i++) q.offer(new Job({ requestId: String(n++), input: {} }));
    };
    offer(6);
    for (let i = 0; i < 5; i++) out.push(q.poll()!.requestId);
    offer(7);
    const taken = q.take(3);
    q.returnToFront(taken);
    for (let j = q.poll(); j; j = q.poll()) out.push(j.requestId);
    expect(out).toEqual(Array.from({ length: 13 }, (_, i) => String(i)));
  });
});

describe('BatchAggregator with priority levels', () => {
  beforeEach(() => vi.useFakeTimers());
  afterEach(() => vi.useRealTimers());

  it(`while level 1 is active, prefetches only a top-level batch, and keeps a worker that answered one free for ${TOP_LEVEL_HOLD_MS} ms before lower-level work`, () => {
    const w = new FakeWorker('w1');
    const queue = new JobQueue({
      capacity: 100,
      label: "model 'm' version '1'",
      levels: [{ maxQueueSize: 0 }, { maxQueueSize: 0 }],
    });
    const sent: string[][] = [];
    const aggregator = new BatchAggregator<FakeWorker>({
      queue,
      batchSize: 1,
      maxBatchDelayMs: 0,
      prefetch: 'top-level',
      workers: () => [w],
      dispatch: (worker, jobs) => {
        worker.prefetched = jobs.map((j) => j.requestId);
        sent.push(worker.prefetched);
      },
      expired: () => createServeError.MARINA_ERR_CLIENT_TIMEOUT('expired'),
    });
    const add = (id: string, priority: number) => {
      queue.offer(new Job({ requestId: id, input: {}, arrivedAt: 0, schedule: { priority } }));
      aggregator.pump();
    };
    /** The running batch (if any) ends and the prefetched one starts. */
    const next = () => {
      queue.markStarted(w.prefetched!.length);
      w.running = w.prefetched;
      w.prefetched = undefined;
      aggregator.pump();
    };
    /** The running batch, a top-level one, ends with nothing prefetched: the version holds the worker. */
    const finishTopLevel = () => {
      w.running = undefined;
      aggregator.holdForTopLevel(w);
      aggregator.pump();
    };

    aggregator.noteTopLevel(); // level-1 traffic is active
    add('low-1', 2);
    vi.advanceTimersByTime(0);
    expect(sent).toEqual([['low-1']]);
    next();
    add('low-2', 2);
    expect(sent, 'a lower-level batch is not given to a busy worker').toHaveLength(1);
    add('high-1', 1);
    expect(sent.at(-1), 'a top-level batch is').toEqual(['high-1']);
    next();
    finishTopLevel();
    vi.advanceTimersByTime(TOP_LEVEL_HOLD_MS - 1);
    expect(sent, 'held: low-2 waits').toHaveLength(2);
    add('high-2', 1);
    expect(sent.at(-1), 'a top-level request takes the held worker at once').toEqual(['high-2']);
    next();
    finishTopLevel();
    vi.advanceTimersByTime(TOP_LEVEL_HOLD_MS - 1);
    expect(sent).toHaveLength(3);
    vi.advanceTimersByTime(1);
    expect(sent.at(-1), 'the hold over, lower-level work goes').toEqual(['low-2']);
    // low-2 is the first batch without level 1; after TOP_LEVEL_QUIET_BATCHES of them, lower-level
    // batches are prefetched again.
    for (let i = 3; i <= TOP_LEVEL_QUIET_BATCHES + 1; i++) {
      next();
      w.running = undefined;
      add(`low-${i}`, 2);
      vi.advanceTimersByTime(0);
      expect(sent.at(-1)).toEqual([`low-${i}`]);
    }
    next();
    add('low-busy', 2);
    expect(sent.at(-1), 'level 1 quiet: a lower-level batch goes to the busy worker').toEqual(['low-busy']);
  });
});
