/**
 * The server's configuration after config.properties, CLI flags and environment have been
 * merged and validated (see load-config.ts). Frozen once built; nothing below the edges re-checks it.
 * Units are in the names. Keys follow TorchServe's config.properties (snake_case there, camelCase here).
 */
import type { TrafficPolicy } from '../registry/traffic-policy.ts';

export interface ListenAddress {
  /** 'http' or 'https' (TLS); unix sockets are not supported yet. */
  protocol: 'http' | 'https';
  host: string;
  port: number;
  /** The address as written in the configuration, for logs. */
  raw: string;
}

/** Per model version settings from the `models` JSON in config.properties (TorchServe's names). */
export interface ModelVersionSettings {
  minWorkers?: number;
  maxWorkers?: number;
  batchSize?: number;
  /** maxBatchDelay, in ms. */
  maxBatchDelayMs?: number;
  /** responseTimeout, in seconds (TorchServe's unit). */
  responseTimeoutSec?: number;
  startupTimeoutSec?: number;
  defaultVersion?: boolean;
  marName?: string;
  jobQueueSize?: number;
  /** Intra-op threads per worker (Marina's extension; TorchServe has none). */
  intraOpNumThreads?: number;
  /** Priority levels and queue policies (Triton's structure in camelCase; checked when the version opens). */
  priorityLevels?: number;
  defaultPriorityLevel?: number;
  defaultQueuePolicy?: Record<string, unknown>;
  priorityQueuePolicy?: Record<string, Record<string, unknown>>;
  /** Keep this version resident: never evicted nor idle-unloaded (Marina extension). */
  pinned?: boolean;
  /** Unload this version after this many seconds without a request; 0 = never (Marina extension). */
  idleUnloadSeconds?: number;
}

/** One entry of load_models / --models: `file.mar`, `name=file.mar`, a URL, or a folder. */
export interface LoadModelSpec {
  name?: string;
  url: string;
}

export interface ServerConfig {
  inferenceAddress: ListenAddress;
  managementAddress: ListenAddress;
  metricsAddress: ListenAddress;
  /** Absolute path of the model store, when configured. */
  modelStore: string | undefined;
  /** 'all' loads every archive in the store. */
  loadModels: 'all' | LoadModelSpec[];
  /** models JSON: name -> version -> settings. */
  models: Record<string, Record<string, ModelVersionSettings>>;
  /**
   * shadow_max_cpu_pressure: shadow copies wait while the machine's CPU pressure (Linux PSI "some
   * avg10", percent) is at or above this; 100 turns the gate off. Default 50.
   */
  shadowMaxCpuPressurePercent?: number;
  /** The models JSON's `$traffic` entries: model name -> traffic policy (applied once its versions are registered). */
  trafficPolicies?: Record<string, TrafficPolicy>;
  /** default_workers_per_model; undefined means 1 worker per model (not TorchServe's one per core, see docs/guides/serving.md). */
  defaultWorkersPerModel: number | undefined;
  /** job_queue_size, per model version. Default 100. */
  jobQueueSize: number;
  /** number_of_netty_threads: HTTP I/O threads (informational in Node: one event loop). 0 = cores. */
  numberOfNettyThreads: number;
  /** default_response_timeout, seconds. Default 120. */
  defaultResponseTimeoutSec: number;
  /** default_startup_timeout, seconds. Default 120. */
  defaultStartupTimeoutSec: number;
  /** max_request_size, bytes. Default 6553500. */
  maxRequestBytes: number;
  /** max_response_size, bytes. Default 6553500. */
  maxResponseBytes: number;
  /** allowed_urls: case-insensitive full-match regexes. */
  allowedUrls: string[];
  /** True when allowed_urls was left at TorchServe's allow-everything default (a warning is logged). */
  isAllowedUrlsDefault: boolean;
  disableTokenAuthorization: boolean;
  enableModelApi: boolean;
  /**
   * strict_parameters. false (default): register parameters are read as TorchServe reads them (a
   * non-integer number is its default, a negative initial_workers is none, a timeout of 0 is the
   * default); true: such values are refused with 400 naming the parameter.
   */
  strictParameters: boolean;
  /**
   * snapshot_skip_missing_archives. false (default, TorchServe): a snapshot naming an archive that
   * is gone stops the start; true: the other versions are restored and the missing one is reported.
   */
  snapshotSkipMissingArchives: boolean;
  /** token_failure_status: 401 (default) or 400 (TorchServe's status for a token failure). */
  tokenFailureStatus: 400 | 401;
  /** ping_requires_token: false (default, `/ping` open for probes) or true (TorchServe: the inference key). */
  pingRequiresToken: boolean;
  /** batch_wait_when_idle: false (default) or true (TorchServe: an idle worker also waits maxBatchDelay for a partial batch). */
  batchWaitWhenIdle?: boolean;
  enableMetricsApi: boolean;
  /**
   * enable_tracing: OpenTelemetry traces when the OTEL_* environment does not say (OTEL_TRACES_EXPORTER
   * decides when set). Default false.
   */
  enableTracing?: boolean;
  /** token_expiration_min. Default 60. */
  tokenExpirationMin: number;
  /** Where key_file.json is written (TorchServe: the working directory), or token_key_file. */
  keyFilePath: string;
  /** token_key_file was set: the keys are read from keyFilePath, never generated, written or removed. */
  isKeyFileProvided?: boolean;
  /** OMP_NUM_THREADS from the environment, when set: the per-worker thread default. */
  ompNumThreads: number | undefined;
  /** Logical cores available to the server (os.availableParallelism()). */
  cpuCount: number;
  /** Folder where archives are extracted, keyed by content hash. */
  extractionCacheDir: string;
  /** Folder holding config snapshots (TorchServe: {LOG_LOCATION}/config). */
  snapshotDir: string;
  /** False with --ncs / model_snapshot disabled. */
  isSnapshotEnabled: boolean;
  /** Folder for logs and the pid file. */
  logDir: string;
  /** Folder of ts_metrics.log and model_metrics.log (TorchServe: METRICS_LOCATION, default `<cwd>/logs`); `logDir` when unset. */
  metricsLogDir?: string;
  /** metrics_mode: 'prometheus' (Marina's default) or TorchServe's 'log' (also writes logs/ts_metrics.log and logs/model_metrics.log); 'legacy' is read as 'prometheus'. */
  metricsMode: 'log' | 'prometheus' | 'legacy';
  /** workflow_store / --workflow-store (accepted; workflows are not implemented). */
  workflowStore?: string;
  /** plugins_path / --plugins-path (accepted; TorchServe's Java plugins cannot run here). */
  pluginsPath?: string;
  corsAllowedOrigin: string | undefined;
  corsAllowedMethods: string | undefined;
  corsAllowedHeaders: string | undefined;
  /** limit_max_image_pixels. Default true. */
  limitMaxImagePixels: boolean;
  /** Keys in the file that Marina does not know (warned about, never fatal). */
  unknownKeys: string[];
  /** Non-fatal notes produced while reading the configuration. */
  warnings: string[];
  /**
   * The gRPC listeners (grpc_inference_address/port, default 127.0.0.1:7070; grpc_management_address/port,
   * 127.0.0.1:7071; enable_grpc_ssl with private_key_file/certificate_file). Undefined: no gRPC
   * (configurations built by hand in tests and embedders); loadConfig always sets it, as TorchServe always serves gRPC.
   */
  grpc?: {
    inference: GrpcListenAddress;
    management: GrpcListenAddress;
    isSslEnabled: boolean;
  };
  /**
   * KServe ModelMesh's model-runtime SPI (modelmesh_runtime_port, modelmesh_runtime_address, default
   * 127.0.0.1): undefined = not served (the default). Plain gRPC: ModelMesh calls it inside the pod.
   */
  modelMeshRuntime?: GrpcListenAddress;
  /** private_key_file (PEM), required with an https:// address. */
  privateKeyFile?: string;
  /** certificate_file (PEM), required with an https:// address. */
  certificateFile?: string;
  /**
   * The autoscaler's knobs from `autoscale_*` keys (Marina extension; see docs/guides/management.md). Undefined
   * or a missing field means the autoscaler's default.
   */
  autoscaling?: {
    /** autoscale_interval_ms. Default 1000. */
    intervalMs?: number;
    /** autoscale_scale_up_queue_depth: queued jobs per live worker. Default 1. */
    scaleUpQueueDepth?: number;
    /** autoscale_scale_up_after_ms. Default 3000. */
    scaleUpAfterMs?: number;
    /** autoscale_scale_down_idle_ms. Default 60000. */
    scaleDownIdleMs?: number;
  };
  /**
   * Bounds on what clients and archives may consume (Marina extension keys; see docs/explanation/security.md,
   * "Bounded resources"). Undefined or a missing field means the default given with each field.
   */
  resourceLimits?: ResourceLimits;
  /** Which models stay in memory (Marina extension; see docs/guides/many-models.md). Undefined: no budget, no idle unload, 10 s grace. */
  residency?: ResidencySettings;
  /** Absolute path of the config file that was read; undefined when only defaults, CLI and env applied. */
  configFile?: string;
  /** Where `configFile` was found (TorchServe's order); undefined when there is none. */
  configFileOrigin?: 'TS_CONFIG_FILE' | '--ts-config' | 'snapshot' | 'working directory';
}

/** One gRPC listener: host and port (0 = any free port), and the optional connection-age limits, ms. */
export interface GrpcListenAddress {
  host: string;
  port: number;
  maxConnectionAgeMs?: number;
  maxConnectionAgeGraceMs?: number;
}

/** The `residency` of a ServerConfig: how many models stay resident and how they leave. */
export interface ResidencySettings {
  /** model_memory_budget, bytes; undefined = no budget (every registered model stays resident). */
  memoryBudgetBytes?: number;
  /** idle_unload_seconds: unload a model nobody called for this long; 0 = never. Default 0. */
  idleUnloadSeconds?: number;
  /** unload_grace_seconds: how long an unload waits for a running batch before answering it 503. Default 10. */
  unloadGraceSeconds?: number;
}

/** The `resourceLimits` of a ServerConfig. */
export interface ResourceLimits {
  /** request_timeout_ms: most time to receive a whole request, headers and body. Default 60000. */
  requestTimeoutMs?: number;
  /** download_timeout_ms: most time for one model download. Default 600000. */
  downloadTimeoutMs?: number;
  /** download_idle_timeout_ms: most time a download may receive nothing. Default 60000. */
  downloadIdleTimeoutMs?: number;
  /** max_concurrent_downloads. Default 2. */
  maxConcurrentDownloads?: number;
  /** extraction_cache_max_bytes. Default 16 GiB. */
  extractionCacheMaxBytes?: number;
  /** optimized_model_cache_max_bytes. Default 16 GiB. */
  optimizedModelCacheMaxBytes?: number;
  /** response_write_timeout (seconds in the file): most time a response write may make no progress, ms. Default 30000. */
  responseWriteTimeoutMs?: number;
  /** max_pending_response_bytes: answers' bytes not yet taken by their clients, over all connections. Default 256 MiB. */
  maxPendingResponseBytes?: number;
  /** log_max_line_bytes: longest log line. Default 4096. */
  logMaxLineBytes?: number;
  /** log_max_file_bytes: a log file this large is rolled over. Default 100 MiB (TorchServe's). */
  logMaxFileBytes?: number;
  /** log_max_backup_files: rolled-over files kept per log. Default 5 (TorchServe's). */
  logMaxBackupFiles?: number;
}

/** The defaults of `ResourceLimits`. */
export const DEFAULT_RESOURCE_LIMITS: Readonly<Required<ResourceLimits>> = Object.freeze({
  requestTimeoutMs: 60_000,
  downloadTimeoutMs: 600_000,
  downloadIdleTimeoutMs: 60_000,
  maxConcurrentDownloads: 2,
  extractionCacheMaxBytes: 16 * 1024 ** 3,
  optimizedModelCacheMaxBytes: 16 * 1024 ** 3,
  responseWriteTimeoutMs: 30_000,
  maxPendingResponseBytes: 256 * 1024 ** 2,
  logMaxLineBytes: 4096,
  logMaxFileBytes: 100 * 1024 ** 2,
  logMaxBackupFiles: 5,
});

/** `config.resourceLimits` with every default filled in. */
export function resourceLimitsOf(config: Pick<ServerConfig, 'resourceLimits'>): Required<ResourceLimits> {
  const set = Object.fromEntries(
    Object.entries(config.resourceLimits ?? {}).filter(([, value]) => value !== undefined),
  );
  return { ...DEFAULT_RESOURCE_LIMITS, ...set };
}
