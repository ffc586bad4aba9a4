import { EventEmitter, once } from 'node:events';
import { rm } from 'node:fs/promises';
import {
  assertModelIdentity,
  extractToCache,
  normalizeManifest,
  readModelConfig,
  readQuantizationSummary,
  resolveInside,
  resolveManifestFiles,
} from '@marina/archive';
import {
  allowSpinningDefaultFrom,
  cacheOptimizedModelDefaultFrom,
  forceSpinningStopDefaultFrom,
} from '../backend/ort-session.ts';
import { didYouMean, MarinaError } from '@marina/errors';
import { fixedBatchWarning } from '@marina/handlers';
import type { ServerConfig } from '../config/server-config.ts';
import { createServeError, toMarinaError } from '../errors.ts';
import type { ModelCaches } from '../cache/model-caches.ts';
import { resolveModelSettings } from '../model-settings.ts';
import { Job, type JobInput, type JobResult } from '../scheduling/job.ts';
import { resolveIntraOpThreads } from '../workers/thread-defaults.ts';
import type { BodyDecoding, HandlerStagesMs, WorkerInit } from '../workers/worker-protocol.ts';
import type {
  ModelDescription,
  ModelListEntry,
  ModelRegistryApi,
  ModelVersionStats,
  RegisterModelOptions,
  RegisterResult,
  RegistryEvents,
  ScaleOptions,
  SnapshotModelVersion,
} from './model-registry-api.ts';
import { ModelVersion } from './model-version.ts';
import { readModelSignature } from './read-model-signature.ts';
import { MARINA_VERSION } from '../version.ts';

interface Model {
  versions: Map<string, ModelVersion>;
  defaultVersion: string;
}

export interface PredictOptions {
  modelName: string;
  /** undefined = the default version. */
  modelVersion?: string;
  requestId: string;
  input: JobInput;
  headers?: Record<string, string>;
  /** performance.now() when the request arrived (default: now). */
  arrivedAt?: number;
  /** How the worker decodes raw `input.body` bytes for the handler ('json', 'text'); undefined passes the input as it is. */
  bodyDecoding?: BodyDecoding;
}

/** Where one prediction's time went, ms (the Server-Timing header). */
export interface PredictTimingsMs {
  /** In the model version's job queue. */
  queueMs: number;
  /** From leaving the queue to the worker's answer: hand-off, handler and model. */
  workerMs: number;
  /** The worker's stages for the job's batch, for handlers with separate stages. */
  stages?: HandlerStagesMs;
  /** The handler's whole time for the job's batch, measured in the worker thread (workerMs adds the hand-offs). */
  handlerMs?: number;
}

/** A prediction's answer and where its time went. */
export interface PredictResult extends JobResult {
  timings: PredictTimingsMs;
}

export interface ModelRegistryOptions {
  config: ServerConfig;
  log?: (level: 'info' | 'warn' | 'error', message: string) => void;
  /** Told when a version opens or is removed, to bound and clean the extraction caches. */
  caches?: ModelCaches;
  /** Environment read for MARINA_ORT_CACHE_OPTIMIZED_MODEL (default process.env). */
  env?: Record<string, string | undefined>;
}

/** Where threads are pinned (OMP_NUM_THREADS, a model's intraOpNumThreads), manual scaling may oversubscribe the cores up to this factor, no further. */
const PINNED_THREAD_BUDGET_FACTOR = 4;

/**
 * Model name → versions, default version, and each version's queue and workers.
 * The core's implementation of ModelRegistryApi (see model-registry-api.ts for the contract).
 */
export class ModelRegistry implements ModelRegistryApi {
  readonly events = new EventEmitter<RegistryEvents>();
  readonly #config: ServerConfig;
  readonly #log: (level: 'info' | 'warn' | 'error', message: string) => void;
  readonly #caches: ModelCaches | undefined;
  readonly #models = new Map<string, Model>();
  /** Versions being registered (archive opened, not yet in #models), to catch concurrent duplicates. */
  readonly #registering = new Set<string>();
  #isClosing = false;
  readonly #cacheOptimizedModelDefault: boolean | undefined;
  readonly #allowSpinningDefault: boolean | undefined;
  readonly #forceSpinningStopDefault: boolean | undefined;

  constructor(options: ModelRegistryOptions) {
    this.#config = options.config;
    this.#log = options.log ?? (() => undefined);
    this.#caches = options.caches;
    this.#cacheOptimizedModelDefault = cacheOptimizedModelDefaultFrom(options.env ?? process.env);
    this.#allowSpinningDefault = allowSpinningDefaultFrom(options.env ?? process.env);
    this.#forceSpinningStopDefault = forceSpinningStopDefaultFrom(options.env ?? process.env);
  }

  /** Extractions of opens in progress (not yet versions): the caches must not remove them. */
  readonly #opening: string[] = [];

  #modelDirsInUse(): string[] {
    return [...[...this.#versions()].map((v) => v.modelDir), ...this.#opening];
  }

  #assertOpen(): void {
    if (this.#isClosing)
      throw createServeError.MARINA_ERR_SERVER_CLOSING('the server is shutting down and registers no models');
  }

  get isClosing(): boolean {
    return this.#isClosing;
  }

  /** Opens an archive and registers its model version, then starts its workers. */
  async register(options: RegisterModelOptions): Promise<RegisterResult> {
    const version = await this.open(options);
    return this.start(version, { synchronous: options.synchronous ?? true });
  }

  /**
   * First half of register: extracts the archive, combines settings and adds the version with
   * no workers yet. Used by startup loading so that every model's workers are counted before
   * any thread count is chosen.
   * @throws MARINA_ERR_MODEL_VERSION_CONFLICT, MARINA_ERR_MODEL_SETTINGS_INVALID, archive errors.
   */
  async open(options: RegisterModelOptions): Promise<ModelVersion> {
    this.#assertOpen();
    const extracted = await extractToCache({
      archivePath: options.archivePath,
      cacheDir: this.#config.extractionCacheDir,
    });
    this.#opening.push(extracted.modelDir);
    try {
      return await this.#openExtracted(options, extracted);
    } finally {
      this.#opening.splice(this.#opening.indexOf(extracted.modelDir), 1);
    }
  }

  async #openExtracted(
    options: RegisterModelOptions,
    extracted: Awaited<ReturnType<typeof extractToCache>>,
  ): Promise<ModelVersion> {
    // close() may have run during any await: a version added after it would start workers nothing drains.
    this.#assertOpen();
    const manifest = normalizeManifest(extracted.manifest, {
      archivePath: options.archivePath,
      modelName: options.modelName,
      handler: options.handler,
    });
    const modelName = manifest.model.modelName;
    const modelVersion = manifest.model.modelVersion;
    assertModelIdentity(modelName, modelVersion);
    const key = `${modelName}\u0000${modelVersion}`;
    if (this.#models.get(modelName)?.versions.has(modelVersion) || this.#registering.has(key)) {
      throw createServeError.MARINA_ERR_MODEL_VERSION_CONFLICT(
        `Model version ${modelVersion} is already registered for model ${modelName}; unregister it first (DELETE /models/${modelName}/${modelVersion})`,
      );
    }
    this.#registering.add(key);
    try {
      // Every file the manifest names must lie inside the archive (the validator's helper).
      await resolveManifestFiles(extracted.modelDir, manifest.model);
      const modelYamlConfig = await readModelConfig(extracted.modelDir, manifest);
      const quantization = await readQuantizationSummary(extracted.modelDir);
      this.#assertOpen();
      const settings = resolveModelSettings({
        modelName,
        modelVersion,
        server: this.#config,
        modelYamlConfig,
        modelsJson: this.#config.models[modelName]?.[modelVersion],
        api: {
          batchSize: options.batchSize,
          maxBatchDelayMs: options.maxBatchDelayMs,
          responseTimeoutSec: options.responseTimeoutSec,
          startupTimeoutSec: options.startupTimeoutSec,
          initialWorkers: options.initialWorkers,
          minWorkers: options.minWorkers,
          maxWorkers: options.maxWorkers,
          fallbackWorkers: options.fallbackWorkers,
        },
      });
      // Read once here, off the request path: the data plane's metadata and input checks use it.
      const signature = await readModelSignature({
        modelDir: extracted.modelDir,
        serializedFile: manifest.model.serializedFile,
      });
      this.#assertOpen();
      // The same rule and words as model-archiver validate: served, with a warning.
      const batchWarning =
        'signature' in signature ? fixedBatchWarning(signature.signature, settings.batchSize) : undefined;
      if (batchWarning !== undefined)
        this.#log(
          'warn',
          `model '${modelName}' version '${modelVersion}': ${batchWarning.code}: ${batchWarning.message}`,
        );
      const handler = manifest.model.handler;
      if (!handler) {
        throw createServeError.MARINA_ERR_MODEL_LOAD_FAILED(
          `${modelName} (${options.url}) has no handler: set one in the manifest (model-archiver --handler) or pass handler= when registering`,
        );
      }
      const version = new ModelVersion({
        modelName,
        modelVersion,
        url: options.url,
        archivePath: options.archivePath,
        modelDir: extracted.modelDir,
        digest: extracted.digest,
        manifest,
        modelYamlConfig,
        signature,
        handler,
        runtime: options.runtime ?? manifest.runtime ?? 'python',
        settings,
        loadedAtStartup: options.loadedAtStartup ?? false,
        isDownloaded: options.isDownloaded ?? false,
        ...(quantization ? { quantization } : {}),
        plannedWorkers: settings.minWorkers,
        createInit: (v) => this.#createInit(v),
        startOnDemand: (v, requestId) => this.#startOnDemand(v, requestId),
        log: this.#log,
      });
      this.#assertWithinThreadBudget(version, settings.minWorkers, `${modelName} version ${modelVersion}`);
      version.on('loaded', (e) =>
        this.events.emit('workerLoaded', { modelName, modelVersion, workerId: e.workerId, loadMs: e.loadMs }),
      );
      version.on('batch', (e) => {
        this.events.emit('batch', {
          modelName,
          modelVersion,
          batchSize: e.batchSize,
          inferenceMs: e.inferenceMs,
          dispatchReason: e.reason,
          isOk: e.isOk,
          ...(e.stages ? { stages: e.stages } : {}),
        });
      });
      let model = this.#models.get(modelName);
      if (!model) {
        model = { versions: new Map(), defaultVersion: modelVersion };
        this.#models.set(modelName, model);
      }
      model.versions.set(modelVersion, version);
      // TorchServe ignores the models JSON's defaultVersion for models loaded at start-up
      // (pytorch/serve#2744); Marina applies it, as documented.
      const isJsonDefault =
        options.loadedAtStartup === true && this.#config.models[modelName]?.[modelVersion]?.defaultVersion === true;
      if (options.isDefault || isJsonDefault) model.defaultVersion = modelVersion;
      this.events.emit('changed');
      await this.#caches?.opened(version.modelDir, this.#modelDirsInUse());
      return version;
    } finally {
      this.#registering.delete(key);
    }
  }

  /**
   * Second half of register: starts the version's workers. With `synchronous`, waits until they
   * are READY; if none of them could start, the version is removed again and the error thrown
   * (TorchServe: "Failed to start workers").
   */
  async start(version: ModelVersion, options: { synchronous: boolean }): Promise<RegisterResult> {
    if (this.#isClosing) {
      await this.#remove(version);
      this.#assertOpen();
    }
    const requested = version.plannedWorkers;
    const starting = version.pool.setTarget(requested);
    const rebalanced = this.#rebalanceThreadsAfter(starting);
    const result = (ready: number): RegisterResult => ({
      modelName: version.modelName,
      modelVersion: version.modelVersion,
      workersRequested: requested,
      workersReady: ready,
    });
    if (!options.synchronous) {
      void starting.catch(() => undefined);
      return result(0);
    }
    await rebalanced;
    const ready = await starting;
    if (this.#isClosing) {
      await this.#remove(version);
      this.#assertOpen();
    }
    if (requested > 0 && ready === 0) {
      const cause = version.pool.lastError;
      await this.#remove(version);
      throw createServeError.MARINA_ERR_WORKER_START_FAILED(
        `Failed to start workers for model ${version.modelName} version: ${version.modelVersion}: ${cause?.message ?? 'unknown error'}`,
        { cause },
      );
    }
    this.events.emit('changed');
    return result(ready);
  }

  #createInit(version: ModelVersion): WorkerInit {
    const { intraOpNumThreads } = resolveIntraOpThreads({
      configured: version.settings.intraOpNumThreads,
      ompNumThreads: this.#config.ompNumThreads,
      cpuCount: this.#config.cpuCount,
      totalWorkers: this.plannedWorkerCount(),
    });
    return {
      modelName: version.modelName,
      modelVersion: version.modelVersion,
      modelDir: version.modelDir,
      manifest: version.manifest as unknown as Record<string, unknown>,
      handler: version.handler,
      serializedFilePath: version.manifest.model.serializedFile
        ? resolveInside(version.modelDir, version.manifest.model.serializedFile, 'model.serializedFile')
        : undefined,
      batchSize: version.settings.batchSize,
      modelYamlConfig: version.modelYamlConfig,
      intraOpNumThreads,
      cacheOptimizedModelDefault: this.#cacheOptimizedModelDefault,
      allowSpinningDefault: this.#allowSpinningDefault,
      forceSpinningStopDefault: this.#forceSpinningStopDefault,
      limitMaxImagePixels: this.#config.limitMaxImagePixels,
      maxResponseBytes: this.#config.maxResponseBytes,
      serverVersion: MARINA_VERSION,
    };
  }

  /**
   * Once `change` settles (workers added or removed), brings every version's running workers to
   * the current default thread split, so the cores stay exactly divided (see WorkerPool.rebalanceThreads).
   * Resolves when every version is rebalanced; failures are logged, never thrown.
   */
  #rebalanceThreadsAfter(change: Promise<unknown>): Promise<void> {
    return change.then(
      () =>
        Promise.all(
          [...this.#versions()].map((v) =>
            v.pool
              .rebalanceThreads()
              .catch((error: unknown) =>
                this.#log(
                  'warn',
                  `${v.modelName} ${v.modelVersion}: rebalancing worker threads failed: ${(error as Error).message}`,
                ),
              ),
          ),
        ).then(() => undefined),
      () => undefined,
    );
  }

  /**
   * Workers all models will run: the basis of the default thread split. A version that may
   * autoscale counts its maxWorkers, so the cores are split for the workers the autoscaler may
   * add (else the first worker takes every core and the thread budget never lets a second start).
   */
  plannedWorkerCount(): number {
    let n = 0;
    for (const v of this.#versions()) n += Math.max(v.plannedWorkers, v.maxWorkers);
    return n;
  }

  /** TorchServe's `Model not found: x`, followed by the registered names and the closest one. */
  #modelNotFound(modelName: string): MarinaError {
    const names = [...this.#models.keys()].sort();
    const known =
      names.length === 0
        ? 'no models are registered (register one with POST /models on the management API, or load_models at start-up)'
        : `registered models: ${names.slice(0, 20).join(', ')}${names.length > 20 ? `, and ${names.length - 20} more` : ''}${didYouMean(modelName, names)}`;
    return createServeError.MARINA_ERR_MODEL_NOT_FOUND(`Model not found: ${modelName} (${known})`, {
      details: { modelName, registered: names.slice(0, 100) },
    });
  }

  /** Threads per worker of `version` as the budget counts them: its pinned count, else 1 (the least the default split gives). */
  #pinnedThreads(version: ModelVersion): number | undefined {
    return version.settings.intraOpNumThreads ?? this.#config.ompNumThreads;
  }

  /**
   * The thread budget manual scaling and registration share with the autoscaler: every model may
   * have one worker, and workers beyond the first must keep the workers of every model × their
   * intra-op threads within the cores (each unpinned worker counts 1 thread, the least the default
   * split gives it). Where the user pinned threads the autoscaler
   * leaves the budget to them, but a manual request is still capped at PINNED_THREAD_BUDGET_FACTOR
   * × cores, so `min_worker=1000` cannot start a thousand threads.
   * @throws MARINA_ERR_THREAD_BUDGET_EXCEEDED (400)
   */
  #assertWithinThreadBudget(version: ModelVersion, workers: number, what: string): void {
    if (workers <= 1) return;
    let threads = 0;
    for (const v of this.#versions()) {
      if (v === version) continue;
      threads += v.plannedWorkers * (this.#pinnedThreads(v) ?? 1);
    }
    const pinned = this.#pinnedThreads(version);
    const perWorker = pinned ?? 1;
    const budget = this.#config.cpuCount * (pinned === undefined ? 1 : PINNED_THREAD_BUDGET_FACTOR);
    if (threads + workers * perWorker <= budget) return;
    const most = Math.max(1, Math.floor((budget - threads) / perWorker));
    throw createServeError.MARINA_ERR_THREAD_BUDGET_EXCEEDED(
      `${what}: ${workers} workers × ${perWorker} thread${perWorker === 1 ? '' : 's'} would exceed the thread budget (${budget} threads on ${this.#config.cpuCount} cores, ${threads} already planned for other models); at most ${most} workers fit. Ask for fewer workers${pinned === undefined ? '' : ' or fewer threads per worker'}`,
      { details: { requestedWorkers: workers, maxWorkers: most, threadBudget: budget } },
    );
  }

  /** A request reached a version at 0 workers that may autoscale (min 0, max > 0): start one (a model's first worker always fits the budget). */
  #startOnDemand(version: ModelVersion, requestId: string): void {
    this.#log(
      'info',
      `${version.label}: request ${requestId} arrived at 0 workers; starting one (min_worker=0, max_worker=${version.maxWorkers})`,
    );
    version.plannedWorkers = 1;
    void this.#rebalanceThreadsAfter(version.pool.setTarget(1));
    this.events.emit('changed');
  }

  *#versions(): Iterable<ModelVersion> {
    for (const model of this.#models.values()) yield* model.versions.values();
  }

  /**
   * Finds a version: the default one when `modelVersion` is undefined.
   * @throws MARINA_ERR_MODEL_NOT_FOUND, MARINA_ERR_MODEL_VERSION_NOT_FOUND (404).
   */
  getVersion(modelName: string, modelVersion?: string): ModelVersion {
    const model = this.#models.get(modelName);
    if (!model) throw this.#modelNotFound(modelName);
    const version = model.versions.get(modelVersion ?? model.defaultVersion);
    if (!version) {
      throw createServeError.MARINA_ERR_MODEL_VERSION_NOT_FOUND(
        `Model version: ${modelVersion} does not exist for model: ${modelName} (available: ${[...model.versions.keys()].join(', ')})`,
      );
    }
    return version;
  }

  /**
   * Runs one inference request: queues a job on the version and waits for its result.
   * Emits 'request' when it is answered (also for errors after the model was found).
   * @throws MarinaError: not found (404), queue full / no workers (503), handler errors, timeouts.
   */
  async predict(options: PredictOptions): Promise<PredictResult> {
    const arrivedAt = options.arrivedAt ?? performance.now();
    if (this.#isClosing)
      throw createServeError.MARINA_ERR_SERVER_CLOSING(
        'the server is shutting down and accepts no new inference requests; retry against another replica',
      );
    const version = this.getVersion(options.modelName, options.modelVersion);
    const job = new Job({
      requestId: options.requestId,
      input: options.input,
      headers: options.headers,
      arrivedAt,
      bodyDecoding: options.bodyDecoding,
      clientTimeoutMs: version.settings.clientTimeoutMs,
    });
    let statusCode = 500;
    try {
      version.submit(job);
      const result = await job.promise;
      statusCode = result.statusCode;
      const t = job.timings;
      const dispatchedAt = t.dispatchedAt ?? arrivedAt;
      const timings: PredictTimingsMs = {
        queueMs: dispatchedAt - arrivedAt,
        workerMs: (t.finishedAt ?? performance.now()) - dispatchedAt,
      };
      if (t.stages) timings.stages = t.stages;
      if (t.handlerMs !== undefined) timings.handlerMs = t.handlerMs;
      // Not a spread: a TextJobResult's body is a getter, which a spread would drop.
      return Object.assign(result, { timings });
    } catch (error) {
      const e = toMarinaError(error);
      statusCode = e.statusCode;
      throw e;
    } finally {
      const t = job.timings;
      const end = t.finishedAt ?? performance.now();
      // Listened to by the metrics, when they are on: no event object per request otherwise.
      if (this.events.listenerCount('request') > 0)
        this.events.emit('request', {
          modelName: version.modelName,
          requestedVersion: options.modelVersion ?? 'default',
          modelVersion: version.modelVersion,
          statusCode,
          queueMs: (t.dispatchedAt ?? end) - t.arrivedAt,
          inferenceMs: t.dispatchedAt === undefined ? 0 : end - t.dispatchedAt,
          totalMs: end - t.arrivedAt,
        });
    }
  }

  async unregister(modelName: string, modelVersion?: string): Promise<void> {
    const model = this.#models.get(modelName);
    if (!model) throw this.#modelNotFound(modelName);
    const versionId = modelVersion ?? model.defaultVersion;
    const version = model.versions.get(versionId);
    if (!version)
      throw createServeError.MARINA_ERR_MODEL_VERSION_NOT_FOUND(
        `Model version: ${versionId} does not exist for model: ${modelName} (available: ${[...model.versions.keys()].join(', ')})`,
      );
    if (versionId === model.defaultVersion && model.versions.size > 1) {
      throw createServeError.MARINA_ERR_DEFAULT_VERSION_REMOVAL(
        `Cannot remove default version for model ${modelName}; set another default first (PUT /models/${modelName}/{version}/set-default)`,
      );
    }
    await this.#remove(version);
    if (version.isDownloaded) {
      await rm(version.archivePath, { recursive: true, force: true });
      // Its extracted copy too, unless another registered version was opened from the same bytes.
      if (![...this.#versions()].some((v) => v.modelDir === version.modelDir))
        await rm(version.modelDir, { recursive: true, force: true });
    }
  }

  async #remove(version: ModelVersion): Promise<void> {
    const model = this.#models.get(version.modelName);
    if (model?.versions.get(version.modelVersion) === version) {
      model.versions.delete(version.modelVersion);
      if (model.versions.size === 0) this.#models.delete(version.modelName);
      version.plannedWorkers = 0;
      this.events.emit('changed');
    }
    await version.drain();
    await this.#rebalanceThreadsAfter(Promise.resolve());
    if (!this.#isClosing) await this.#caches?.removed(version.modelDir, this.#modelDirsInUse());
  }

  async scale(
    modelName: string,
    modelVersion: string | undefined,
    options: ScaleOptions,
  ): Promise<{ workers: number }> {
    if (options.minWorkers < 0 || options.maxWorkers < options.minWorkers) {
      throw createServeError.MARINA_ERR_INVALID_WORKER_COUNT(
        options.minWorkers < 0
          ? `min_worker must be 0 or more, got ${options.minWorkers}`
          : 'max_worker cannot be less than min_worker.',
      );
    }
    const version = this.getVersion(modelName, modelVersion);
    const current = version.pool.target;
    // TorchServe: below min → add up to min; otherwise remove everything above max.
    const target = current < options.minWorkers ? options.minWorkers : Math.min(current, options.maxWorkers);
    if (target > current)
      this.#assertWithinThreadBudget(version, target, `PUT /models/${modelName}?min_worker=${options.minWorkers}`);
    version.minWorkers = options.minWorkers;
    version.maxWorkers = options.maxWorkers;
    version.plannedWorkers = target;
    const done = version.pool.setTarget(target);
    // max_worker=0: no worker will ever run what is queued; answer it now rather than never.
    if (options.maxWorkers === 0) version.failWaiting();
    const rebalanced = this.#rebalanceThreadsAfter(done);
    this.events.emit('changed');
    if (!options.synchronous) {
      void done.catch(() => undefined);
      return { workers: target };
    }
    // Synchronous: answer once the workers are up (also those an earlier call is still starting)
    // and every worker has its share of the cores.
    await rebalanced;
    await done;
    while (version.pool.workers.some((w) => w.state === 'LOADING')) await once(version.pool, 'changed');
    const ready = version.pool.readyCount;
    if (target > 0 && ready === 0) {
      const cause = version.pool.lastError;
      throw createServeError.MARINA_ERR_WORKER_START_FAILED(
        `Failed to start workers for model ${version.modelName} version: ${version.modelVersion}: ${cause?.message ?? 'unknown error'}`,
        { cause },
      );
    }
    return { workers: ready };
  }

  async setWorkerCount(modelName: string, modelVersion: string, count: number): Promise<void> {
    const version = this.getVersion(modelName, modelVersion);
    const target = Math.max(version.minWorkers, Math.min(version.maxWorkers, count));
    if (target > version.pool.target)
      this.#assertWithinThreadBudget(version, target, `autoscaling ${modelName} version ${modelVersion}`);
    version.plannedWorkers = target;
    await this.#rebalanceThreadsAfter(version.pool.setTarget(target));
    this.events.emit('changed');
  }

  setDefault(modelName: string, modelVersion: string): void {
    const model = this.#models.get(modelName);
    if (!model) throw this.#modelNotFound(modelName);
    if (!model.versions.has(modelVersion))
      throw createServeError.MARINA_ERR_MODEL_VERSION_NOT_FOUND(
        `Model version: ${modelVersion} does not exist for model: ${modelName} (available: ${[...model.versions.keys()].join(', ')})`,
      );
    model.defaultVersion = modelVersion;
    this.events.emit('changed');
  }

  describe(modelName: string, modelVersion?: string): ModelDescription[] {
    if (modelVersion === 'all') {
      const model = this.#models.get(modelName);
      if (!model) throw this.#modelNotFound(modelName);
      return [...model.versions.values()].map((v) => v.describe());
    }
    return [this.getVersion(modelName, modelVersion).describe()];
  }

  list(): ModelListEntry[] {
    return [...this.#models.entries()]
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
      .map(([modelName, model]) => ({
        modelName,
        modelUrl: model.versions.get(model.defaultVersion)?.url ?? '',
        defaultVersion: model.defaultVersion,
        versions: [...model.versions.keys()],
      }));
  }

  stats(): ModelVersionStats[] {
    return [...this.#versions()].map((v) => v.stats());
  }

  snapshot(): Record<string, Record<string, SnapshotModelVersion>> {
    const out: Record<string, Record<string, SnapshotModelVersion>> = {};
    for (const [name, model] of this.#models) {
      out[name] = {};
      for (const [id, v] of model.versions) out[name][id] = v.snapshot(id === model.defaultVersion);
    }
    return out;
  }

  /** TorchServe's /ping: healthy when every model's default version has at least minWorkers workers up. */
  isHealthy(): boolean {
    for (const model of this.#models.values()) {
      const v = model.versions.get(model.defaultVersion);
      if (v && v.pool.readyCount < Math.min(v.minWorkers, v.pool.target)) return false;
    }
    return true;
  }

  /**
   * Stops taking requests, lets queued and running jobs finish (a stuck batch fails at its
   * responseTimeout), then retires every worker without waiting for its thread to end.
   */
  async close(): Promise<void> {
    this.#isClosing = true;
    const versions = [...this.#versions()];
    this.#models.clear();
    await Promise.all(versions.map((v) => v.drain()));
    this.events.emit('changed');
  }
}

export { MarinaError };
