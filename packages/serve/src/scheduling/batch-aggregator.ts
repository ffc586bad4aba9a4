import type { MarinaError } from '@marina/errors';
import type { Job } from './job.ts';
import type { JobQueue } from './job-queue.ts';

/**
 * Why a batch left the queue:
 * - 'full': it reached batchSize;
 * - 'idle': the worker it went to was running nothing, so waiting past the current turn of the event loop could only add latency;
 * - 'delay': maxBatchDelay ran out (measured from when the batch's first job was taken);
 * - 'flush': the model version is closing.
 */
export type DispatchReason = 'full' | 'idle' | 'delay' | 'flush';

/** What the aggregator needs to know about a worker. */
export interface BatchTaker {
  /** Running nothing and holding no batch. */
  readonly isIdle: boolean;
  /** Alive, not retiring, and without a prefetched batch: it may be given one now. */
  readonly wantsBatch: boolean;
}

export interface BatchAggregatorOptions<W extends BatchTaker> {
  queue: JobQueue;
  batchSize: number;
  maxBatchDelayMs: number;
  /** The version's live workers, in the order they asked for work (oldest first). */
  workers(): Iterable<W>;
  /** Hands a batch taken from the queue to a worker. Must not call back into the aggregator synchronously. */
  dispatch(worker: W, jobs: Job[], reason: DispatchReason): void;
  /**
   * Which batches a busy worker is given while it runs the current one (prefetched: decoded while
   * it runs). 'always' (the default) for models with one level. 'top-level' for models with
   * priority levels: only a batch of the highest level, which nothing queued later could overtake
   * (any batch again once level 1 has been quiet for TOP_LEVEL_QUIET_BATCHES batches).
   * A prefetched lower-level batch has left the queue, so a higher-level request arriving after it
   * would wait for it (measured: 2.27× the idle p50); a prefetched top-level batch is decoded
   * while the running batch ends, so the high request pays only for the rest of that run.
   */
  prefetch?: 'always' | 'top-level';
  /**
   * Whether an idle worker also waits up to maxBatchDelay for a partial batch to fill, as
   * TorchServe's aggregator does (batch_wait_when_idle). Default false: an idle worker takes what
   * is queued at the end of the event loop's turn, so a lone request never pays the delay.
   */
  isIdleWaiting?: boolean;
  /** The error for a queued job whose deadline (its level's timeout, its own, its gRPC deadline) passed before it was taken. */
  expired(job: Job): MarinaError;
}

/**
 * How long a worker that just answered a batch of the highest priority level stays free for the
 * next one before it takes lower-level work (models with priority levels only). A caller that
 * sends its next high-priority request as soon as it has the answer (an interactive session, a
 * pipeline's sequential calls) would otherwise find a low-priority batch just started and wait
 * for all of it: measured on ResNet-18, 1.8–1.9× the idle p50 instead of about 1.1×. The next
 * request needs the answer's trip to the client and its own trip back (about 1.5 ms on loopback),
 * so 5 ms covers it with room; when none comes, the worker has lost at most 5 ms.
 */
export const TOP_LEVEL_HOLD_MS = 5;

/**
 * A model with priority levels prefetches lower-level batches again once this many batches in a
 * row went without a level-1 request arriving or running: with no high-priority traffic, holding
 * lower-level batches back only costs throughput (their decoding no longer overlaps the running
 * batch). The first level-1 request after a quiet spell may then wait for a prefetched
 * lower-level batch too. Counted in batches, not time, so it behaves the same on any machine.
 */
export const TOP_LEVEL_QUIET_BATCHES = 8;

/**
 * Forms batches for one model version when workers pull, with TorchServe's meaning: collect up to
 * `batchSize` jobs within `maxBatchDelayMs` of taking the first, and send as soon as the batch is
 * full or the delay is over. Jobs never leave the queue until their batch is sent: the queue is
 * the only place a waiting request lives.
 *
 * A worker pulls when it becomes idle and again when it starts running a batch (for its one
 * prefetched batch, decoded while the current one runs). An idle worker gets what is queued at
 * the end of the current turn of the event loop (at once when a full batch is queued): with
 * nothing running, waiting longer could only add latency, so a lone request never sits out the
 * delay, and requests that arrived in the same turn (many clients' requests read together) go as
 * one batch, one hand-off to the worker thread instead of one each. A busy worker's prefetched
 * batch is collected: it goes when full, when the delay runs out, or at the end of the turn in
 * which that worker becomes idle. One batch is collected at a time, as TorchServe's per-model lock
 * does.
 *
 * Call `pump()` whenever a job is queued or a worker asks for work.
 */
export class BatchAggregator<W extends BatchTaker> {
  readonly #options: BatchAggregatorOptions<W>;
  #collectTimer: ReturnType<typeof setTimeout> | undefined;
  #isCollectDue = false;
  #isFlushing = false;
  #deadlineTimer: ReturnType<typeof setTimeout> | undefined;
  #turnEnd: ReturnType<typeof setImmediate> | undefined;
  #isTurnOver = false;
  #deadlineAt = Infinity;
  /** A worker kept free for the next top-level request until `until` (see TOP_LEVEL_HOLD_MS). */
  #held: { worker: W; until: number } | undefined;
  #holdTimer: ReturnType<typeof setTimeout> | undefined;
  /** Batches dispatched since a level-1 request last arrived or ran (models with priority levels; see TOP_LEVEL_QUIET_BATCHES). */
  #batchesSinceTopLevel = Infinity;

  constructor(options: BatchAggregatorOptions<W>) {
    this.#options = options;
  }

  /** True while a partial batch waits in the queue for more jobs. */
  get isCollecting(): boolean {
    return this.#collectTimer !== undefined;
  }

  pump(): void {
    const { queue, batchSize, maxBatchDelayMs } = this.#options;
    queue.dropExpired(performance.now(), this.#options.expired);
    while (queue.size > 0) {
      const isTopLevelNext = queue.isNextBatchTopLevel;
      const isPrefetching =
        this.#options.prefetch !== 'top-level' ||
        isTopLevelNext ||
        this.#batchesSinceTopLevel >= TOP_LEVEL_QUIET_BATCHES;
      // A held worker takes only a top-level batch until its hold ends.
      const held = this.#held !== undefined && !isTopLevelNext && !this.#isFlushing ? this.#held.worker : undefined;
      let idle: W | undefined;
      let busy: W | undefined;
      for (const w of this.#options.workers()) {
        if (!w.wantsBatch || w === held) continue;
        if (w.isIdle) {
          idle = w;
          break;
        }
        if (isPrefetching) busy ??= w;
      }
      if (idle !== undefined && this.#options.isIdleWaiting === true && maxBatchDelayMs > 0) {
        // TorchServe's way: even an idle worker waits for a full batch or for maxBatchDelay.
        if (this.#sendOrCollect(idle)) continue;
        break;
      }
      if (idle !== undefined) {
        // Less than a full batch waits for the end of this turn of the event loop, so requests
        // that arrived together go as one batch (one hand-off instead of several).
        if (queue.batchable(batchSize) < batchSize && !this.#isTurnOver && !this.#isFlushing) {
          this.#pumpAtTurnEnd();
          break;
        }
        if (idle === this.#held?.worker) this.#stopHolding();
        const jobs = queue.take(batchSize);
        this.#dispatch(idle, jobs, jobs.length >= batchSize ? 'full' : 'idle');
        continue;
      }
      // A busy worker asked for its next batch: a full or due one goes, a partial one is collected.
      if (busy === undefined || !this.#sendOrCollect(busy)) break;
    }
    if (queue.size === 0) this.#stopCollecting();
    this.#armDeadline();
  }

  /**
   * Sends `worker` a full batch, or a partial one when maxBatchDelay ran out (or is 0, or the
   * version is draining); otherwise starts the maxBatchDelay clock and returns false.
   */
  #sendOrCollect(worker: W): boolean {
    const { queue, batchSize, maxBatchDelayMs } = this.#options;
    const isFull = queue.batchable(batchSize) >= batchSize;
    if (isFull || maxBatchDelayMs <= 0 || this.#isCollectDue || this.#isFlushing) {
      const reason: DispatchReason = isFull ? 'full' : this.#isFlushing ? 'flush' : 'delay';
      this.#stopCollecting();
      this.#dispatch(worker, queue.take(batchSize), reason);
      return true;
    }
    if (this.#collectTimer === undefined) {
      this.#collectTimer = setTimeout(() => {
        this.#collectTimer = undefined;
        this.#isCollectDue = true;
        this.pump();
      }, maxBatchDelayMs);
    }
    return false;
  }

  /** A level-1 request arrived: lower-level batches stay in the queue until a worker is free (see TOP_LEVEL_QUIET_BATCHES). */
  noteTopLevel(): void {
    this.#batchesSinceTopLevel = 0;
  }

  /** Every batch goes out through here: counts batches since level 1 was last seen. */
  #dispatch(worker: W, jobs: Job[], reason: DispatchReason): void {
    if (this.#options.prefetch === 'top-level') {
      if (jobs.some((job) => job.priority === 1)) this.#batchesSinceTopLevel = 0;
      else this.#batchesSinceTopLevel++;
    }
    this.#options.dispatch(worker, jobs, reason);
  }

  /**
   * `worker` answered a batch of the highest level and holds nothing: it stays free for
   * TOP_LEVEL_HOLD_MS for the next top-level request, then takes lower-level work as usual.
   */
  holdForTopLevel(worker: W): void {
    if (this.#isFlushing) return;
    this.#stopHolding();
    this.#held = { worker, until: performance.now() + TOP_LEVEL_HOLD_MS };
    this.#holdTimer = setTimeout(() => {
      this.#holdTimer = undefined;
      this.#held = undefined;
      this.pump();
    }, TOP_LEVEL_HOLD_MS);
    this.#holdTimer.unref?.();
  }

  #stopHolding(): void {
    clearTimeout(this.#holdTimer);
    this.#holdTimer = undefined;
    this.#held = undefined;
  }

  /** From now on batches go as soon as a worker asks, without waiting for maxBatchDelay (the version is draining). */
  flush(): void {
    this.#isFlushing = true;
    this.#stopCollecting();
    this.#stopHolding();
  }

  /** Stops the timers (the version is closing; what is queued is answered by its owner). */
  close(): void {
    this.#stopCollecting();
    this.#stopHolding();
    clearImmediate(this.#turnEnd);
    this.#turnEnd = undefined;
    clearTimeout(this.#deadlineTimer);
    this.#deadlineTimer = undefined;
    this.#deadlineAt = Infinity;
  }

  /** Pumps once more at the end of this turn of the event loop (setImmediate), giving idle workers what is queued then. */
  #pumpAtTurnEnd(): void {
    if (this.#turnEnd !== undefined) return;
    this.#turnEnd = setImmediate(() => {
      this.#turnEnd = undefined;
      this.#isTurnOver = true;
      try {
        this.pump();
      } finally {
        this.#isTurnOver = false;
      }
    });
  }

  #stopCollecting(): void {
    clearTimeout(this.#collectTimer);
    this.#collectTimer = undefined;
    this.#isCollectDue = false;
  }

  /** One timer for the earliest queued job's deadline (or delay time): it is answered (or moved back) then, even if no worker pulls. */
  #armDeadline(): void {
    const deadline = this.#options.queue.nextDeadline();
    if (deadline === this.#deadlineAt) return;
    clearTimeout(this.#deadlineTimer);
    this.#deadlineTimer = undefined;
    this.#deadlineAt = deadline;
    if (deadline === Infinity) return;
    this.#deadlineTimer = setTimeout(
      () => {
        this.#deadlineTimer = undefined;
        this.#deadlineAt = Infinity;
        this.pump();
      },
      Math.max(0, deadline - performance.now()),
    );
  }
}
