import { EventEmitter } from 'node:events';
import type { MarinaError } from '@marina/errors';
import type { Job } from '../scheduling/job.ts';
import { Worker, type BatchOutcome } from './worker.ts';
import type { WorkerInit } from './worker-protocol.ts';

export interface WorkerPoolOptions {
  label: string;
  startupTimeoutMs: number;
  responseTimeoutMs: number;
  /** Builds a new worker's init message; called at each spawn, so thread counts reflect the current load. */
  createInit(): WorkerInit;
  log?: (level: 'info' | 'warn' | 'error', message: string) => void;
  /** Consecutive start failures after which the pool stops retrying (the model then answers 503). Default 3. */
  maxStartAttempts?: number;
}

/** Fibonacci back-off between restarts, as TorchServe (0, 1, 1, 2, 3, 5 … s), capped at 60 s. */
function backoffMs(attempt: number): number {
  let a = 0;
  let b = 1;
  for (let i = 0; i < attempt; i++) [a, b] = [b, a + b];
  return Math.min(a, 60) * 1000;
}

/**
 * The workers of one model version. Keeps `target` workers alive: a crashed or timed-out
 * worker is replaced with back-off; a worker that cannot load is retried `maxStartAttempts`
 * times, then the pool gives up and reports `lastError`.
 * Emits 'idle' whenever a worker finishes a batch or becomes READY (the aggregator then pumps).
 */
export class WorkerPool extends EventEmitter<{ idle: []; changed: []; loaded: [{ workerId: string; loadMs: number }] }> {
  readonly #options: WorkerPoolOptions;
  readonly #workers = new Set<Worker>();
  /** Failed or stopped workers whose threads have not ended yet (a native run() still going). */
  readonly #lingering = new Set<Worker>();
  #target = 0;
  #reserved = new Set<Worker>();
  /** Failures since the last successful batch: drives the back-off. */
  #consecutiveFailures = 0;
  /** Start failures since the last worker that loaded: the pool gives up after maxStartAttempts. */
  #startFailures = 0;
  #restartTimer: ReturnType<typeof setTimeout> | undefined;
  #isClosed = false;
  /** Rebalancing passes run one after another: a pass asked for during another runs after it. */
  #rebalancing: Promise<void> = Promise.resolve();
  lastError: MarinaError | undefined;

  constructor(options: WorkerPoolOptions) {
    super();
    this.#options = options;
  }

  get target(): number {
    return this.#target;
  }

  get workers(): Worker[] {
    return [...this.#workers];
  }

  /** Threads held by this pool, live and lingering, for the server-wide oversubscription check. */
  get threadCount(): number {
    let n = 0;
    for (const w of this.#workers) n += w.intraOpNumThreads;
    for (const w of this.#lingering) n += w.intraOpNumThreads;
    return n;
  }

  get readyCount(): number {
    let n = 0;
    for (const w of this.#workers) if (w.state === 'READY' || w.state === 'BUSY') n++;
    return n;
  }

  /** Workers running a batch now (not those only reserved while a batch is collected). */
  get busyCount(): number {
    let n = 0;
    for (const w of this.#workers) if (w.batchesInFlight > 0) n++;
    return n;
  }

  /** True when the pool gave up on starting workers (`lastError` says why). */
  get hasGivenUp(): boolean {
    return this.#target > 0 && this.#workers.size === 0 && this.#restartTimer === undefined && this.lastError !== undefined;
  }

  /**
   * Reserves the worker with the fewest batches in flight that can take one more (an idle one
   * first; else a busy one whose pipeline has room), or returns undefined.
   */
  acquireIdle(): Worker | undefined {
    let best: Worker | undefined;
    for (const w of this.#workers) {
      if (w.canTakeBatch && (best === undefined || w.batchesInFlight < best.batchesInFlight)) best = w;
    }
    if (best === undefined) return undefined;
    best.reserve();
    this.#reserved.add(best);
    return best;
  }

  /** Releases a worker reserved by acquireIdle without a batch. */
  release(worker: Worker): void {
    this.#reserved.delete(worker);
    worker.release();
    if (worker.canTakeBatch) this.emit('idle');
  }

  async runBatch(worker: Worker, jobs: Job[]): Promise<BatchOutcome> {
    this.#reserved.delete(worker);
    const outcome = await worker.runBatch(jobs);
    if (outcome.isOk) this.#consecutiveFailures = 0;
    // Also when the worker is reserved for a batch being collected: the aggregator sends that
    // batch at once when no worker runs anything any more.
    if (worker.state === 'READY' || worker.state === 'BUSY') this.emit('idle');
    return outcome;
  }

  /**
   * Sets how many workers to keep. Adding waits until the new workers are READY (or failed);
   * removing stops idle workers first and waits for busy ones to finish their batch.
   * Resolves with the workers READY afterwards.
   */
  async setTarget(count: number): Promise<number> {
    this.#target = count;
    this.emit('changed');
    const starting: Array<Promise<Worker | undefined>> = [];
    while (this.#workers.size < this.#target) starting.push(this.#spawn());
    const excess = this.#workers.size - this.#target;
    if (excess > 0) {
      const byPreference = [...this.#workers].sort((a, b) => rank(a) - rank(b));
      await Promise.all(byPreference.slice(0, excess).map((w) => this.#retire(w)));
    }
    await Promise.allSettled(starting);
    return this.readyCount;
  }

  /**
   * Replaces, one at a time, the workers whose intra-op thread count differs from what a worker
   * started now would get: the default split (cores ÷ all workers of all models) changes when
   * workers are added or removed anywhere, and a running session cannot change its threads.
   * The replacement starts first and the old worker finishes its batches before it stops, so
   * capacity never drops and no request is lost.
   */
  rebalanceThreads(): Promise<void> {
    const pass = this.#rebalancing.then(() => this.#rebalance());
    this.#rebalancing = pass.catch(() => undefined);
    return pass;
  }

  async #rebalance(): Promise<void> {
    for (const old of [...this.#workers]) {
      if (this.#isClosed) return;
      if (!this.#workers.has(old) || old.state === 'LOADING') continue;
      if (old.intraOpNumThreads === this.#options.createInit().intraOpNumThreads) continue;
      const replacement = await this.#spawn();
      // No replacement came up (its failure is logged): keep the old worker serving.
      if (replacement === undefined) return;
      if (this.#workers.has(old)) await this.#retire(old);
    }
    while (!this.#isClosed && this.#workers.size < this.#target) {
      if ((await this.#spawn()) === undefined) return;
    }
  }

  /** Stops every worker, letting a running batch finish first; jobs of lingering threads are already settled. */
  async close(): Promise<void> {
    this.#isClosed = true;
    clearTimeout(this.#restartTimer);
    this.#restartTimer = undefined;
    this.#target = 0;
    await Promise.all([...this.#workers].map((w) => this.#retire(w)));
  }

  async #retire(worker: Worker): Promise<void> {
    this.#workers.delete(worker);
    this.#reserved.delete(worker);
    if (worker.state === 'BUSY') await waitUntil(worker, () => worker.state !== 'BUSY');
    await worker.stop();
    this.emit('changed');
  }

  /** Starts one worker; resolves with it once READY, or undefined when it failed to start (logged, retried). */
  async #spawn(): Promise<Worker | undefined> {
    const worker = new Worker({
      init: this.#options.createInit(),
      startupTimeoutMs: this.#options.startupTimeoutMs,
      responseTimeoutMs: this.#options.responseTimeoutMs,
      label: this.#options.label,
    });
    this.#workers.add(worker);
    worker.once('failed', (error) => this.#onWorkerFailed(worker, error));
    const startedAt = performance.now();
    try {
      await worker.start();
      this.emit('loaded', { workerId: worker.id, loadMs: performance.now() - startedAt });
      this.lastError = undefined;
      this.#startFailures = 0;
      this.emit('changed');
      this.emit('idle');
      return worker;
    } catch (error) {
      this.#forget(worker);
      if (worker.state === 'UNLOADING') return undefined;
      this.lastError = error as MarinaError;
      this.#startFailures++;
      this.#options.log?.('error', (error as Error).message);
      this.#scheduleRestart();
      return undefined;
    }
  }

  #onWorkerFailed(worker: Worker, error: MarinaError): void {
    this.lastError = error;
    this.#options.log?.('warn', `${error.message}`);
    this.#forget(worker);
    this.#scheduleRestart();
  }

  #forget(worker: Worker): void {
    this.#workers.delete(worker);
    this.#reserved.delete(worker);
    if (!worker.hasExited) {
      this.#lingering.add(worker);
      void worker.exited.then(() => {
        this.#lingering.delete(worker);
        this.emit('changed');
      });
    }
    this.emit('changed');
  }

  #scheduleRestart(): void {
    if (this.#isClosed || this.#restartTimer || this.#workers.size >= this.#target) return;
    this.#consecutiveFailures++;
    if (this.#startFailures >= (this.#options.maxStartAttempts ?? 3)) {
      this.#options.log?.('error', `${this.#options.label}: giving up after ${this.#startFailures} failed worker starts; last error: ${this.lastError?.message}`);
      this.emit('changed');
      return;
    }
    this.#restartTimer = setTimeout(() => {
      this.#restartTimer = undefined;
      if (this.#isClosed) return;
      while (this.#workers.size < this.#target) void this.#spawn();
    }, backoffMs(this.#consecutiveFailures - 1));
    this.#restartTimer.unref?.();
  }
}

function rank(w: Worker): number {
  return w.state === 'LOADING' ? 0 : w.state === 'READY' ? 1 : 2;
}

function waitUntil(worker: Worker, done: () => boolean): Promise<void> {
  return new Promise((resolve) => {
    const check = () => {
      if (done()) {
        clearInterval(timer);
        resolve();
      }
    };
    const timer = setInterval(check, 10);
    check();
  });
}
