import { EventEmitter } from 'node:events';
import type { MarinaError } from '@marina/errors';
import type { Job } from '../scheduling/job.ts';
import { Worker, type BatchOutcome, type WorkerOptions } from './worker.ts';
import type { WorkerInit } from './worker-protocol.ts';

export interface WorkerPoolOptions {
  label: string;
  startupTimeoutMs: number;
  responseTimeoutMs: number;
  /** Each worker thread's V8 heap limit, MB. */
  maxHeapMb: number;
  /** Builds a new worker's init message; called at each spawn, so thread counts reflect the current load. */
  createInit(): WorkerInit;
  /** The spare threads the workers start on and give back (spare-threads.ts). */
  spareThreads?: WorkerOptions['spareThreads'];
  log?: (level: 'info' | 'warn' | 'error', message: string) => void;
  /**
   * How long a retired worker may finish the batch it runs, ms (unload_grace_seconds); past it the
   * batch's requests are answered MARINA_ERR_MODEL_UNLOADING and the thread is abandoned. Default 10 s.
   */
  unloadGraceMs?: number;
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
 * times, then the pool gives up and reports `lastError`. Removing a worker retires it (it
 * finishes what it holds, then its thread is terminated); nothing here ever awaits a thread's end.
 *
 * Events: 'ready' (a worker can take work), 'prepared' (a loading worker can take its first batch),
 * 'started'/'finished' (a worker's batch, see Worker), 'failed' (a worker died; its unstarted batch
 * is handed back), 'returned' (a failed load's first batch), 'changed' (membership changed).
 */
export class WorkerPool extends EventEmitter<{
  ready: [Worker];
  started: [Worker, readonly Job[]];
  finished: [Worker, BatchOutcome];
  failed: [Worker, MarinaError, Job[]];
  /** A loading worker asks for its first batch (see Worker's 'prepared'): give it one synchronously, or none. */
  prepared: [Worker];
  /** The first batch of a worker whose load failed, never begun: it goes back to the queue. */
  returned: [Job[]];
  changed: [];
  /** A worker finished loading its model, after `loadMs` (TorchServe's WorkerLoadTime). */
  loaded: [{ workerId: string; loadMs: number }];
}> {
  readonly #options: WorkerPoolOptions;
  /** Workers counted toward the target: LOADING, READY or BUSY, not retiring. */
  readonly #workers = new Set<Worker>();
  /** Retired, failed or abandoned workers whose threads have not ended yet (they still hold cores). */
  readonly #leaving = new Set<Worker>();
  #target = 0;
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

  /** Workers counted toward the target (for describe), oldest first. */
  get workers(): Worker[] {
    return [...this.#workers];
  }

  /** Threads held by this pool, including those of workers that are leaving, for the thread budget. */
  get threadCount(): number {
    let n = 0;
    for (const w of this.#workers) n += w.intraOpNumThreads;
    for (const w of this.#leaving) n += w.intraOpNumThreads;
    return n;
  }

  get readyCount(): number {
    let n = 0;
    for (const w of this.#workers) if (w.isAlive) n++;
    return n;
  }

  /** Workers loading or alive: work queued now will be served by one of them. */
  get hasWorkerComing(): boolean {
    return this.#workers.size > 0 || (this.#restartTimer !== undefined && !this.#isClosed);
  }

  /** Workers running a batch now. */
  get busyCount(): number {
    let n = 0;
    for (const w of this.#workers) if (w.isRunning) n++;
    for (const w of this.#leaving) if (w.isRunning) n++;
    return n;
  }

  /** True when the pool gave up on starting workers (`lastError` says why). */
  get hasGivenUp(): boolean {
    return (
      this.#target > 0 && this.#workers.size === 0 && this.#restartTimer === undefined && this.lastError !== undefined
    );
  }

  /**
   * Sets how many workers to keep. Adding resolves once the new workers are READY (or failed);
   * removing retires workers at once, idle and loading ones first (busy ones finish their batch
   * first, without anyone waiting for them). Resolves with the workers READY afterwards.
   * `isRecycled`: the removed workers' threads go to the spare threads once idle (see Worker.retire).
   */
  async setTarget(count: number, options: { isRecycled?: boolean } = {}): Promise<number> {
    if (this.#isClosed) return 0;
    this.#target = count;
    const starting: Array<Promise<Worker | undefined>> = [];
    while (this.#workers.size < this.#target) starting.push(this.#spawn());
    const excess = this.#workers.size - this.#target;
    if (excess > 0) {
      const byPreference = [...this.#workers].sort((a, b) => rank(a) - rank(b));
      for (const w of byPreference.slice(0, excess)) this.#retire(w, options.isRecycled);
    }
    this.emit('changed');
    await Promise.allSettled(starting);
    return this.readyCount;
  }

  /**
   * Replaces, one at a time, the workers whose intra-op thread count or CPU priority differs from
   * what a worker started now would get: the default split (cores ÷ all workers of all models)
   * changes when workers are added or removed anywhere, a running session cannot change its
   * threads, and a thread lowered to a shadow's background priority cannot raise it again.
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
      // A loading worker is checked once it is READY (see #spawn).
      if (!this.#workers.has(old) || old.state === 'LOADING' || this.#isCurrent(old)) continue;
      const replacement = await this.#spawn();
      // No replacement came up (its failure is logged): keep the old worker serving.
      if (replacement === undefined) return;
      if (this.#workers.has(old)) {
        this.#retire(old);
        this.emit('changed');
      }
    }
    while (!this.#isClosed && this.#workers.size < this.#target) {
      if ((await this.#spawn()) === undefined) return;
    }
  }

  /** Whether a worker has what a worker started now would get (threads, CPU priority). */
  #isCurrent(worker: Worker): boolean {
    const wanted = this.#options.createInit();
    return worker.intraOpNumThreads === wanted.intraOpNumThreads && worker.isBackground === wanted.isBackground;
  }

  /** Stops restarting failed workers (the version is draining: what they would serve is answered by its owner). */
  stopRestarting(): void {
    this.#isClosed = true;
    clearTimeout(this.#restartTimer);
    this.#restartTimer = undefined;
  }

  /** Retires every worker (each finishes what it holds, then its thread is terminated; never awaited). */
  close(): void {
    this.stopRestarting();
    this.#target = 0;
    for (const w of [...this.#workers]) this.#retire(w);
    this.emit('changed');
  }

  /** Resolves once every thread this pool started has ended (tests and clean shutdowns; never needed for correctness). */
  async exited(): Promise<void> {
    await Promise.all([...this.#workers, ...this.#leaving].map((w) => w.exited));
  }

  #retire(worker: Worker, isRecycled = false): void {
    this.#workers.delete(worker);
    this.#leave(worker);
    worker.retire({ graceMs: this.#options.unloadGraceMs ?? 10_000, isRecycled });
  }

  /**
   * Answers every running batch of this pool's workers (leaving ones included) with `error` and
   * abandons their threads: the unload's grace period ran out. Never waits for a thread.
   */
  abandonRunning(error: MarinaError): void {
    for (const w of [...this.#workers, ...this.#leaving]) if (w.isAlive && !w.isIdle) w.abandon(error);
  }

  #leave(worker: Worker): void {
    if (worker.hasExited) return;
    this.#leaving.add(worker);
  }

  /** Starts one worker; resolves with it once READY, or undefined when it failed to start (logged, retried). */
  async #spawn(): Promise<Worker | undefined> {
    const worker = new Worker({
      init: this.#options.createInit(),
      startupTimeoutMs: this.#options.startupTimeoutMs,
      responseTimeoutMs: this.#options.responseTimeoutMs,
      maxHeapMb: this.#options.maxHeapMb,
      label: this.#options.label,
      ...(this.#options.spareThreads ? { spareThreads: this.#options.spareThreads } : {}),
    });
    this.#workers.add(worker);
    worker.on('started', (jobs) => this.emit('started', worker, jobs));
    // A worker restarted after failed starts takes no first batch: should it fail too, the requests
    // stay queued for whoever gives up on the load (answered with its error), not held by the next try.
    worker.on('prepared', () => {
      if (this.#startFailures === 0) this.emit('prepared', worker);
    });
    worker.on('returned', (jobs) => this.emit('returned', jobs));
    worker.on('finished', (outcome) => {
      if (outcome.isOk) this.#consecutiveFailures = 0;
      this.emit('finished', worker, outcome);
    });
    worker.once('failed', (error, unstarted) => this.#onWorkerFailed(worker, error, unstarted));
    worker.once('exit', () => {
      this.#workers.delete(worker);
      this.#leaving.delete(worker);
      this.emit('changed');
    });
    const startedAt = performance.now();
    try {
      await worker.start();
      this.emit('loaded', { workerId: worker.id, loadMs: performance.now() - startedAt });
    } catch (error) {
      this.#workers.delete(worker);
      this.#leave(worker);
      this.emit('changed');
      if (this.#isClosed) return undefined;
      this.lastError = error as MarinaError;
      this.#startFailures++;
      this.#options.log?.('error', (error as Error).message);
      this.#scheduleRestart();
      return undefined;
    }
    // Retired while loading (scaled down, closed): the worker ended itself on READY.
    if (!this.#workers.has(worker)) return undefined;
    this.lastError = undefined;
    this.#startFailures = 0;
    this.emit('changed');
    this.emit('ready', worker);
    // What it should be changed while it loaded (a traffic policy made its version the shadow): replace it.
    if (!this.#isCurrent(worker)) void this.rebalanceThreads();
    return worker;
  }

  #onWorkerFailed(worker: Worker, error: MarinaError, unstarted: Job[]): void {
    const wasCounted = this.#workers.delete(worker);
    this.#leave(worker);
    if (wasCounted) {
      this.lastError = error;
      this.#options.log?.('warn', error.message);
    }
    this.emit('failed', worker, error, unstarted);
    this.#scheduleRestart();
    this.emit('changed');
  }

  #scheduleRestart(): void {
    if (this.#isClosed || this.#restartTimer || this.#workers.size >= this.#target) return;
    this.#consecutiveFailures++;
    if (this.#startFailures >= (this.#options.maxStartAttempts ?? 3)) {
      this.#options.log?.(
        'error',
        `${this.#options.label}: giving up after ${this.#startFailures} failed worker starts; last error: ${this.lastError?.message}`,
      );
      return;
    }
    this.#restartTimer = setTimeout(
      () => {
        this.#restartTimer = undefined;
        if (this.#isClosed) return;
        while (this.#workers.size < this.#target) void this.#spawn();
        this.emit('changed');
      },
      backoffMs(this.#consecutiveFailures - 1),
    );
    this.#restartTimer.unref?.();
  }
}

function rank(w: Worker): number {
  if (w.state === 'LOADING') return 0;
  if (w.isIdle) return 1;
  return w.isRunning ? 3 : 2;
}
