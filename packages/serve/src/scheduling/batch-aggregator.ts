import type { Job } from './job.ts';
import type { JobQueue } from './job-queue.ts';

/**
 * Why a batch left the aggregator:
 * - 'full': it reached batchSize;
 * - 'idle': nothing else was queued and no other worker was busy, so waiting could only add latency;
 * - 'delay': maxBatchDelay ran out (measured from when its first job was taken);
 * - 'flush': the model version is closing.
 */
export type DispatchReason = 'full' | 'idle' | 'delay' | 'flush';

export interface BatchAggregatorOptions<W> {
  queue: JobQueue;
  batchSize: number;
  maxBatchDelayMs: number;
  /** Takes an idle worker out of the idle set, or returns undefined when none is idle. */
  acquireIdleWorker(): W | undefined;
  /** Workers of this model version currently running a batch (a worker reserved for collecting counts only when it also runs one). */
  busyWorkerCount(): number;
  /** Hands a batch to the worker acquired for it. Must not call back into the aggregator synchronously. */
  dispatch(worker: W, jobs: Job[], reason: DispatchReason): void;
}

/**
 * Forms batches for one model version, with TorchServe's meaning: wait for the first job,
 * then collect up to `batchSize` jobs within `maxBatchDelayMs` of taking the first, and send
 * as soon as the batch is full or the delay is over. One batch is collected at a time, on a
 * worker reserved for it, as TorchServe's per-model lock does.
 *
 * Marina's addition, "no wasted wait": when the queue holds nothing more and no other worker
 * of the version is busy, the partial batch is sent at once (reason 'idle'). Waiting pays off
 * only when more requests are arriving faster than the workers serve them, and busy workers are
 * the sign of that; a lone request to an idle server is never held for the delay. Under load,
 * jobs pile up while workers are busy and batches fill from the queue.
 *
 * Call `pump()` whenever a job is queued or a worker becomes idle.
 */
export class BatchAggregator<W> {
  readonly #options: BatchAggregatorOptions<W>;
  #collecting: { worker: W; jobs: Job[]; timer: ReturnType<typeof setTimeout> } | undefined;

  constructor(options: BatchAggregatorOptions<W>) {
    this.#options = options;
  }

  /** True while a partial batch waits for more jobs. */
  get isCollecting(): boolean {
    return this.#collecting !== undefined;
  }

  pump(): void {
    const { queue, batchSize } = this.#options;
    if (this.#collecting) {
      const c = this.#collecting;
      while (c.jobs.length < batchSize && queue.size > 0) c.jobs.push(queue.poll()!);
      if (c.jobs.length >= batchSize) this.#sendCollecting('full');
      // The worker collected on may have been running earlier batches; once none of the version's
      // workers runs anything, waiting longer can only add latency.
      else if (this.#options.busyWorkerCount() === 0) this.#sendCollecting('idle');
      else return;
    }
    while (queue.size > 0) {
      const worker = this.#options.acquireIdleWorker();
      if (worker === undefined) return;
      const jobs: Job[] = [];
      while (jobs.length < batchSize && queue.size > 0) jobs.push(queue.poll()!);
      if (jobs.length >= batchSize) {
        this.#options.dispatch(worker, jobs, 'full');
        continue;
      }
      if (this.#options.busyWorkerCount() === 0) {
        this.#options.dispatch(worker, jobs, 'idle');
        continue;
      }
      if (this.#options.maxBatchDelayMs <= 0) {
        this.#options.dispatch(worker, jobs, 'delay');
        continue;
      }
      const timer = setTimeout(() => this.#sendCollecting('delay'), this.#options.maxBatchDelayMs);
      this.#collecting = { worker, jobs, timer };
      return;
    }
  }

  /** Sends a partially collected batch now (used when closing). */
  flush(): void {
    if (this.#collecting) this.#sendCollecting('flush');
  }

  #sendCollecting(reason: DispatchReason): void {
    const c = this.#collecting;
    if (!c) return;
    clearTimeout(c.timer);
    this.#collecting = undefined;
    this.#options.dispatch(c.worker, c.jobs, reason);
    if (reason === 'delay') this.pump();
  }
}
