import os from 'node:os';
import path from 'node:path';
import type { ModelVersionSettings, ServerConfig } from './server-config.ts';
import type { TrafficPolicy } from '../registry/traffic-policy.ts';
import type { Listeners } from './resolve-listeners.ts';
import type { ModelSources } from './resolve-model-sources.ts';
import type { RawConfig } from './validate-config-values.ts';
import { defaultExtractionCacheDir } from '../cache/model-caches.ts';
import { configError } from './config-errors.ts';
import { parseMemoryBudget } from './parse-memory-budget.ts';

/** What the earlier steps of resolution produced, to be put into a ServerConfig. */
export interface ResolvedParts {
  checked: RawConfig;
  origin: (key: string) => string;
  env: NodeJS.ProcessEnv;
  cwd: string;
  isSnapshotEnabled: boolean;
  listeners: Listeners;
  sources: ModelSources;
  models: Record<string, Record<string, ModelVersionSettings>>;
  trafficPolicies: Record<string, TrafficPolicy>;
  unknownKeys: string[];
  warnings: string[];
  configFile?: string;
}

/**
 * Turns the checked snake_case values into the camelCase ServerConfig: units in names, paths
 * resolved against `cwd`, OMP_NUM_THREADS and the log folders from the environment. Not frozen.
 *
 * @throws MARINA_ERR_CONFIG_VALUE_INVALID for OMP_NUM_THREADS or model_memory_budget.
 */
export function buildServerConfig(parts: ResolvedParts): ServerConfig {
  const { checked, cwd, env } = parts;
  if (checked.default_workers_per_model === 0)
    parts.warnings.push(
      `${parts.origin('default_workers_per_model')}: default_workers_per_model=0 means 1 worker per model in Marina (TorchServe: one per core)`,
    );
  const ompNumThreads = parseOmpNumThreads(env.OMP_NUM_THREADS);
  const logDir = resolveLogDir({ env, cwd });
  return {
    ...parts.listeners,
    modelStore: parts.sources.modelStore,
    loadModels: parts.sources.loadModels,
    models: parts.models,
    trafficPolicies: parts.trafficPolicies,
    shadowMaxCpuPressurePercent: checked.shadow_max_cpu_pressure,
    defaultWorkersPerModel: checked.default_workers_per_model ? checked.default_workers_per_model : undefined,
    jobQueueSize: checked.job_queue_size,
    numberOfNettyThreads: checked.number_of_netty_threads,
    defaultResponseTimeoutSec: checked.default_response_timeout,
    defaultStartupTimeoutSec: checked.default_startup_timeout,
    maxRequestBytes: checked.max_request_size,
    maxResponseBytes: checked.max_response_size,
    allowedUrls: parts.sources.allowedUrls,
    isAllowedUrlsDefault: parts.sources.isAllowedUrlsDefault,
    ...flags(checked),
    tokenExpirationMin: checked.token_expiration_min,
    keyFilePath: checked.token_key_file ? path.resolve(cwd, checked.token_key_file) : path.join(cwd, 'key_file.json'),
    isKeyFileProvided: Boolean(checked.token_key_file),
    ompNumThreads,
    cpuCount: os.availableParallelism(),
    extractionCacheDir: defaultExtractionCacheDir(),
    snapshotDir: path.join(logDir, 'config'),
    isSnapshotEnabled: parts.isSnapshotEnabled,
    logDir,
    metricsLogDir: resolveMetricsLogDir({ env, cwd }),
    metricsMode: checked.metrics_mode,
    ...(checked.workflow_store ? { workflowStore: path.resolve(cwd, checked.workflow_store) } : {}),
    ...(checked.plugins_path ? { pluginsPath: path.resolve(cwd, checked.plugins_path) } : {}),
    corsAllowedOrigin: checked.cors_allowed_origin,
    corsAllowedMethods: checked.cors_allowed_methods,
    corsAllowedHeaders: checked.cors_allowed_headers,
    limitMaxImagePixels: checked.limit_max_image_pixels,
    unknownKeys: parts.unknownKeys,
    warnings: parts.warnings,
    ...nestedSettings(parts),
    ...(checked.private_key_file ? { privateKeyFile: path.resolve(cwd, checked.private_key_file) } : {}),
    ...(checked.certificate_file ? { certificateFile: path.resolve(cwd, checked.certificate_file) } : {}),
    ...(parts.configFile ? { configFile: parts.configFile } : {}),
  };
}

/** The on/off settings, in the order ServerConfig lists them. */
function flags(checked: RawConfig) {
  return {
    disableTokenAuthorization: checked.disable_token_authorization,
    enableModelApi: checked.enable_model_api,
    strictParameters: checked.strict_parameters,
    snapshotSkipMissingArchives: checked.snapshot_skip_missing_archives,
    tokenFailureStatus: checked.token_failure_status,
    pingRequiresToken: checked.ping_requires_token,
    batchWaitWhenIdle: checked.batch_wait_when_idle,
    enableMetricsApi: checked.enable_metrics_api,
    enableTracing: checked.enable_tracing,
  };
}

/** The grouped settings: autoscaling, gRPC, the ModelMesh SPI, resource limits and residency. */
function nestedSettings(
  parts: ResolvedParts,
): Pick<ServerConfig, 'autoscaling' | 'grpc' | 'modelMeshRuntime' | 'resourceLimits' | 'residency'> {
  const { checked } = parts;
  return {
    autoscaling: {
      intervalMs: checked.autoscale_interval_ms,
      scaleUpQueueDepth: checked.autoscale_scale_up_queue_depth,
      scaleUpAfterMs: checked.autoscale_scale_up_after_ms,
      scaleDownIdleMs: checked.autoscale_scale_down_idle_ms,
    },
    grpc: grpcSettings(checked),
    ...(checked.modelmesh_runtime_port === undefined
      ? {}
      : { modelMeshRuntime: { host: checked.modelmesh_runtime_address, port: checked.modelmesh_runtime_port } }),
    resourceLimits: resourceLimits(checked),
    residency: residencySettings(parts),
  };
}

function grpcSettings(checked: RawConfig): ServerConfig['grpc'] {
  return {
    inference: {
      host: checked.grpc_inference_address,
      port: checked.grpc_inference_port,
      maxConnectionAgeMs: checked.grpc_inference_max_connection_age_ms,
      maxConnectionAgeGraceMs: checked.grpc_inference_max_connection_age_grace_ms,
    },
    management: {
      host: checked.grpc_management_address,
      port: checked.grpc_management_port,
      maxConnectionAgeMs: checked.grpc_management_max_connection_age_ms,
      maxConnectionAgeGraceMs: checked.grpc_management_max_connection_age_grace_ms,
    },
    isSslEnabled: checked.enable_grpc_ssl,
  };
}

function resourceLimits(checked: RawConfig): ServerConfig['resourceLimits'] {
  return {
    requestTimeoutMs: checked.request_timeout_ms,
    downloadTimeoutMs: checked.download_timeout_ms,
    downloadIdleTimeoutMs: checked.download_idle_timeout_ms,
    maxConcurrentDownloads: checked.max_concurrent_downloads,
    extractionCacheMaxBytes: checked.extraction_cache_max_bytes,
    optimizedModelCacheMaxBytes: checked.optimized_model_cache_max_bytes,
    responseWriteTimeoutMs: Math.round(checked.response_write_timeout * 1000),
    maxPendingResponseBytes: checked.max_pending_response_bytes,
    logMaxLineBytes: checked.log_max_line_bytes,
    logMaxFileBytes: checked.log_max_file_bytes,
    logMaxBackupFiles: checked.log_max_backup_files,
  };
}

function residencySettings(parts: ResolvedParts): ServerConfig['residency'] {
  const { checked } = parts;
  return {
    ...(checked.model_memory_budget !== undefined
      ? {
          memoryBudgetBytes: parseMemoryBudget({
            value: checked.model_memory_budget,
            origin: parts.origin('model_memory_budget'),
          }),
        }
      : {}),
    idleUnloadSeconds: checked.idle_unload_seconds,
    unloadGraceSeconds: checked.unload_grace_seconds,
  };
}

/** LOG_LOCATION (as TorchServe) or `<cwd>/logs`. */
export function resolveLogDir(options: { env: NodeJS.ProcessEnv; cwd: string }): string {
  return path.resolve(options.cwd, options.env.LOG_LOCATION?.trim() || 'logs');
}

/** METRICS_LOCATION (as TorchServe's log4j2.xml: the metric log files) or `<cwd>/logs`. */
function resolveMetricsLogDir(options: { env: NodeJS.ProcessEnv; cwd: string }): string {
  return path.resolve(options.cwd, options.env.METRICS_LOCATION?.trim() || 'logs');
}

/** Threads per worker from OMP_NUM_THREADS; undefined when unset. */
function parseOmpNumThreads(value: string | undefined): number | undefined {
  if (value === undefined || value.trim() === '') return undefined;
  const threads = Number(value.trim());
  if (!Number.isInteger(threads) || threads < 1) {
    throw configError.MARINA_ERR_CONFIG_VALUE_INVALID(
      `environment variable OMP_NUM_THREADS='${value}' is not a whole number >= 1. Set it to the threads per worker (e.g. 1) or unset it.`,
      { details: { variable: 'OMP_NUM_THREADS', value } },
    );
  }
  return threads;
}
