import { createServeError } from '../errors.ts';
import { resolveIntraOpThreads } from './thread-defaults.ts';

/**
 * How many intra-op threads one model version may ask for in one request, as a multiple of the
 * cores: `min_worker=1000` is refused, anything TorchServe users write (two workers per model
 * beside other models) is not.
 */
const ABSURD_THREADS_FACTOR = 4;
/** The fewest threads a single version may always have, whatever the cores (a 1-core machine still takes minWorkers: 4). */
const ABSURD_THREADS_FLOOR = 8;

export interface ThreadBudgetOptions {
  cpuCount: number;
  /** OMP_NUM_THREADS from the environment: every unconfigured worker's thread count when set. */
  ompNumThreads: number | undefined;
  log?: (level: 'info' | 'warn' | 'error', message: string) => void;
}

/**
 * The one place that decides threads for every model: how many intra-op threads a new worker
 * gets, which requests for workers are absurd enough to refuse, and when to say the machine is
 * oversubscribed. Never refuses a configuration TorchServe accepts: where workers × threads of all
 * models exceed the cores, every worker whose threads are not pinned runs with one intra-op
 * thread, and a warning says once what that costs.
 */
export class ThreadBudget {
  readonly cpuCount: number;
  readonly #ompNumThreads: number | undefined;
  readonly #log: (level: 'info' | 'warn' | 'error', message: string) => void;
  #isOversubscriptionWarned = false;

  constructor(options: ThreadBudgetOptions) {
    this.cpuCount = options.cpuCount;
    this.#ompNumThreads = options.ompNumThreads;
    this.#log = options.log ?? (() => undefined);
  }

  /** The threads a worker pins: its model's intraOpNumThreads, else OMP_NUM_THREADS; undefined = the default split. */
  pinnedThreads(configured: number | undefined): number | undefined {
    return configured ?? this.#ompNumThreads;
  }

  /** Intra-op threads for a worker starting now, given every worker planned across all models (the default split: cores ÷ workers, at least 1). */
  threadsFor(options: { configured: number | undefined; totalWorkers: number }): number {
    return resolveIntraOpThreads({
      configured: options.configured,
      ompNumThreads: this.#ompNumThreads,
      cpuCount: this.cpuCount,
      totalWorkers: options.totalWorkers,
    }).intraOpNumThreads;
  }

  /** The most threads one version's workers may hold (ABSURD_THREADS_FACTOR × cores, at least ABSURD_THREADS_FLOOR). */
  get maxThreadsPerVersion(): number {
    return Math.max(ABSURD_THREADS_FLOOR, ABSURD_THREADS_FACTOR * this.cpuCount);
  }

  /**
   * Refuses only absurd requests: one version asking for more threads (workers × its pinned
   * threads, 1 each when unpinned) than maxThreadsPerVersion. Other models do not count: many
   * models beside each other oversubscribe, they are not refused (see `review`).
   * @throws MARINA_ERR_THREAD_BUDGET_EXCEEDED (400)
   */
  assertReasonable(options: { what: string; workers: number; configuredThreads: number | undefined }): void {
    const pinned = this.pinnedThreads(options.configuredThreads);
    const perWorker = pinned ?? 1;
    const budget = this.maxThreadsPerVersion;
    if (options.workers <= 1 || options.workers * perWorker <= budget) return;
    const most = Math.max(1, Math.floor(budget / perWorker));
    throw createServeError.MARINA_ERR_THREAD_BUDGET_EXCEEDED(
      `${options.what}: ${options.workers} workers × ${perWorker} thread${perWorker === 1 ? '' : 's'} is more than one model may run on ${this.cpuCount} cores (at most ${budget} threads, ${ABSURD_THREADS_FACTOR} × the cores); at most ${most} workers. Ask for fewer workers${pinned === undefined ? '' : ' or fewer threads per worker'}`,
      { details: { requestedWorkers: options.workers, maxWorkers: most, threadBudget: budget } },
    );
  }

  /**
   * Looks at the workers every model plans (`workers` × their pinned threads, 1 when unpinned)
   * and, the first time their threads exceed the cores, says once at warn level that the machine
   * is oversubscribed and what it costs. Returns whether it is.
   */
  review(planned: ReadonlyArray<{ workers: number; configuredThreads: number | undefined }>): boolean {
    let threads = 0;
    let workers = 0;
    for (const p of planned) {
      workers += p.workers;
      threads += p.workers * (this.pinnedThreads(p.configuredThreads) ?? 1);
    }
    const isOversubscribed = threads > this.cpuCount;
    if (isOversubscribed && !this.#isOversubscriptionWarned) {
      this.#isOversubscriptionWarned = true;
      this.#log(
        'warn',
        `the machine is oversubscribed: ${workers} workers across all models need ${threads} intra-op threads on ${this.cpuCount} cores. Every worker without pinned threads runs with 1 intra-op thread; workers that run at once share the cores, so each is slower (two workers × two threads on two cores lost 30–40% throughput). Fewer workers per model (default_workers_per_model, minWorkers), model_memory_budget or idle_unload_seconds (idle models then hold no worker) avoid it. Said once.`,
      );
    }
    return isOversubscribed;
  }
}
