import { EventEmitter, once } from 'node:events';
import { rm } from 'node:fs/promises';
import { MODEL_NAME_MAX_LENGTH } from '@marina/archive';
import { didYouMean, isMarinaError, MarinaError } from '@marina/errors';
import type { ServerConfig } from '../config/server-config.ts';
import { boundText } from '../bounded-text.ts';
import { createServeError, toMarinaError } from '../errors.ts';
import type { ModelCaches } from '../cache/model-caches.ts';
import { DEFAULT_MAX_WORKER_HEAP_MB } from '../model-settings.ts';
import { Job, type JobInput, type JobResult } from '../scheduling/job.ts';
import { ThreadBudget } from '../workers/thread-budget.ts';
import type { BodyDecoding, HandlerStagesMs } from '../workers/worker-protocol.ts';
import type {
  ModelDescription,
  ModelListEntry,
  ModelRegistryApi,
  ModelVersionStats,
  RegisterModelOptions,
  VersionTraffic,
  RegisterResult,
  LoadReason,
  RegistryEvents,
  ScaleOptions,
  SnapshotModelVersion,
} from './model-registry-api.ts';
import { ArchiveOpener, type OpenedArchive } from './archive-opener.ts';
import { estimateModelBytes } from './memory-estimate.ts';
import { ModelResidency } from './model-residency.ts';
import { SpareThreads } from '../workers/spare-threads.ts';
import { bootstrapUrl } from '../workers/worker.ts';
import { ModelVersion } from '../scheduling/model-version.ts';
import { scheduleOf, type RequestScheduling } from '../scheduling/queue-policy.ts';
import type { RequestTrace } from '../tracing/tracing.ts';
import { createCpuPressureReader } from './cpu-pressure.ts';
import { DEFAULT_SHADOW_MAX_CPU_PRESSURE_PERCENT, ShadowTraffic } from './shadow-traffic.ts';
import type { ShadowStats } from './model-registry-api.ts';
import { checkTrafficPolicy, TrafficRoute, trafficErrors, type TrafficPolicy } from './traffic-policy.ts';

interface Model {
  versions: Map<string, ModelVersion>;
  defaultVersion: string;
  /** The traffic policy in force; undefined: every unversioned request goes to the default version. */
  traffic?: TrafficRoute;
  /** Set once the API (or a snapshot) gave a policy: the models JSON's `$traffic` no longer applies. */
  isTrafficSet?: boolean;
}

export interface PredictOptions {
  modelName: string;
  /** undefined = the version the model's traffic policy picks (the default version without one). */
  modelVersion?: string;
  /**
   * The version the client named, for the metrics' TorchServe label; default `modelVersion ?? 'default'`.
   * The data plane resolves an unversioned request once, then passes the version it picked with 'default' here.
   */
  requestedVersion?: string;
  requestId: string;
  input: JobInput;
  headers?: Record<string, string>;
  /** performance.now() when the request arrived (default: now). */
  arrivedAt?: number;
  /** How the worker decodes raw `input.body` bytes for the handler ('json', 'text'); undefined passes the input as it is. */
  bodyDecoding?: BodyDecoding;
  /** The request's priority, timeout and deadline as its protocol carried them (checked against the model here). */
  scheduling?: RequestScheduling;
  /**
   * Registers what to do when the client goes away (connection closed, call cancelled): a queued
   * job is dropped. May return a function that unregisters it, called once the job is answered.
   */
  // biome-ignore lint/suspicious/noConfusingVoidType: a watcher with nothing to unregister returns nothing (the adapters' callbacks do).
  onClientGone?: (cancel: () => void) => (() => void) | void;
  /** The request's trace (tracing/tracing.ts), carried by the job to its batch; undefined when tracing is off. */
  trace?: RequestTrace;
}

/**
 * PredictOptions with every field named (undefined where a request has none). The data plane builds
 * the options it hands to predict in this form, as one literal: every request's options object then
 * has one V8 map. A copy made by spreading the options and adding a field they lack
 * (`{ ...options, requestedVersion }`) gets a new map for each request in Node 20, so each added
 * field went through V8's runtime and every read of the copy after it missed its inline cache.
 * Naming every field also makes a field added to PredictOptions fail to compile here until the
 * copy passes it on.
 */
export type CompletePredictOptions = { [K in keyof Required<PredictOptions>]: PredictOptions[K] };

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
  /** The priority level the job waited at, when the model has more than one. */
  priority?: number;
  /** The request arrived while its model version was not resident and waited for its load (queueMs includes the load). */
  waitedForLoad?: boolean;
}

/** A prediction's answer, the version that served it and where its time went. */
export interface PredictResult extends JobResult {
  timings: PredictTimingsMs;
  /** The version that answered (the one named, or the one the traffic policy picked). */
  modelVersion: string;
}

export interface ModelRegistryOptions {
  config: ServerConfig;
  log?: (level: 'info' | 'warn' | 'error', message: string) => void;
  /** Told when a version opens or is removed, to bound and clean the extraction caches. */
  caches?: ModelCaches;
  /** The process's memory now, bytes, measured around each load (default: the resident set, process.memoryUsage.rss()). */
  readMemoryBytes?: () => number;
  /** The machine's CPU pressure for the shadow's gate (default: Linux PSI, read at most once a second). */
  cpuPressure?: () => number | undefined;
  /** Environment read for MARINA_ORT_CACHE_OPTIMIZED_MODEL (default process.env). */
  env?: Record<string, string | undefined>;
}

/**
 * Model name → versions, default version, and each version's queue and workers.
 * The core's implementation of ModelRegistryApi (see model-registry-api.ts for the contract).
 */
export class ModelRegistry implements ModelRegistryApi {
  readonly events = new EventEmitter<RegistryEvents>();
  /** Copies of live requests for shadow versions, and their agreement. */
  readonly shadow: ShadowTraffic;
  readonly #config: ServerConfig;
  readonly #log: (level: 'info' | 'warn' | 'error', message: string) => void;
  readonly #caches: ModelCaches | undefined;
  readonly #models = new Map<string, Model>();
  /** Versions being registered (archive opened, not yet in #models), to catch concurrent duplicates. */
  readonly #registering = new Set<string>();
  #isClosing = false;
  readonly #archives: ArchiveOpener;
  readonly #threads: ThreadBudget;
  readonly #residency: ModelResidency;
  /** A worker thread kept ready for the next load, under a memory budget (workers/spare-threads.ts). */
  readonly #spares: SpareThreads | undefined;

  constructor(options: ModelRegistryOptions) {
    this.#config = options.config;
    this.#log = options.log ?? (() => undefined);
    this.#caches = options.caches;
    this.#threads = new ThreadBudget({
      cpuCount: options.config.cpuCount,
      ompNumThreads: options.config.ompNumThreads,
      log: this.#log,
    });
    // Under a budget models come and go: a spare thread makes each load skip a thread's start.
    if (options.config.residency?.memoryBudgetBytes !== undefined)
      this.#spares = new SpareThreads({
        bootstrapUrl,
        maxHeapMb: DEFAULT_MAX_WORKER_HEAP_MB,
        hasRoomForLoad: () => this.#residency.hasRoomForLoad(),
      });
    this.#residency = new ModelResidency({
      memoryBudgetBytes: options.config.residency?.memoryBudgetBytes,
      versions: () => this.#versions(),
      startWorkers: (version, workers) => this.#startWorkers(version, workers),
      stopWorkers: (version, options) => this.#stopWorkers(version, options),
      onFirstBatch: () => {
        if (!this.#isClosing) this.#spares?.prepare();
      },
      events: this.events,
      log: this.#log,
      ...(options.readMemoryBytes ? { readMemoryBytes: options.readMemoryBytes } : {}),
    });
    this.#archives = new ArchiveOpener({ config: options.config, log: this.#log, env: options.env ?? process.env });
    this.shadow = new ShadowTraffic({
      onOutcome: (outcome) => this.events.emit('shadow', outcome),
      log: (level, message) => this.#log(level, message),
      cpuPressure: options.cpuPressure ?? createCpuPressureReader(),
      maxCpuPressurePercent: options.config.shadowMaxCpuPressurePercent ?? DEFAULT_SHADOW_MAX_CPU_PRESSURE_PERCENT,
    });
  }

  /** The versions' folders and the extractions of opens in progress: the caches must not remove them. */
  #modelDirsInUse(): string[] {
    return [...[...this.#versions()].map((v) => v.modelDir), ...this.#archives.dirsInUse];
  }

  #assertOpen(): void {
    if (this.#isClosing)
      throw createServeError.MARINA_ERR_SERVER_CLOSING('the server is shutting down and registers no models');
  }

  get isClosing(): boolean {
    return this.#isClosing;
  }

  /** The cores the thread budget divides (start-up loads run this many at once). */
  get cpuCount(): number {
    return this.#threads.cpuCount;
  }

  /** Opens an archive and registers its model version, then starts its workers. */
  async register(options: RegisterModelOptions): Promise<RegisterResult> {
    const version = await this.open(options);
    if (options.load === false)
      return { modelName: version.modelName, modelVersion: version.modelVersion, workersRequested: 0, workersReady: 0 };
    return this.start(version, { synchronous: options.synchronous ?? true, reason: options.loadReason ?? 'api' });
  }

  /**
   * First half of register: extracts the archive, combines settings and adds the version with
   * no workers yet. Used by startup loading so that every model's workers are counted before
   * any thread count is chosen.
   * @throws MARINA_ERR_MODEL_VERSION_CONFLICT, MARINA_ERR_MODEL_SETTINGS_INVALID, archive errors.
   */
  async open(options: RegisterModelOptions): Promise<ModelVersion> {
    this.#assertOpen();
    return this.#archives.open({
      request: options,
      hooks: {
        // close() may have run during any await: a version added after it would start workers nothing drains.
        assertOpen: () => this.#assertOpen(),
        reserve: (modelName, modelVersion) => this.#reserve(modelName, modelVersion),
      },
      use: (opened) => this.#addVersion(options, opened),
    });
  }

  /**
   * Claims a name and version while its archive is read, so two registrations of the same
   * version cannot both succeed.
   * @throws MARINA_ERR_MODEL_VERSION_CONFLICT
   */
  #reserve(modelName: string, modelVersion: string): () => void {
    const key = `${modelName}\u0000${modelVersion}`;
    if (this.#models.get(modelName)?.versions.has(modelVersion) || this.#registering.has(key)) {
      throw createServeError.MARINA_ERR_MODEL_VERSION_CONFLICT(
        `Model version ${modelVersion} is already registered for model ${modelName}; unregister it first (DELETE /models/${modelName}/${modelVersion})`,
      );
    }
    this.#registering.add(key);
    return () => this.#registering.delete(key);
  }

  /** Builds the version from its opened archive, checks it fits, and adds it (no workers yet). */
  async #addVersion(options: RegisterModelOptions, opened: OpenedArchive): Promise<ModelVersion> {
    const { modelName, modelVersion, settings } = opened;
    const version = new ModelVersion({
      modelName,
      modelVersion,
      url: options.url,
      archivePath: options.archivePath,
      modelDir: opened.modelDir,
      digest: opened.digest,
      manifest: opened.manifest,
      modelYamlConfig: opened.modelYamlConfig,
      signature: opened.signature,
      handler: opened.handler,
      runtime: options.runtime ?? opened.manifest.runtime ?? 'python',
      settings,
      loadedAtStartup: options.loadedAtStartup ?? false,
      isDownloaded: options.isDownloaded ?? false,
      ...(opened.quantization ? { quantization: opened.quantization } : {}),
      plannedWorkers: 0,
      createInit: (v) =>
        this.#archives.workerInit(v, { intraOpNumThreads: this.#threadsFor(v), isBackground: this.#isShadow(v) }),
      ...(this.#spares ? { spareThreads: this.#spares } : {}),
      startOnDemand: (v, requestId) => this.#startOnDemand(v, requestId),
      log: this.#log,
      unloadGraceMs: (this.#config.residency?.unloadGraceSeconds ?? 10) * 1000,
      isIdleBatchWaiting: this.#config.batchWaitWhenIdle === true,
    });
    version.estimatedBytes = opened.estimatedBytes;
    this.#residency.assertFits(version);
    this.#assertWithinThreadBudget(version, settings.minWorkers, `${modelName} version ${modelVersion}`);
    this.#forwardEvents(version);
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
    this.#applyConfiguredTraffic(modelName, model);
    this.events.emit('changed');
    await this.#caches?.opened(version.modelDir, this.#modelDirsInUse());
    return version;
  }

  /** A version's worker load and batch events, as the registry's events. */
  #forwardEvents(version: ModelVersion): void {
    const { modelName, modelVersion } = version;
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
  }

  /**
   * Second half of register: starts the version's workers. With `synchronous`, waits until they
   * are READY; if none of them could start, the version is removed again and the error thrown
   * (TorchServe: "Failed to start workers").
   */
  async start(version: ModelVersion, options: { synchronous: boolean; reason?: LoadReason }): Promise<RegisterResult> {
    if (this.#isClosing) {
      await this.#remove(version);
      this.#assertOpen();
    }
    const requested = version.settings.minWorkers;
    const result = (ready: number): RegisterResult => ({
      modelName: version.modelName,
      modelVersion: version.modelVersion,
      workersRequested: requested,
      workersReady: ready,
    });
    // TorchServe's initial_workers=0 (or min_worker=0): registered, no worker until a request or a scale call.
    if (requested === 0) return result(0);
    const loading = this.#residency.load(version, options.reason ?? 'api');
    if (!options.synchronous) {
      void loading.catch(() => undefined);
      return result(0);
    }
    try {
      await loading;
    } catch (error) {
      // No room within the budget in time: it stays registered and loads on its first request.
      if (isMarinaError(error) && error.code === 'MARINA_ERR_MEMORY_BUDGET_FULL' && !this.#isClosing) {
        this.#log('warn', `${version.label} is registered but not loaded: ${error.message}`);
        return result(0);
      }
      if (!this.#isClosing) {
        await this.#remove(version);
        throw error;
      }
    }
    if (this.#isClosing) {
      await this.#remove(version);
      this.#assertOpen();
    }
    this.events.emit('changed');
    return result(version.pool.readyCount);
  }

  /**
   * Makes a registered version resident (workers started, sessions created), within
   * model_memory_budget: idle versions that are not pinned are unloaded first (least asked-for and
   * least recently used first). Concurrent calls share one load. Resolves with its description.
   * @throws MARINA_ERR_MODEL_NOT_FOUND, MARINA_ERR_MODEL_VERSION_NOT_FOUND (404),
   *   MARINA_ERR_MEMORY_BUDGET_FULL (503: nothing could be evicted within its startupTimeout),
   *   MARINA_ERR_MODEL_LARGER_THAN_BUDGET (400), MARINA_ERR_WORKER_START_FAILED (500).
   */
  async load(
    modelName: string,
    modelVersion?: string,
    options: { reason?: LoadReason } = {},
  ): Promise<ModelDescription> {
    this.#assertOpen();
    const version = this.getVersion(modelName, modelVersion);
    await this.#residency.load(version, options.reason ?? 'api');
    this.events.emit('changed');
    return version.describe();
  }

  /**
   * Unloads a version back to `registered` (archive, settings and queue kept; no worker, no
   * session). Requests waiting in its queue are answered 503 MARINA_ERR_MODEL_UNLOADING; a running
   * batch gets unload_grace_seconds, then its requests are answered the same and its thread is
   * abandoned. An explicit unload also unloads a pinned version (the pin stays for its next load).
   */
  async unload(modelName: string, modelVersion?: string): Promise<void> {
    const version = this.getVersion(modelName, modelVersion);
    await this.#residency.unload(version, 'api');
    this.events.emit('changed');
  }

  /**
   * Pins or unpins a version: a pinned version is never evicted nor idle-unloaded. Pinning one
   * that is not resident loads it (reason 'api'); resolves once it is.
   */
  async setPinned(modelName: string, modelVersion: string | undefined, pinned: boolean): Promise<void> {
    const version = this.getVersion(modelName, modelVersion);
    version.pinned = pinned;
    this.#residency.refreshIdle(version);
    this.events.emit('changed');
    if (pinned && version.state !== 'resident') await this.#residency.load(version, 'api');
  }

  /** model_memory_budget in bytes; undefined when none is set (ModelMesh's capacityInBytes). */
  get memoryBudgetBytes(): number | undefined {
    return this.#residency.memoryBudgetBytes;
  }

  /** Process memory the resident versions' loads added, bytes (measured; estimates until measured). */
  residentBytes(): number {
    return this.#residency.residentBytes();
  }

  /** Versions resident now. */
  residentCount(): number {
    let n = 0;
    for (const v of this.#versions()) if (v.state === 'resident') n++;
    return n;
  }

  /** Whether a registered version would fit beside the resident ones now without evicting (start-up loading). */
  fitsWithoutEviction(modelName: string, modelVersion?: string): boolean {
    return this.#residency.fitsNow(this.getVersion(modelName, modelVersion));
  }

  /**
   * What loading an archive's model is expected to add to memory, before it is loaded
   * (ModelMesh's predictModelSize); see estimateModelBytes.
   */
  estimateModelBytes(options: { modelDir: string; workers?: number }): Promise<number> {
    return estimateModelBytes(options);
  }

  /** Starts a load's workers (every model's thread split is kept), resolving with how many are READY. */
  async #startWorkers(version: ModelVersion, workers: number): Promise<number> {
    this.#reviewThreads();
    const starting = version.pool.setTarget(workers);
    await this.#rebalanceThreadsAfter(starting);
    await starting;
    while (version.pool.workers.some((w) => w.state === 'LOADING')) await once(version.pool, 'changed');
    // The next spare thread starts once this load's first batch has run (onFirstBatch): its imports
    // take 150–200 ms of CPU, which, started now, competed with that batch on a small machine
    // (a cold ResNet-50 request's first run 65–150 ms against 40–60 warm, measured). A load with
    // nothing waiting starts it at once; a load that finds none starts one itself (take()).
    if (!this.#isClosing && version.pendingJobs === 0) this.#spares?.prepare();
    return version.pool.readyCount;
  }

  /**
   * Stops a version's workers; resolves once their threads ended (or became spares: `isRecycled`),
   * or a little after the grace period for one abandoned in native code.
   */
  async #stopWorkers(version: ModelVersion, options: { isRecycled?: boolean } = {}): Promise<void> {
    void version.pool.setTarget(0, options);
    let timer: ReturnType<typeof setTimeout> | undefined;
    await Promise.race([
      version.pool.exited(),
      new Promise<void>((resolve) => {
        timer = setTimeout(resolve, version.unloadGraceMs + 1000);
        timer.unref?.();
      }),
    ]);
    clearTimeout(timer);
  }

  /** The thread budget's split for one more worker of the version. */
  #threadsFor(version: ModelVersion): number {
    return this.#threads.threadsFor({
      configured: version.settings.intraOpNumThreads,
      totalWorkers: this.plannedWorkerCount(),
    });
  }

  /** Whether the version is its model's shadow now: its workers then run at background CPU priority. */
  #isShadow(version: ModelVersion): boolean {
    return this.#models.get(version.modelName)?.traffic?.policy.shadow?.version === version.modelVersion;
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
    // Registered versions that are not loaded count too: the split then stays the same as models
    // are loaded and evicted, and no running worker is replaced (its session reloaded) for it.
    for (const v of this.#versions()) n += Math.max(v.plannedWorkers, v.maxWorkers);
    return n;
  }

  /** Tells the thread budget what every model plans, so it can say once that the machine is oversubscribed. */
  #reviewThreads(): void {
    this.#threads.review(
      [...this.#versions()].map((v) => ({
        workers: Math.max(v.plannedWorkers, v.pool.workers.length),
        configuredThreads: v.settings.intraOpNumThreads,
      })),
    );
  }

  /** TorchServe's `Model not found: x`, followed by the registered names and the closest one. */
  #modelNotFound(modelName: string): MarinaError {
    const names = [...this.#models.keys()].sort();
    const known =
      names.length === 0
        ? 'no models are registered (register one with POST /models on the management API, or load_models at start-up)'
        : `registered models: ${names.slice(0, 20).join(', ')}${names.length > 20 ? `, and ${names.length - 20} more` : ''}${
            // No name longer than the rule allows is close to a registered one (and comparing megabytes would cost).
            modelName.length <= 2 * MODEL_NAME_MAX_LENGTH ? didYouMean(modelName, names) : ''
          }`;
    // The name is the client's: quoted bounded, here and in details.
    const shown = boundText(modelName);
    return createServeError.MARINA_ERR_MODEL_NOT_FOUND(`Model not found: ${shown} (${known})`, {
      details: { modelName: shown, registered: names.slice(0, 100) },
    });
  }

  /**
   * Refuses only absurd worker counts for one version (see ThreadBudget.assertReasonable); many
   * models beside each other may oversubscribe the cores, with one warning.
   * @throws MARINA_ERR_THREAD_BUDGET_EXCEEDED (400)
   */
  #assertWithinThreadBudget(version: ModelVersion, workers: number, what: string): void {
    this.#threads.assertReasonable({ what, workers, configuredThreads: version.settings.intraOpNumThreads });
  }

  /** A request reached a version at 0 workers that may autoscale (min 0, max > 0): start one (a model's first worker always fits the budget). */
  #startOnDemand(version: ModelVersion, requestId: string): void {
    if (version.state === 'registered')
      this.#log(
        'info',
        `${version.label}: request ${requestId} arrived at 0 workers; starting one (min_worker=${version.minWorkers}, max_worker=${version.maxWorkers})`,
      );
    // Failures are answered to the waiting requests by the residency (and logged there).
    void this.#residency.load(version, 'demand').then(
      () => this.events.emit('changed'),
      () => undefined,
    );
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
        `Model version: ${boundText(String(modelVersion))} does not exist for model: ${modelName} (available: ${[...model.versions.keys()].join(', ')})`,
      );
    }
    return version;
  }

  /**
   * The one place a request's version is chosen: the version it names, else the one the model's
   * traffic policy picks (by weight, or by the sticky header's value), else the default version.
   * @throws MARINA_ERR_MODEL_NOT_FOUND, MARINA_ERR_MODEL_VERSION_NOT_FOUND (404).
   */
  resolveVersion(modelName: string, modelVersion?: string, headers?: Record<string, string>): ModelVersion {
    if (modelVersion !== undefined) return this.getVersion(modelName, modelVersion);
    const model = this.#models.get(modelName);
    if (!model) throw this.#modelNotFound(modelName);
    return this.getVersion(modelName, model.traffic?.pick(headers));
  }

  /** The models JSON's `$traffic` for a model, once every version it names is registered and no API call replaced it. */
  #applyConfiguredTraffic(modelName: string, model: Model): void {
    const configured = this.#config.trafficPolicies?.[modelName];
    if (!configured || model.isTrafficSet || model.traffic) return;
    try {
      checkTrafficPolicy(modelName, configured, [...model.versions.keys()]);
    } catch {
      return; // Not every version it names is registered yet.
    }
    this.#setTraffic(model, configured);
    this.#log(
      'info',
      `model '${modelName}': traffic policy from the models JSON in force: ${JSON.stringify(configured)}`,
    );
  }

  /**
   * Puts a checked policy in force; the version with the largest weight becomes the default. A
   * version that becomes, or stops being, the shadow gets workers of the matching CPU priority in
   * the background (each replacement starts before the old worker leaves, see
   * WorkerPool.rebalanceThreads; describe's `cpuPriority` shows when they serve).
   */
  #setTraffic(model: Model, policy: TrafficPolicy): void {
    const wasShadow = model.traffic?.policy.shadow?.version;
    const route = new TrafficRoute(policy);
    model.traffic = route.hasWeights || policy.shadow ? route : undefined;
    const weights = policy.weights ?? {};
    let heaviest = model.defaultVersion;
    for (const [version, weight] of Object.entries(weights)) if (weight > (weights[heaviest] ?? -1)) heaviest = version;
    if (model.versions.has(heaviest)) model.defaultVersion = heaviest;
    const isShadow = policy.shadow?.version;
    if (wasShadow === isShadow) return;
    for (const name of [wasShadow, isShadow]) {
      const version = name === undefined ? undefined : model.versions.get(name);
      version?.pool
        .rebalanceThreads()
        .catch((error: unknown) =>
          this.#log(
            'warn',
            `${version.modelName} ${version.modelVersion}: replacing workers for the shadow's CPU priority failed: ${(error as Error).message}`,
          ),
        );
    }
  }

  setTrafficPolicy(modelName: string, policy: TrafficPolicy): TrafficPolicy {
    const model = this.#models.get(modelName);
    if (!model) throw this.#modelNotFound(modelName);
    checkTrafficPolicy(modelName, policy, [...model.versions.keys()]);
    this.#setTraffic(model, policy);
    model.isTrafficSet = true;
    this.events.emit('changed');
    return this.getTrafficPolicy(modelName);
  }

  getTrafficPolicy(modelName: string): TrafficPolicy {
    const model = this.#models.get(modelName);
    if (!model) throw this.#modelNotFound(modelName);
    const policy = model.traffic?.policy ?? {};
    return {
      ...policy,
      weights: model.traffic?.hasWeights ? { ...policy.weights } : { [model.defaultVersion]: 100 },
    };
  }

  trafficPolicies(): Record<string, TrafficPolicy> {
    const out: Record<string, TrafficPolicy> = {};
    // A policy removed through the API is kept as {}, so a restart does not bring back the models JSON's.
    for (const [name, model] of this.#models)
      if (model.traffic || model.isTrafficSet) out[name] = model.traffic?.policy ?? {};
    return out;
  }

  shadowStats(): ShadowStats[] {
    return [...this.#versions()].map(
      (v) =>
        this.shadow.stats(v.modelName, v.modelVersion) ?? {
          modelName: v.modelName,
          modelVersion: v.modelVersion,
          requests: 0,
          failed: 0,
          dropped: 0,
          compared: 0,
          agreementSum: 0,
          maxAbsDiff: 0,
          method: undefined,
        },
    );
  }

  /** Hands a copy of an answered request to the model's shadow version, when the policy asks for one. */
  #offerShadow(version: ModelVersion, options: PredictOptions, result: JobResult): void {
    const route = this.#models.get(version.modelName)?.traffic;
    const shadowName = route?.policy.shadow?.version;
    if (shadowName === undefined || shadowName === version.modelVersion || !route!.isShadowed()) return;
    const shadow = this.#models.get(version.modelName)?.versions.get(shadowName);
    if (!shadow) return;
    // After the live answer is on its way: the adapter sends it in this same turn.
    setImmediate(() =>
      this.shadow.offer({
        live: version,
        shadow,
        requestId: options.requestId,
        input: options.input,
        headers: options.headers,
        bodyDecoding: options.bodyDecoding,
        liveResult: result,
      }),
    );
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
    const version = this.resolveVersion(options.modelName, options.modelVersion, options.headers);
    const job = new Job({
      requestId: options.requestId,
      input: options.input,
      headers: options.headers,
      arrivedAt,
      bodyDecoding: options.bodyDecoding,
      schedule: scheduleOf(version.settings.queue, options.scheduling, arrivedAt, version.label),
      trace: options.trace,
    });
    options.trace?.setModel(version.modelName, version.modelVersion, options.requestId);
    let errorCode: string | undefined;
    let statusCode = 500;
    let stopWatching: (() => void) | undefined;
    try {
      version.submit(job);
      stopWatching = options.onClientGone?.(() => version.cancel(job)) ?? undefined;
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
      if (version.queue.levelCount > 1) timings.priority = job.priority;
      if (t.waitedForLoad) timings.waitedForLoad = true;
      if (statusCode < 400) this.#offerShadow(version, options, result);
      // Not a spread: a TextJobResult's body is a getter, which a spread would drop.
      return Object.assign(result, { timings, modelVersion: version.modelVersion });
    } catch (error) {
      const e = toMarinaError(error);
      statusCode = e.statusCode;
      errorCode = e.code;
      throw e;
    } finally {
      stopWatching?.();
      options.trace?.recordJob(job, { isOk: errorCode === undefined, errorCode });
      const t = job.timings;
      const end = t.finishedAt ?? performance.now();
      // Listened to by the metrics, when they are on: no event object per request otherwise.
      if (this.events.listenerCount('request') > 0)
        this.events.emit('request', {
          modelName: version.modelName,
          requestedVersion: options.requestedVersion ?? options.modelVersion ?? 'default',
          modelVersion: version.modelVersion,
          statusCode,
          queueMs: (t.dispatchedAt ?? end) - t.arrivedAt,
          inferenceMs: t.dispatchedAt === undefined ? 0 : end - t.dispatchedAt,
          totalMs: end - t.arrivedAt,
          ...(version.queue.levelCount > 1 ? { priority: job.priority } : {}),
          ...(t.waitedForLoad ? { waitedForLoad: true } : {}),
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
        `Model version: ${boundText(versionId)} does not exist for model: ${modelName} (available: ${[...model.versions.keys()].join(', ')})`,
      );
    if (versionId === model.defaultVersion && model.versions.size > 1) {
      throw createServeError.MARINA_ERR_DEFAULT_VERSION_REMOVAL(
        `Cannot remove default version for model ${modelName}; set another default first (PUT /models/${modelName}/{version}/set-default)`,
      );
    }
    // The last version takes its model, and the policy, with it.
    if (model.versions.size > 1 && model.traffic?.isInUse(versionId)) {
      const isShadow = model.traffic.policy.shadow?.version === versionId;
      throw trafficErrors.create.MARINA_ERR_VERSION_IN_TRAFFIC_POLICY(
        `Cannot remove version ${versionId} of model ${modelName}: its traffic policy ${isShadow ? 'shadows it' : `sends it ${model.traffic.policy.weights?.[versionId]}% of unversioned requests`}; change the policy first (PUT /models/${modelName}/traffic), then unregister it`,
        { details: { modelName, modelVersion: versionId, policy: model.traffic.policy } },
      );
    }
    if (model.traffic) model.traffic = model.traffic.without(versionId);
    this.shadow.forget(modelName, versionId);
    await this.#remove(version);
    if (version.isDownloaded) {
      await rm(version.archivePath, { recursive: true, force: true });
      // Its extracted copy too, unless another registered version was opened from the same bytes.
      if (![...this.#versions()].some((v) => v.modelDir === version.modelDir))
        await rm(version.modelDir, { recursive: true, force: true });
    }
  }

  async #remove(version: ModelVersion): Promise<void> {
    this.#residency.forget(version);
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
    // Workers for a version with none go through a load, so model_memory_budget makes room for it first.
    if (target > 0 && current === 0 && this.#residency.memoryBudgetBytes !== undefined) {
      const loading = this.#residency.load(version, 'api');
      this.events.emit('changed');
      if (!options.synchronous) {
        void loading.catch(() => undefined);
        return { workers: target };
      }
      await loading;
      return { workers: version.pool.readyCount };
    }
    version.plannedWorkers = target;
    this.#reviewThreads();
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
    this.#reviewThreads();
    await this.#rebalanceThreadsAfter(version.pool.setTarget(target));
    this.events.emit('changed');
  }

  setDefault(modelName: string, modelVersion: string): void {
    const model = this.#models.get(modelName);
    if (!model) throw this.#modelNotFound(modelName);
    if (!model.versions.has(modelVersion))
      throw createServeError.MARINA_ERR_MODEL_VERSION_NOT_FOUND(
        `Model version: ${boundText(modelVersion)} does not exist for model: ${modelName} (available: ${[...model.versions.keys()].join(', ')})`,
      );
    model.defaultVersion = modelVersion;
    // TorchServe's meaning: every unversioned request to this version. A shadow (of another version) stays.
    if (model.traffic) {
      const { shadow, stickyHeader } = model.traffic.policy;
      this.#setTraffic(model, {
        weights: { [modelVersion]: 100 },
        ...(shadow && shadow.version !== modelVersion ? { shadow } : {}),
        ...(stickyHeader ? { stickyHeader } : {}),
      });
      model.isTrafficSet = true;
    }
    this.events.emit('changed');
  }

  describe(modelName: string, modelVersion?: string): ModelDescription[] {
    if (modelVersion === 'all') {
      const model = this.#models.get(modelName);
      if (!model) throw this.#modelNotFound(modelName);
      return [...model.versions.values()].map((v) => this.#describeVersion(model, v));
    }
    const version = this.getVersion(modelName, modelVersion);
    return [this.#describeVersion(this.#models.get(modelName)!, version)];
  }

  #describeVersion(model: Model, version: ModelVersion): ModelDescription {
    const description = version.describe();
    const route = model.traffic;
    if (!route) return description;
    const policy = route.policy;
    const weight = route.hasWeights
      ? (policy.weights?.[version.modelVersion] ?? 0)
      : version.modelVersion === model.defaultVersion
        ? 100
        : 0;
    const traffic: VersionTraffic = { weight, policy };
    if (policy.shadow?.version === version.modelVersion) {
      const s = this.shadow.stats(version.modelName, version.modelVersion);
      traffic.shadow = {
        percent: policy.shadow.percent,
        requests: s?.requests ?? 0,
        failed: s?.failed ?? 0,
        dropped: s?.dropped ?? 0,
        compared: s?.compared ?? 0,
        ...(s && s.compared > 0 ? { agreement: s.agreementSum / s.compared, maxAbsDiff: s.maxAbsDiff } : {}),
        ...(s?.method ? { method: s.method } : {}),
      };
    }
    return { ...description, traffic };
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
    this.#residency.close();
    this.shadow.close();
    void this.#spares?.close();
    const versions = [...this.#versions()];
    this.#models.clear();
    await Promise.all(versions.map((v) => v.drain()));
    this.events.emit('changed');
  }
}

export { MarinaError };
