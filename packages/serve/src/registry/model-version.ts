import { EventEmitter } from 'node:events';
import type { Manifest } from '@marina/archive';
import { createServeError } from '../errors.ts';
import type { ModelSettings } from '../model-settings.ts';
import { BatchAggregator, type DispatchReason } from '../scheduling/batch-aggregator.ts';
import type { Job } from '../scheduling/job.ts';
import { JobQueue } from '../scheduling/job-queue.ts';
import type { Worker } from '../workers/worker.ts';
import { WorkerPool } from '../workers/worker-pool.ts';
import type { WorkerInit } from '../workers/worker-protocol.ts';
import type { ModelDescription, ModelVersionStats, SnapshotModelVersion } from './model-registry-api.ts';
import type { HandlerStagesMs } from './model-registry-api.ts';

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
  handler: string;
  runtime: string;
  settings: ModelSettings;
  loadedAtStartup: boolean;
  isDownloaded: boolean;
  /** Workers this version will run once started (counts toward the server-wide thread split). */
  plannedWorkers: number;
  /** Builds a worker's init message (the registry fills in threads). */
  createInit(version: ModelVersion): WorkerInit;
  log?: (level: 'info' | 'warn' | 'error', message: string) => void;
}

/**
 * One registered model version: its settings, its bounded job queue, its batch aggregator and
 * its worker pool. Jobs go in through `submit`; `drain` stops intake and waits for them.
 */
export class ModelVersion extends EventEmitter<{ batch: [BatchEvent]; changed: [] }> {
  readonly modelName: string;
  readonly modelVersion: string;
  readonly url: string;
  readonly archivePath: string;
  readonly modelDir: string;
  readonly digest: string;
  readonly manifest: Manifest;
  readonly modelYamlConfig: Record<string, unknown>;
  readonly handler: string;
  readonly runtime: string;
  readonly settings: ModelSettings;
  readonly loadedAtStartup: boolean;
  readonly isDownloaded: boolean;
  readonly label: string;
  readonly queue: JobQueue;
  readonly pool: WorkerPool;
  readonly aggregator: BatchAggregator<Worker>;
  minWorkers: number;
  maxWorkers: number;
  plannedWorkers: number;
  #inFlight = 0;
  #isAccepting = true;
  #drainWaiters: Array<() => void> = [];

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
    this.handler = options.handler;
    this.runtime = options.runtime;
    this.settings = options.settings;
    this.loadedAtStartup = options.loadedAtStartup;
    this.isDownloaded = options.isDownloaded;
    this.label = `model '${options.modelName}' version '${options.modelVersion}'`;
    this.minWorkers = options.settings.minWorkers;
    this.maxWorkers = options.settings.maxWorkers;
    this.plannedWorkers = options.plannedWorkers;
    this.queue = new JobQueue({ capacity: options.settings.jobQueueSize, label: this.label });
    this.pool = new WorkerPool({
      label: this.label,
      startupTimeoutMs: options.settings.startupTimeoutMs,
      responseTimeoutMs: options.settings.responseTimeoutMs,
      createInit: () => options.createInit(this),
      log: options.log,
    });
    this.aggregator = new BatchAggregator<Worker>({
      queue: this.queue,
      batchSize: options.settings.batchSize,
      maxBatchDelayMs: options.settings.maxBatchDelayMs,
      acquireIdleWorker: () => this.pool.acquireIdle(),
      busyWorkerCount: () => this.pool.busyCount,
      dispatch: (worker, jobs, reason) => this.#dispatch(worker, jobs, reason),
    });
    this.pool.on('idle', () => this.aggregator.pump());
    this.pool.on('changed', () => {
      // A pool that gave up will never serve the queued jobs: answer them now.
      if (this.pool.hasGivenUp) this.queue.failAll(this.#noWorkersError());
      this.emit('changed');
    });
  }

  /**
   * Queues a job. Throws at once (never blocks) when the queue is full, when the version has no
   * workers and will get none, or while it is being removed.
   * @throws MARINA_ERR_QUEUE_FULL, MARINA_ERR_NO_WORKERS, MARINA_ERR_MODEL_UNLOADING
   */
  submit(job: Job): void {
    if (!this.#isAccepting) throw createServeError.MARINA_ERR_MODEL_UNLOADING(`${this.label} is being unregistered and takes no new requests`);
    if (this.pool.target === 0 || this.pool.hasGivenUp) throw this.#noWorkersError();
    this.queue.offer(job);
    this.#inFlight++;
    job.onSettled = () => this.#onJobDone();
    this.aggregator.pump();
  }

  #noWorkersError() {
    const cause = this.pool.lastError;
    return createServeError.MARINA_ERR_NO_WORKERS(
      this.pool.target === 0
        ? `Model "${this.modelName}" version ${this.modelVersion} has no worker to serve inference request. Please use scale workers API to add workers (PUT /models/${this.modelName}?min_worker=1).`
        : `Model "${this.modelName}" version ${this.modelVersion} has no worker: its workers failed to start (${cause?.message ?? 'unknown error'}). Fix the model and register it again.`,
      { cause },
    );
  }

  #dispatch(worker: Worker, jobs: Job[], reason: DispatchReason): void {
    void this.pool.runBatch(worker, jobs).then((outcome) => {
      this.emit('batch', { batchSize: jobs.length, inferenceMs: outcome.inferenceMs, reason, isOk: outcome.isOk, stages: outcome.stages });
    });
  }

  #onJobDone(): void {
    this.#inFlight--;
    if (this.#inFlight === 0) for (const resolve of this.#drainWaiters.splice(0)) resolve();
  }

  /** Jobs queued or running. */
  get pendingJobs(): number {
    return this.#inFlight;
  }

  /** Stops taking jobs, lets queued and running jobs finish, then stops the workers. */
  async drain(): Promise<void> {
    this.#isAccepting = false;
    this.aggregator.flush();
    if (this.#inFlight > 0 && this.pool.readyCount > 0) await new Promise<void>((resolve) => this.#drainWaiters.push(resolve));
    this.queue.failAll(createServeError.MARINA_ERR_MODEL_UNLOADING(`${this.label} was unregistered before this request reached a worker`));
    await this.pool.close();
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
      clientTimeoutInMills: 0,
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
        ...(w.warmupMs !== undefined ? { warmupMs: Math.round(w.warmupMs) } : {}),
      })),
      jobQueueStatus: { remainingCapacity: this.queue.remainingCapacity, pendingRequests: this.queue.size },
    };
  }

  stats(): ModelVersionStats {
    return {
      modelName: this.modelName,
      modelVersion: this.modelVersion,
      queueDepth: this.queue.size,
      jobQueueSize: this.queue.capacity,
      workers: this.pool.workers.length,
      busyWorkers: this.pool.workers.filter((w) => w.state === 'BUSY').length,
      minWorkers: this.minWorkers,
      maxWorkers: this.maxWorkers,
      intraOpNumThreads: this.pool.workers[0]?.intraOpNumThreads ?? 0,
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
    };
  }
}
