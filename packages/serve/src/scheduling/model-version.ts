import { EventEmitter } from 'node:events';
import type { Manifest, QuantizationSummary } from '@marina/archive';
import type { MarinaError } from '@marina/errors';
import { createServeError } from '../errors.ts';
import type { ModelSettings } from '../model-settings.ts';
import { BatchAggregator, type DispatchReason } from './batch-aggregator.ts';
import { DecayingCounter } from './decaying-counter.ts';
import { RecentMax } from './recent-max.ts';
import type { Job } from './job.ts';
import { JobQueue } from './job-queue.ts';
import type { Worker } from '../workers/worker.ts';
import { WorkerPool, type WorkerPoolOptions } from '../workers/worker-pool.ts';
import { recordBatchSpan } from '../tracing/tracing.ts';
import type { WorkerInit } from '../workers/worker-protocol.ts';
import type {
  ModelDescription,
  ModelVersionStats,
  PriorityLevelStatus,
  SnapshotModelVersion,
} from '../registry/model-registry-api.ts';
import type { HandlerStagesMs } from '../workers/worker-protocol.ts';
import type { SignatureRead } from '../registry/read-model-signature.ts';

/** A batch that left the aggregator and came back from a worker. */
export interface BatchEvent {
  batchSize: number;
  inferenceMs: number;
  reason: DispatchReason;
  isOk: boolean;
  stages: HandlerStagesMs | undefined;
}

export interface ModelVersionOptions {
  modelName: string;
  modelVersion: string;
  url: string;
  archivePath: string;
  modelDir: string;
  digest: string;
  manifest: Manifest;
  modelYamlConfig: Record<string, unknown>;
  /** The ONNX graph's inputs and outputs, read at registration (readModelSignature). */
  signature: SignatureRead;
  handler: string;
  runtime: string;
  settings: ModelSettings;
  loadedAtStartup: boolean;
  isDownloaded: boolean;
  /** Workers this version will run once started (counts toward the server-wide thread split). */
  plannedWorkers: number;
  /** Builds a worker's init message (the registry fills in threads). */
  createInit(version: ModelVersion): WorkerInit;
  /** The spare threads the workers start on and give back (workers/spare-threads.ts). */
  spareThreads?: WorkerPoolOptions['spareThreads'];
  /**
   * Called when a request arrives while the version has no worker and may autoscale from zero
   * (minWorkers 0, maxWorkers > 0): starts one.
   */
  startOnDemand(version: ModelVersion, requestId: string): void;
  /** batch_wait_when_idle: an idle worker also waits maxBatchDelay for a partial batch to fill (TorchServe). */
  isIdleBatchWaiting?: boolean;
  log?: (level: 'info' | 'warn' | 'error', message: string) => void;
  /** unload_grace_seconds in ms: how long unregister, unload, scale-down and shutdown wait for a running batch. Default 10 s. */
  unloadGraceMs?: number;
  /** From the archive's quantization.json (model-archiver --quantize); absent for fp32 archives. */
  quantization?: QuantizationSummary;
}

/**
 * Half-life of a version's demand count, ms: long enough to tell a model asked for ten times a
 * second from one asked for every few seconds, short enough that a model nobody calls any more
 * counts for little within a minute.
 */
const DEMAND_HALF_LIFE_MS = 10_000;

/** Uses counted across every version, so that two in the same millisecond keep their order. */
let usesSoFar = 0;

/** The next use's place among every version's uses (ModelVersion.lastUse). */
export function nextUse(): number {
  usesSoFar += 1;
  return usesSoFar;
}

/** Clean measures of a version's serving size a load's reservation looks back over (the largest counts). */
const SERVING_MEASURES = 3;

/**
 * Where a version is in its life: `registered` (archive known, nothing in memory), `loading`
 * (workers starting), `resident` (sessions created, workers may run), `unloading` (workers
 * leaving). Only a resident version runs; queue, settings and snapshot entry exist in every state.
 */
export type ResidencyState = 'registered' | 'loading' | 'resident' | 'unloading';

/**
 * One registered model version: its settings, its bounded job queue, its batch aggregator and
 * its worker pool. Jobs go in through `submit`; `drain` stops intake and waits for them.
 *
 * The one owner of a request that has not started is the queue (`queue.waiting`: queued, or in a
 * worker's prefetched batch); once its batch starts it is running (`runningJobs`). Admission,
 * describe, stats (autoscaler, metrics) read these two numbers and nothing else.
 *
 * Events: 'batch' (a batch was answered), 'changed' (its workers changed), 'progress' (waiting,
 * running or the workers changed: anything a drain, or a test, may be waiting for).
 */
export class ModelVersion extends EventEmitter<{
  batch: [BatchEvent];
  changed: [];
  progress: [];
  loaded: [{ workerId: string; loadMs: number }];
}> {
  readonly modelName: string;
  readonly modelVersion: string;
  readonly url: string;
  readonly archivePath: string;
  readonly modelDir: string;
  readonly digest: string;
  readonly manifest: Manifest;
  readonly modelYamlConfig: Record<string, unknown>;
  /** The ONNX graph's inputs and outputs, read at registration; the data plane checks inputs against it. */
  readonly signature: SignatureRead;
  readonly handler: string;
  readonly runtime: string;
  readonly settings: ModelSettings;
  readonly loadedAtStartup: boolean;
  readonly isDownloaded: boolean;
  /** From the archive's quantization.json; undefined for fp32 archives. */
  readonly quantization: QuantizationSummary | undefined;
  readonly label: string;
  readonly queue: JobQueue;
  readonly pool: WorkerPool;
  readonly aggregator: BatchAggregator<Worker>;
  minWorkers: number;
  maxWorkers: number;
  plannedWorkers: number;
  /** Kept resident: never evicted, never idle-unloaded (model-config.yaml, models JSON, the pin call). */
  pinned: boolean;
  /** Unload after this long without a request, ms; 0 = never. */
  idleUnloadMs: number;
  /** When a request last arrived (or the version was loaded), ms since the epoch; undefined: never used. */
  lastUsedAt: number | undefined;
  /**
   * Where its last use falls among every version's uses (nextUse): a request's arrival, or a load
   * asked for by the API or at start-up (set by the residency); undefined: never used. The eviction
   * order reads this, not lastUsedAt: requests a loopback client sends back to back can share a
   * millisecond, and a tie took the wrong model (measured in CI).
   */
  lastUse: number | undefined;
  /** Requests submitted lately, halving every DEMAND_HALF_LIFE_MS (performance.now() clock): what a load must outweigh to evict this version while it is busy. */
  readonly demand = new DecayingCounter(DEMAND_HALF_LIFE_MS);
  /** Process memory the last load added, bytes (measured: before and after the load); 0 until measured. */
  residentBytes = 0;
  /**
   * What the version holds serving, bytes: the largest of its last SERVING_MEASURES clean measures
   * of a whole load (its load plus its first batch, or what its unload gave back, with no other
   * load or unload meanwhile; other models' batches may still move the process: see RecentMax); 0
   * until one was taken. A later load reserves this rather than the estimate from its files.
   */
  get servingBytes(): number {
    return this.#servingMeasures.value;
  }

  /** Takes a clean measure of what the version holds serving, bytes (see servingBytes). */
  recordServingBytes(bytes: number): void {
    this.#servingMeasures.add(bytes);
  }

  readonly #servingMeasures = new RecentMax(SERVING_MEASURES);
  /** What the load is expected to add before it is measured, bytes (the budget's reservation while loading). */
  estimatedBytes = 0;
  readonly unloadGraceMs: number;
  #transition: 'loading' | 'unloading' | undefined;
  #runningJobs = 0;
  /** Per priority level: jobs that started running and their summed time in the queue, ms (describe, metrics). */
  readonly #levelStats: Array<{ started: number; queueMs: number }>;
  #isAccepting = true;
  #isDraining = false;
  #isProgressDue = false;
  readonly #startOnDemand: (version: ModelVersion, requestId: string) => void;

  constructor(options: ModelVersionOptions) {
    super();
    this.modelName = options.modelName;
    this.modelVersion = options.modelVersion;
    this.url = options.url;
    this.archivePath = options.archivePath;
    this.modelDir = options.modelDir;
    this.digest = options.digest;
    this.manifest = options.manifest;
    this.modelYamlConfig = options.modelYamlConfig;
    this.signature = options.signature;
    this.handler = options.handler;
    this.runtime = options.runtime;
    this.settings = options.settings;
    this.loadedAtStartup = options.loadedAtStartup;
    this.isDownloaded = options.isDownloaded;
    this.quantization = options.quantization;
    this.label = `model '${options.modelName}' version '${options.modelVersion}'`;
    this.minWorkers = options.settings.minWorkers;
    this.maxWorkers = options.settings.maxWorkers;
    this.plannedWorkers = options.plannedWorkers;
    this.pinned = options.settings.pinned;
    this.idleUnloadMs = options.settings.idleUnloadMs;
    this.lastUsedAt = undefined;
    this.lastUse = undefined;
    this.unloadGraceMs = options.unloadGraceMs ?? 10_000;
    this.#startOnDemand = options.startOnDemand;
    this.queue = new JobQueue({
      capacity: options.settings.jobQueueSize,
      label: this.label,
      levels: options.settings.queue.levels,
    });
    this.#levelStats = options.settings.queue.levels.map(() => ({ started: 0, queueMs: 0 }));
    this.pool = new WorkerPool({
      label: this.label,
      startupTimeoutMs: options.settings.startupTimeoutMs,
      responseTimeoutMs: options.settings.responseTimeoutMs,
      maxHeapMb: options.settings.maxWorkerHeapMb,
      unloadGraceMs: this.unloadGraceMs,
      createInit: () => options.createInit(this),
      ...(options.spareThreads ? { spareThreads: options.spareThreads } : {}),
      log: options.log,
    });
    this.aggregator = new BatchAggregator<Worker>({
      queue: this.queue,
      batchSize: options.settings.batchSize,
      maxBatchDelayMs: options.settings.maxBatchDelayMs,
      prefetch: options.settings.queue.priorityLevels === 1 ? 'always' : 'top-level',
      isIdleWaiting: options.isIdleBatchWaiting === true,
      workers: () => this.pool.workers,
      dispatch: (worker, jobs, reason) => {
        // Given to an idle worker, the batch runs at once (the aggregator's loop then offers the
        // worker its next batch); otherwise it waits prefetched, its deadlines still watched.
        if (worker.give(jobs, reason)) this.#countStarted(jobs);
        else this.#watchPrefetchedDeadlines(jobs);
        // The aggregator also dispatches from its own timers (delay, end of turn): say so.
        this.emit('progress');
      },
      expired: (job) => {
        // Answered from the aggregator's own deadline timer: say so once this pass is over.
        if (!this.#isProgressDue) {
          this.#isProgressDue = true;
          queueMicrotask(() => {
            this.#isProgressDue = false;
            this.emit('progress');
          });
        }
        return this.#expiredError(job);
      },
    });
    this.pool.on('ready', () => this.#pump());
    // A loading worker that can decode before its session exists takes its first batch now (synchronously).
    this.pool.on('prepared', () => this.#pump());
    this.pool.on('started', (_worker, jobs) => {
      this.#countStarted(jobs);
      // The worker that started now wants its next batch: it is given one here, synchronously.
      this.#pump();
    });
    this.pool.on('finished', (worker, outcome) => {
      this.#runningJobs -= outcome.jobs.length;
      recordBatchSpan(outcome.jobs, {
        workerId: worker.id,
        modelName: this.modelName,
        modelVersion: this.modelVersion,
        isOk: outcome.isOk,
      });
      this.emit('batch', {
        batchSize: outcome.jobs.length,
        inferenceMs: outcome.inferenceMs,
        reason: outcome.reason,
        isOk: outcome.isOk,
        stages: outcome.stages,
      });
      if (worker.isIdle) {
        // After a top-level batch, the worker waits a moment for the next top-level request
        // before it starts lower-level work (see TOP_LEVEL_HOLD_MS).
        if (this.queue.levelCount > 1 && outcome.jobs.some((job) => job.priority === 1))
          this.aggregator.holdForTopLevel(worker);
        this.#pump();
      } else this.emit('progress');
    });
    // A batch handed to a worker that never began goes back to the front of the queue: a dead
    // worker's prefetched batch, or the first batch of a load that failed.
    const handBack = (jobs: Job[]) => {
      this.queue.returnToFront(jobs);
      this.#pump();
    };
    this.pool.on('failed', (_worker, _error, unstarted) => handBack(unstarted));
    this.pool.on('returned', handBack);
    this.pool.on('loaded', (event) => this.emit('loaded', event));
    this.pool.on('changed', () => {
      this.#answerStranded();
      this.emit('progress');
      this.emit('changed');
    });
  }

  /**
   * Queues a job. Throws at once (never blocks) when the queue is full, when the version has no
   * workers and will get none, or while it is being removed.
   * @throws MARINA_ERR_QUEUE_FULL, MARINA_ERR_NO_WORKERS, MARINA_ERR_MODEL_UNLOADING
   */
  submit(job: Job): void {
    if (!this.#isAccepting)
      throw createServeError.MARINA_ERR_MODEL_UNLOADING(
        `${this.label} is being unregistered and takes no new requests`,
      );
    if (this.maxWorkers === 0 || this.pool.hasGivenUp) throw this.#noWorkersError();
    if (this.state !== 'resident') job.timings.waitedForLoad = true;
    this.queue.offer(job);
    if (job.priority === 1 && this.queue.levelCount > 1) this.aggregator.noteTopLevel();
    this.lastUsedAt = Date.now();
    this.lastUse = nextUse();
    this.demand.add(performance.now());
    if (this.pool.target === 0 || this.#transition === 'unloading') this.#startOnDemand(this, job.requestId);
    this.#pump();
  }

  /**
   * A queued job's client went away: it leaves the queue unrun (a job already in a worker's hands
   * runs, and its answer is dropped).
   */
  cancel(job: Job): void {
    if (job.isSettled || job.timings.dispatchedAt !== undefined) return;
    const error = createServeError.MARINA_ERR_CLIENT_GONE(
      `the client of request ${job.requestId} went away while it waited in the queue of ${this.label}; it was dropped without running`,
    );
    if (this.queue.remove(job, error)) this.#pump();
  }

  /**
   * Where the version is in memory, as describe and the OIP metadata show it: its state, what the
   * budget counts for it (0 when not in memory; its estimate until a load measured it), when a
   * request last came, and whether it is pinned.
   */
  residency(): { state: ResidencyState; residentBytes: number; lastUsed: string | null; pinned: boolean } {
    const state = this.state;
    return {
      state,
      residentBytes: state === 'registered' ? 0 : this.residentBytes || this.estimatedBytes,
      lastUsed: this.lastUsedAt === undefined ? null : new Date(this.lastUsedAt).toISOString(),
      pinned: this.pinned,
    };
  }

  /** Where the version is in its life (see ResidencyState); derived from its workers and the transition in progress. */
  get state(): ResidencyState {
    if (this.#transition !== undefined) return this.#transition;
    if (this.pool.target === 0 && this.pool.workers.length === 0) return 'registered';
    if (this.pool.hasGivenUp) return 'registered';
    return this.pool.readyCount > 0 ? 'resident' : 'loading';
  }

  /** The load or unload the registry's residency runs now, if any. */
  get transition(): 'loading' | 'unloading' | undefined {
    return this.#transition;
  }

  /** Set by the registry's residency while it loads or unloads the version (undefined: settled). */
  setTransition(transition: 'loading' | 'unloading' | undefined): void {
    this.#transition = transition;
    this.emit('progress');
  }

  /**
   * Answers what waits in the queue with `error` (a load that could not happen, an explicit
   * unload); jobs already in a worker's hands are not touched.
   */
  failQueued(error: MarinaError): void {
    this.queue.failAll(error);
    this.emit('progress');
  }

  #expiredError(job: Job) {
    const waitedMs = Math.round(performance.now() - job.timings.arrivedAt);
    if (job.isRequestDeadline)
      return createServeError.MARINA_ERR_DEADLINE_EXCEEDED(
        `${this.label} could not start this request within its own timeout or deadline (waited ${waitedMs} ms at priority ${job.priority}); it was answered without running. Allow more time, send it at a higher priority, or add workers`,
        { details: { priority: job.priority } },
      );
    const policyMs = this.settings.queue.levels[job.priority - 1]?.timeoutMs ?? this.settings.clientTimeoutMs;
    return createServeError.MARINA_ERR_CLIENT_TIMEOUT(
      this.queue.levelCount > 1
        ? `${this.label} could not start this request within priority ${job.priority}'s timeoutMs (${policyMs} ms); it was answered without running. Retry later, add workers, or raise timeoutMs`
        : `${this.label} could not start this request within clientTimeoutInMills (${policyMs} ms); it was answered without running. Retry later, add workers, or raise clientTimeoutInMills`,
      { details: { priority: job.priority } },
    );
  }

  /**
   * A prefetched batch still waits (for the batch running before it), so its jobs keep their client
   * deadlines: one whose deadline passes before the batch starts is answered then, as a queued one
   * would be (TorchServe, without prefetching, would drop it when polling the queue). The thread
   * may already be decoding it; its result is then dropped.
   */
  #watchPrefetchedDeadlines(jobs: readonly Job[]): void {
    let next = Infinity;
    for (const job of jobs) if (job.deadline !== undefined && job.deadline < next) next = job.deadline;
    if (next === Infinity) return;
    const timer = setTimeout(
      () => {
        const now = performance.now();
        const waiting = jobs.filter((job) => !job.isSettled && job.timings.dispatchedAt === undefined);
        let expired = 0;
        for (const job of waiting) {
          if (job.deadline !== undefined && job.deadline <= now) {
            job.reject(this.#expiredError(job));
            expired++;
          }
        }
        if (expired > 0) this.emit('progress');
        const remaining = waiting.filter((job) => !job.isSettled);
        if (remaining.length > 0) this.#watchPrefetchedDeadlines(remaining);
      },
      Math.max(0, next - performance.now()),
    );
    // Never keeps the process alive: a batch that starts or fails first makes the check a no-op.
    timer.unref?.();
  }

  /** A taken batch began running: its jobs are no longer waiting. */
  #countStarted(jobs: readonly Job[]): void {
    this.queue.markStarted(jobs.length);
    this.#runningJobs += jobs.length;
    if (this.#levelStats.length > 1) {
      for (const job of jobs) {
        const stats = this.#levelStats[job.priority - 1]!;
        stats.started++;
        stats.queueMs += (job.timings.dispatchedAt ?? performance.now()) - job.timings.arrivedAt;
      }
    }
  }

  /** Per priority level (models with more than one): jobs queued now, jobs started so far and their mean time in the queue. */
  priorityLevels(): Array<{ level: number; queued: number; started: number; meanQueueMs: number }> | undefined {
    if (this.#levelStats.length <= 1) return undefined;
    return this.#levelStats.map((stats, i) => ({
      level: i + 1,
      queued: this.queue.sizeOf(i + 1),
      started: stats.started,
      meanQueueMs: stats.started === 0 ? 0 : stats.queueMs / stats.started,
    }));
  }

  #noWorkersError() {
    const cause = this.pool.lastError;
    return createServeError.MARINA_ERR_NO_WORKERS(
      this.maxWorkers === 0 || !this.pool.hasGivenUp
        ? `Model "${this.modelName}" version ${this.modelVersion} has no worker to serve inference request (max_worker=${this.maxWorkers}). Please use scale workers API to add workers (PUT /models/${this.modelName}?min_worker=1).`
        : `Model "${this.modelName}" version ${this.modelVersion} has no worker: its workers failed to start (${cause?.message ?? 'unknown error'}). Fix the model and register it again.`,
      { cause },
    );
  }

  #pump(): void {
    this.aggregator.pump();
    this.emit('progress');
  }

  /** Answers queued jobs no worker will ever take: the pool gave up, or the version drains with no worker left. */
  #answerStranded(): void {
    if (this.queue.size === 0) return;
    if (this.#isDraining) {
      if (!this.pool.hasWorkerComing)
        this.queue.failAll(
          createServeError.MARINA_ERR_MODEL_UNLOADING(
            `${this.label} was unregistered (or the server stopped) and has no worker left to run this request`,
          ),
        );
    } else if (this.pool.hasGivenUp) {
      this.queue.failAll(this.#noWorkersError());
    }
  }

  /**
   * Scaled to max_worker=0: nothing will run what is queued. Answers it now (jobs already in a
   * worker's hands finish there).
   */
  failWaiting(): void {
    this.queue.failAll(this.#noWorkersError());
    this.emit('progress');
  }

  /** Jobs admitted whose batch has started running in a worker and is not answered yet. */
  get runningJobs(): number {
    return this.#runningJobs;
  }

  /** Jobs admitted and not answered: waiting plus running. */
  get pendingJobs(): number {
    return this.queue.waiting + this.#runningJobs;
  }

  /**
   * Stops taking jobs and lets queued and running jobs finish (no batch waits for maxBatchDelay any
   * more), then retires the workers. Never waits for a thread to end: a stuck batch fails at
   * responseTimeout, and what no worker is left to run is answered with MARINA_ERR_MODEL_UNLOADING.
   */
  async drain(): Promise<void> {
    this.#isAccepting = false;
    this.#isDraining = true;
    this.pool.stopRestarting();
    this.aggregator.flush();
    this.#pump();
    this.#answerStranded();
    if (this.pendingJobs > 0) {
      // Past unload_grace_seconds, what is still waiting or running is answered 503 and the
      // threads running it are abandoned (a native run() cannot be interrupted; its thread ends,
      // and its memory comes back, when the run returns).
      const grace = setTimeout(() => {
        const error = this.#unloadingError('unregistered (or the server stopped)');
        this.queue.failAll(error);
        this.pool.abandonRunning(error);
        this.emit('progress');
      }, this.unloadGraceMs);
      grace.unref?.();
      await new Promise<void>((resolve) => {
        const check = () => {
          this.#answerStranded();
          if (this.pendingJobs > 0) return;
          this.off('progress', check);
          resolve();
        };
        this.on('progress', check);
        check();
      });
      clearTimeout(grace);
    }
    this.aggregator.close();
    this.pool.close();
  }

  #unloadingError(what: string): MarinaError {
    return createServeError.MARINA_ERR_MODEL_UNLOADING(
      `${this.label} was ${what} while this request ran, and it did not finish within unload_grace_seconds (${this.unloadGraceMs / 1000} s); its worker thread was abandoned. Retry the request`,
    );
  }

  /** The error for requests a grace period cut off during an unload, eviction or scale-down. */
  unloadingError(what: string): MarinaError {
    return this.#unloadingError(what);
  }

  describe(): ModelDescription {
    const s = this.settings;
    return {
      modelName: this.modelName,
      modelVersion: this.modelVersion,
      modelUrl: this.url,
      runtime: this.runtime,
      minWorkers: this.minWorkers,
      maxWorkers: this.maxWorkers,
      batchSize: s.batchSize,
      maxBatchDelay: s.maxBatchDelayMs,
      responseTimeout: s.responseTimeoutMs / 1000,
      startupTimeout: s.startupTimeoutMs / 1000,
      maxRetryTimeoutInSec: 300,
      clientTimeoutInMills: s.clientTimeoutMs,
      parallelType: '',
      parallelLevel: 0,
      deviceType: 'cpu',
      continuousBatching: false,
      useJobTicket: false,
      useVenv: false,
      stateful: false,
      sequenceMaxIdleMSec: 0,
      sequenceTimeoutMSec: 0,
      maxNumSequence: 1,
      maxSequenceJobQueueSize: 1,
      loadedAtStartup: this.loadedAtStartup,
      workers: this.pool.workers.map((w) => ({
        id: w.id,
        startTime: w.startTime.toISOString(),
        status: w.state,
        memoryUsage: w.memoryBytes,
        pid: process.pid,
        gpu: false,
        gpuUsage: 'N/A',
        intraOpNumThreads: w.intraOpNumThreads,
        cpuPriority: w.isBackground ? 'background' : 'normal',
        ...(w.warmupMs !== undefined ? { warmupMs: Math.round(w.warmupMs) } : {}),
      })),
      jobQueueStatus: {
        remainingCapacity: this.queue.remainingCapacity,
        pendingRequests: this.queue.waiting,
        ...this.#describePriorities(),
      },
      ...this.residency(),
      idleUnloadSeconds: this.idleUnloadMs / 1000,
      precision: this.quantization?.precision ?? 'fp32',
      ...(this.quantization ? { quantization: this.quantization } : {}),
    };
  }

  /** describe's jobQueueStatus additions for a model with priority levels: each level's policy, depth and queue time. */
  #describePriorities(): { priorityLevels?: PriorityLevelStatus[] } {
    const levels = this.priorityLevels();
    if (levels === undefined) return {};
    const q = this.settings.queue;
    return {
      priorityLevels: levels.map((l) => ({
        level: l.level,
        isDefault: l.level === q.defaultPriorityLevel,
        pendingRequests: l.queued,
        startedRequests: l.started,
        meanQueueMs: Math.round(l.meanQueueMs * 100) / 100,
        ...q.levels[l.level - 1]!,
      })),
    };
  }

  stats(): ModelVersionStats {
    return {
      modelName: this.modelName,
      modelVersion: this.modelVersion,
      ...(this.queue.levelCount > 1
        ? { queueDepthByPriority: Array.from({ length: this.queue.levelCount }, (_, i) => this.queue.sizeOf(i + 1)) }
        : {}),
      queueDepth: this.queue.waiting,
      runningJobs: this.#runningJobs,
      jobQueueSize: this.queue.capacity,
      workers: this.pool.workers.length,
      busyWorkers: this.pool.busyCount,
      minWorkers: this.minWorkers,
      maxWorkers: this.maxWorkers,
      intraOpNumThreads: this.pool.workers[0]?.intraOpNumThreads ?? 0,
      threadsInUse: this.pool.threadCount,
      state: this.state,
      residentBytes: this.state === 'registered' ? 0 : this.residentBytes || this.estimatedBytes,
    };
  }

  snapshot(isDefault: boolean): SnapshotModelVersion {
    return {
      defaultVersion: isDefault,
      marName: this.archivePath.split(/[\\/]/).filter(Boolean).pop() ?? this.archivePath,
      url: this.url,
      minWorkers: this.minWorkers,
      maxWorkers: this.maxWorkers,
      batchSize: this.settings.batchSize,
      maxBatchDelay: this.settings.maxBatchDelayMs,
      responseTimeout: this.settings.responseTimeoutMs / 1000,
      startupTimeout: this.settings.startupTimeoutMs / 1000,
      runtimeType: this.runtime,
      ...(this.pinned ? { pinned: true } : {}),
      ...(this.idleUnloadMs > 0 ? { idleUnloadSeconds: this.idleUnloadMs / 1000 } : {}),
      ...(this.lastUsedAt !== undefined ? { lastUsed: new Date(this.lastUsedAt).toISOString() } : {}),
    };
  }
}
