/**
 * The contract between the serving core (registry, workers, scheduling) and the
 * operator-facing parts (management routes, metrics, snapshots, autoscaler).
 * The core implements it in model-registry.ts; the others depend only on this file.
 */
import type { EventEmitter } from 'node:events';
import type { QuantizationSummary } from '@marina/archive';
import type { AgreementMethod } from './output-agreement.ts';
import type { TrafficPolicy } from './traffic-policy.ts';
import type { HandlerStagesMs } from '../workers/worker-protocol.ts';

export interface RegisterModelOptions {
  /** What the user asked for (file name in the store, folder, or URL); reported as modelUrl. */
  url: string;
  /** Absolute path of the archive file or folder on disk (downloads are done before register). */
  archivePath: string;
  modelName?: string;
  handler?: string;
  runtime?: string;
  batchSize?: number;
  maxBatchDelayMs?: number;
  /** Workers to start now (initial_workers); minWorkers otherwise. */
  initialWorkers?: number;
  /** Workers when nothing (API, model-config.yaml, models JSON) says; default default_workers_per_model, else 1. The register API passes 0. */
  fallbackWorkers?: number;
  minWorkers?: number;
  maxWorkers?: number;
  responseTimeoutSec?: number;
  startupTimeoutSec?: number;
  /** Make this version the default (first version of a model always is). */
  isDefault?: boolean;
  loadedAtStartup?: boolean;
  /** Resolve only once the workers are READY (else once the archive is opened). */
  synchronous?: boolean;
  /** True when the archive was downloaded into the store by register (deleted again on unregister). */
  isDownloaded?: boolean;
  /**
   * false: register only (state `registered`, no worker, no session); the first request, or
   * `load`, loads it. Default true: load now (within model_memory_budget, evicting idle models).
   */
  load?: boolean;
  /** Keep resident: never evicted nor idle-unloaded (overrides model-config.yaml and the models JSON). */
  pinned?: boolean;
  /** Idle unload after this many seconds without a request; 0 = never (overrides model-config.yaml and the models JSON). */
  idleUnloadSeconds?: number;
  /** Why a load happens, for marina_model_loads_total (default 'api'; start-up loading passes 'startup'). */
  loadReason?: LoadReason;
}

/** Why a model version was loaded: marina_model_loads_total's `reason` label. */
export type LoadReason = 'startup' | 'demand' | 'api';

/** A version changed state (registered, loading, resident, unloading). */
export interface ResidencyEvent {
  modelName: string;
  modelVersion: string;
  state: 'registered' | 'loading' | 'resident' | 'unloading';
  /** Why it loads ('loading', 'resident') or leaves ('unloading', 'registered'): a LoadReason, or 'evicted', 'idle', 'api', 'failed'. */
  reason: string;
  /** Measured process memory the load added, bytes ('resident'). */
  residentBytes?: number;
  /** From the start of the load to resident, ms ('resident'). */
  loadMs?: number;
  /** Requests that were waiting in the queue for this load when it finished ('resident', demand loads). */
  waitingRequests?: number;
}

export interface RegisterResult {
  modelName: string;
  modelVersion: string;
  workersRequested: number;
  workersReady: number;
}

export interface ScaleOptions {
  minWorkers: number;
  maxWorkers: number;
  synchronous: boolean;
}

export interface WorkerDescription {
  /** TorchServe reports the worker's port; Marina numbers workers from 9000 the same way. */
  id: string;
  /** yyyy-MM-dd'T'HH:mm:ss.SSS'Z' (UTC). */
  startTime: string;
  status: 'READY' | 'BUSY' | 'LOADING' | 'UNLOADING' | 'FAILED';
  /** Bytes; for worker threads the process RSS divided by live workers is not meaningful, so this is the worker's own heap + external. */
  memoryUsage: number;
  pid: number;
  gpu: false;
  gpuUsage: 'N/A';
  /** Marina extension: intra-op threads of this worker's session. */
  intraOpNumThreads: number;
  /** Marina extension: 'background' for a shadow version's worker (it runs at the lowest CPU priority, SCHED_IDLE or nice 19), else 'normal'. */
  cpuPriority: 'normal' | 'background';
  /** Marina extension: ms the worker spent warming up before it became READY (model-config.yaml `warmup:`); absent without warm-up. */
  warmupMs?: number;
}

export interface ModelDescription {
  modelName: string;
  modelVersion: string;
  modelUrl: string;
  runtime: string;
  minWorkers: number;
  maxWorkers: number;
  batchSize: number;
  maxBatchDelay: number;
  responseTimeout: number;
  startupTimeout: number;
  maxRetryTimeoutInSec: number;
  clientTimeoutInMills: number;
  parallelType: string;
  parallelLevel: number;
  deviceType: 'cpu';
  continuousBatching: boolean;
  useJobTicket: boolean;
  useVenv: boolean;
  stateful: boolean;
  sequenceMaxIdleMSec: number;
  sequenceTimeoutMSec: number;
  maxNumSequence: number;
  maxSequenceJobQueueSize: number;
  loadedAtStartup: boolean;
  workers: WorkerDescription[];
  jobQueueStatus: {
    remainingCapacity: number;
    pendingRequests: number;
    /** Marina: for a model with priority levels, each level's policy, queued requests and mean queue time. */
    priorityLevels?: PriorityLevelStatus[];
  };
  /** Marina extension: the autoscaling policy in force (see docs/guides/management.md). */
  autoscaling?: Record<string, unknown>;
  /** Marina extension: where the version is in its life (registered, loading, resident, unloading). */
  state?: 'registered' | 'loading' | 'resident' | 'unloading';
  /** Marina extension: process memory its load added, bytes (measured before and after; the estimate while loading); 0 when not resident. */
  residentBytes?: number;
  /** Marina extension: when a request last arrived (ISO 8601), null if never. */
  lastUsed?: string | null;
  /** Marina extension: kept resident (never evicted nor idle-unloaded). */
  pinned?: boolean;
  /** Marina extension: idle unload after this many seconds without a request; 0 = never. */
  idleUnloadSeconds?: number;
  /** Marina extension: 'int8' for archives written by model-archiver --quantize, else 'fp32'. */
  precision?: string;
  /** Marina extension: the archive's quantization.json summary (method, agreement, kept-fp32 nodes). */
  quantization?: QuantizationSummary;
  /** Marina extension: the model's traffic policy and this version's part in it; absent without a policy. */
  traffic?: VersionTraffic;
}

/** A version's part in its model's traffic policy (describe's `traffic`). */
export interface VersionTraffic {
  /** This version's share of requests that name no version, percent. */
  weight: number;
  /** The whole policy in force. */
  policy: TrafficPolicy;
  /** On the shadow version: what its copies did, and how far its answers agreed with the live ones. */
  shadow?: {
    percent: number;
    /** Copies answered or failed. */
    requests: number;
    failed: number;
    /** Copies shed before they ran (no headroom, queue full). */
    dropped: number;
    /** Copies compared with the live answer. */
    compared: number;
    /** Mean agreement 0–1 over the compared copies (top-1, IoU or cosine); absent before the first. */
    agreement?: number;
    /** Largest absolute difference between tensor answers. */
    maxAbsDiff?: number;
    /** 'top1', 'iou' or 'cosine'; absent where the answers cannot be compared. */
    method?: string;
  };
}

export interface ModelListEntry {
  modelName: string;
  modelUrl: string;
  defaultVersion: string;
  versions: string[];
}

/** Live numbers per model version, for metrics and the autoscaler. */
export interface ModelVersionStats {
  modelName: string;
  modelVersion: string;
  /** For a model with priority levels: requests queued at each level now, level 1 first. */
  queueDepthByPriority?: number[];
  /** Requests admitted that have not started running (queued, or in a worker's prefetched batch): describe's pendingRequests. */
  queueDepth: number;
  /** Requests whose batch is running in a worker now. */
  runningJobs: number;
  jobQueueSize: number;
  workers: number;
  busyWorkers: number;
  minWorkers: number;
  maxWorkers: number;
  intraOpNumThreads: number;
  /** Where the version is in its life (registered, loading, resident, unloading). */
  state?: 'registered' | 'loading' | 'resident' | 'unloading';
  /** Process memory its load added, bytes (measured), when resident or leaving; 0 otherwise. */
  residentBytes?: number;
  /**
   * Intra-op threads this version's workers hold now, counting workers that are leaving but whose
   * thread has not ended (a timed-out native run() keeps its cores until it returns). Absent:
   * workers × intraOpNumThreads.
   */
  threadsInUse?: number;
}

/** What a snapshot stores per model version (TorchServe's models JSON keys). */
export interface SnapshotModelVersion {
  defaultVersion: boolean;
  marName: string;
  /** Where the archive lives (store file name or absolute path). */
  url: string;
  minWorkers: number;
  maxWorkers: number;
  batchSize: number;
  maxBatchDelay: number;
  responseTimeout: number;
  /** Seconds; TorchServe's startupTimeout (optional when reading older snapshots). */
  startupTimeout?: number;
  /** TorchServe's runtimeType (the manifest's runtime); optional when reading older snapshots. */
  runtimeType?: string;
  /** Marina: kept resident. */
  pinned?: boolean;
  /** Marina: idle unload, seconds. */
  idleUnloadSeconds?: number;
  /** Marina: when a request last arrived (ISO 8601): a restart under a budget loads the most recently used first. */
  lastUsed?: string;
}

/** Events the core emits; metrics and snapshots subscribe. */
/** One priority level in describe's jobQueueStatus. */
export interface PriorityLevelStatus {
  level: number;
  /** The level of requests that name none. */
  isDefault: boolean;
  /** Requests queued at the level now. */
  pendingRequests: number;
  /** Requests of the level that started running since the version opened, and their mean time in the queue, ms. */
  startedRequests: number;
  meanQueueMs: number;
  maxQueueSize: number;
  timeoutMs: number;
  timeoutAction: 'reject' | 'delay';
  allowTimeoutOverride: boolean;
}

export interface RequestDoneEvent {
  modelName: string;
  /** The version asked for in the URL, or 'default' (TorchServe's label). */
  requestedVersion: string;
  modelVersion: string;
  statusCode: number;
  /** Time from arrival until its batch started running in a worker (or until it was answered, if it never started), ms. */
  queueMs: number;
  /** Time in the worker (handler + model), ms; 0 when the job never reached a worker. */
  inferenceMs: number;
  /** From request arrival to response, ms. */
  totalMs: number;
  /** The priority level it waited at, for a model with more than one. */
  priority?: number;
  /** Marina: it arrived while the version was not resident and waited for its load. */
  waitedForLoad?: boolean;
}

export interface BatchDoneEvent {
  modelName: string;
  modelVersion: string;
  batchSize: number;
  inferenceMs: number;
  /** Marina: why the batch was sent: 'full' (batchSize reached), 'idle' (nothing else queued and no other worker busy), 'delay' (maxBatchDelay ran out), 'flush' (closing). */
  dispatchReason?: 'full' | 'idle' | 'delay' | 'flush';
  /** Marina: false when the batch failed as a whole (handler error, response timeout, crash). */
  isOk?: boolean;
  /**
   * Marina: where the time went inside the worker, for handlers with separate stages
   * (preprocess → inference → postprocess; the built-in handlers have them, a single handle() has not).
   */
  stages?: HandlerStagesMs;
}

/** A worker finished loading its model (TorchServe's WorkerLoadTime). */
export interface WorkerLoadedEvent {
  modelName: string;
  modelVersion: string;
  workerId: string;
  /** From spawning the worker thread to READY, ms. */
  loadMs: number;
}

export interface RegistryEvents {
  request: [RequestDoneEvent];
  /** A shadow copy was answered, failed or dropped. */
  shadow: [ShadowOutcome];
  workerLoaded: [WorkerLoadedEvent];
  batch: [BatchDoneEvent];
  /** Registration, unregistration, default version or worker settings changed. */
  changed: [];
  /** A version's life state changed (see ResidencyEvent). */
  residency: [ResidencyEvent];
}

export interface ModelRegistryApi {
  readonly events: EventEmitter<RegistryEvents>;
  register(options: RegisterModelOptions): Promise<RegisterResult>;
  /** Waits for in-flight jobs of the version(s) to finish. */
  unregister(modelName: string, modelVersion?: string): Promise<void>;
  scale(modelName: string, modelVersion: string | undefined, options: ScaleOptions): Promise<{ workers: number }>;
  setDefault(modelName: string, modelVersion: string): void;
  /** version undefined = default version; 'all' = every version. */
  describe(modelName: string, modelVersion?: string): ModelDescription[];
  /** Sorted by model name. */
  list(): ModelListEntry[];
  stats(): ModelVersionStats[];
  /** name -> version -> settings, for the snapshot. */
  snapshot(): Record<string, Record<string, SnapshotModelVersion>>;
  /** Adds or removes workers of one version within [min,max] (used by the autoscaler). */
  setWorkerCount(modelName: string, modelVersion: string, count: number): Promise<void>;
  /**
   * Replaces the model's traffic policy (`{}` removes it: every unversioned request to the default
   * version); the version with the largest weight becomes the default. Requests in flight keep their version.
   * @throws MARINA_ERR_MODEL_NOT_FOUND, MARINA_ERR_TRAFFIC_POLICY_INVALID
   */
  setTrafficPolicy(modelName: string, policy: TrafficPolicy): TrafficPolicy;
  /** The policy in force; without one, 100 % to the default version. @throws MARINA_ERR_MODEL_NOT_FOUND */
  getTrafficPolicy(modelName: string): TrafficPolicy;
  /** Model name → policy, for models that have one or whose policy was removed through the API (`{}`), for snapshots. */
  trafficPolicies(): Record<string, TrafficPolicy>;
  /** Shadow numbers of every registered version, for the metrics (zeros where a version never shadowed). */
  shadowStats(): ShadowStats[];
  /** Makes a version resident (within model_memory_budget, evicting idle LRU versions); see ModelRegistry.load. */
  load(modelName: string, modelVersion?: string, options?: { reason?: LoadReason }): Promise<ModelDescription>;
  /** Back to registered: no worker, no session; see ModelRegistry.unload. */
  unload(modelName: string, modelVersion?: string): Promise<void>;
  /** Pinned versions are never evicted nor idle-unloaded; pinning a registered one loads it. */
  setPinned(modelName: string, modelVersion: string | undefined, pinned: boolean): Promise<void>;
}

/** One shadow version's numbers since it became a shadow (or since it was registered). */
export interface ShadowStats {
  modelName: string;
  modelVersion: string;
  /** Copies the shadow version answered or failed. */
  requests: number;
  /** Copies the shadow version failed (its error is not anyone's answer). */
  failed: number;
  /** Copies shed before they ran: queue full, waited too long, or refused by the version. */
  dropped: number;
  /** Copies whose answer was compared with the live one. */
  compared: number;
  /** Sum of the comparisons' agreement (0–1 each); the mean is agreementSum / compared. */
  agreementSum: number;
  /** Largest absolute difference seen between tensor answers. */
  maxAbsDiff: number;
  method: AgreementMethod | undefined;
}

/** Events: `outcome` once per copy (for the metrics' counters); `settled` when a copy leaves (tests wait on it). */
export interface ShadowOutcome {
  modelName: string;
  modelVersion: string;
  outcome: 'answered' | 'failed' | 'dropped';
  agreement?: number;
}
