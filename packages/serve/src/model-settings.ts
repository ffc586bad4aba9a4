import type { ModelVersionSettings, ServerConfig } from './config/server-config.ts';
import { createServeError } from './errors.ts';
import { resolveQueueSettings, type QueueSettings } from './scheduling/queue-policy.ts';

/** The settings one model version runs with, after every source is combined. Units in the names. */
export interface ModelSettings {
  batchSize: number;
  maxBatchDelayMs: number;
  responseTimeoutMs: number;
  startupTimeoutMs: number;
  /** Workers started at registration / startup. */
  minWorkers: number;
  maxWorkers: number;
  jobQueueSize: number;
  /** Intra-op threads per worker when configured (model-config.yaml or models JSON); undefined = the server's default. */
  intraOpNumThreads: number | undefined;
  /** TorchServe's clientTimeoutInMills: a request not started within this many ms is answered without running; 0 = no deadline (default). */
  clientTimeoutMs: number;
  /** Each worker thread's V8 heap limit (model-config.yaml `maxWorkerHeapMb`), MB. Default DEFAULT_MAX_WORKER_HEAP_MB. */
  maxWorkerHeapMb: number;
  /** Priority levels and their queue policies (model-config.yaml, else the models JSON); one level by default. */
  queue: QueueSettings;
  /** Kept resident: never evicted under model_memory_budget, never idle-unloaded. */
  pinned: boolean;
  /** Unload after this long without a request, ms; 0 = never. */
  idleUnloadMs: number;
  /** Where each value came from, for logs and describe. */
  sources: Record<
    | 'batchSize'
    | 'maxBatchDelayMs'
    | 'responseTimeoutMs'
    | 'startupTimeoutMs'
    | 'workers'
    | 'jobQueueSize'
    | 'intraOpNumThreads',
    SettingSource
  >;
}

export type SettingSource = 'api' | 'model-config.yaml' | 'models JSON' | 'server default';

/** A worker thread's default V8 heap limit, MB: a handler that outgrows it ends its own worker (507), not the server. */
export const DEFAULT_MAX_WORKER_HEAP_MB = 1024;

/** Values given on the register API (management `POST /models`). */
export interface ApiModelSettings {
  batchSize?: number;
  maxBatchDelayMs?: number;
  responseTimeoutSec?: number;
  startupTimeoutSec?: number;
  initialWorkers?: number;
  minWorkers?: number;
  maxWorkers?: number;
  /**
   * Workers when neither the API, model-config.yaml nor the models JSON says: the register API
   * passes 0 (TorchServe's "registered with 0 initial workers"); start-up models leave it out and
   * get default_workers_per_model, else 1.
   */
  fallbackWorkers?: number;
  /** Keep resident (Marina: register with pinned=true, or the management pin call). */
  pinned?: boolean;
  /** Idle unload, seconds; 0 = never. */
  idleUnloadSeconds?: number;
}

export interface ResolveModelSettingsOptions {
  modelName: string;
  modelVersion: string;
  server: Pick<
    ServerConfig,
    'defaultWorkersPerModel' | 'jobQueueSize' | 'defaultResponseTimeoutSec' | 'defaultStartupTimeoutSec' | 'residency'
  >;
  /** model-config.yaml from the archive, as parsed (TorchServe's keys: batchSize, maxBatchDelay, responseTimeout, ...). */
  modelYamlConfig?: Record<string, unknown>;
  /** This version's entry of the `models` JSON in config.properties. */
  modelsJson?: ModelVersionSettings;
  api?: ApiModelSettings;
}

/**
 * Combines a model version's settings. Highest precedence first (TorchServe's documented
 * intent, properties < YAML < API; see docs/guides/serving.md, "Model settings and their precedence"):
 *
 * | setting          | 1. register API        | 2. model-config.yaml      | 3. `models` JSON        | 4. server default                           |
 * |------------------|------------------------|---------------------------|-------------------------|---------------------------------------------|
 * | batchSize        | `batch_size`           | `batchSize`               | `batchSize`             | 1                                           |
 * | maxBatchDelayMs  | `max_batch_delay`      | `maxBatchDelay` (ms)      | `maxBatchDelay`         | 100                                         |
 * | responseTimeout  | `response_timeout` (s) | `responseTimeout` (s)     | `responseTimeout`       | `default_response_timeout` (120 s)          |
 * | startupTimeout   | `startup_timeout` (s)  | `startupTimeout` (s)      | `startupTimeout`        | `default_startup_timeout` (120 s)           |
 * | min/maxWorkers   | `initial_workers`/min  | `minWorkers`/`maxWorkers` | `minWorkers`/`maxWorkers` | `default_workers_per_model`, else 1       |
 * | jobQueueSize     | –                      | `jobQueueSize`            | `jobQueueSize`          | `job_queue_size` (100)                      |
 * | intraOpNumThreads| –                      | `intraOpNumThreads`       | `intraOpNumThreads`     | OMP_NUM_THREADS, else cores ÷ all workers   |
 *
 * Deliberate differences from TorchServe's code (its known traps, section 3 of the reference):
 * - TorchServe lets *any* model-config.yaml set responseTimeout/startupTimeout to 120 s even when
 *   the YAML does not mention them, overriding the API and the `models` JSON. Here a YAML value
 *   applies only when the YAML sets it, and the API still wins.
 * - Values of 0 or below are "unset" as in TorchServe, except `maxBatchDelay: 0`, which means
 *   "never wait to fill a batch", and `initial_workers: 0` on the API (register without workers).
 * - YAML `minWorkers`/`maxWorkers` apply as a pair only when min > 0 and max >= min (as TorchServe);
 *   otherwise maxWorkers defaults to minWorkers.
 * - A value of the wrong type (e.g. `batchSize: "eight"`) is an error naming the key and the source,
 *   not silently ignored.
 *
 * @throws MARINA_ERR_MODEL_SETTINGS_INVALID for non-numeric or non-integer values.
 */
export function resolveModelSettings(options: ResolveModelSettingsOptions): ModelSettings {
  const { modelName, modelVersion, server } = options;
  const yaml = options.modelYamlConfig ?? {};
  const json = options.modelsJson ?? {};
  const api = options.api ?? {};
  const where = `model '${modelName}' version '${modelVersion}'`;

  const num = (value: unknown, key: string, source: SettingSource, kind: 'int' | 'number'): number | undefined => {
    if (value === undefined || value === null) return undefined;
    const n = typeof value === 'string' && value.trim() !== '' ? Number(value) : value;
    if (typeof n !== 'number' || !Number.isFinite(n) || (kind === 'int' && !Number.isInteger(n))) {
      throw createServeError.MARINA_ERR_MODEL_SETTINGS_INVALID(
        `${where}: ${key} from ${source} must be ${kind === 'int' ? 'an integer' : 'a number'}, got ${JSON.stringify(value)}`,
        { details: { key, source, value } },
      );
    }
    return n;
  };

  type Candidate = [unknown, string, SettingSource];
  const pick = (
    candidates: Candidate[],
    kind: 'int' | 'number',
    fallback: number,
    allowZeroFrom: SettingSource[] = [],
  ): [number, SettingSource] => {
    for (const [value, key, source] of candidates) {
      const n = num(value, key, source, kind);
      if (n === undefined) continue;
      if (n > 0 || (n === 0 && allowZeroFrom.includes(source))) return [n, source];
    }
    return [fallback, 'server default'];
  };

  const [batchSize, batchSizeSource] = pick(
    [
      [api.batchSize, 'batch_size', 'api'],
      [yaml.batchSize, 'batchSize', 'model-config.yaml'],
      [json.batchSize, 'batchSize', 'models JSON'],
    ],
    'int',
    1,
  );

  const [maxBatchDelayMs, maxBatchDelaySource] = pick(
    [
      [api.maxBatchDelayMs, 'max_batch_delay', 'api'],
      [yaml.maxBatchDelay, 'maxBatchDelay', 'model-config.yaml'],
      [json.maxBatchDelayMs, 'maxBatchDelay', 'models JSON'],
    ],
    'number',
    100,
    ['api', 'model-config.yaml', 'models JSON'],
  );

  const [responseTimeoutSec, responseTimeoutSource] = pick(
    [
      [api.responseTimeoutSec, 'response_timeout', 'api'],
      [yaml.responseTimeout, 'responseTimeout', 'model-config.yaml'],
      [json.responseTimeoutSec, 'responseTimeout', 'models JSON'],
    ],
    'number',
    server.defaultResponseTimeoutSec,
  );

  const [startupTimeoutSec, startupTimeoutSource] = pick(
    [
      [api.startupTimeoutSec, 'startup_timeout', 'api'],
      [yaml.startupTimeout, 'startupTimeout', 'model-config.yaml'],
      [json.startupTimeoutSec, 'startupTimeout', 'models JSON'],
    ],
    'number',
    server.defaultStartupTimeoutSec,
  );

  const [jobQueueSize, jobQueueSizeSource] = pick(
    [
      [yaml.jobQueueSize, 'jobQueueSize', 'model-config.yaml'],
      [json.jobQueueSize, 'jobQueueSize', 'models JSON'],
    ],
    'int',
    server.jobQueueSize,
  );

  const [intraOp, intraOpSource] = pick(
    [
      [yaml.intraOpNumThreads, 'intraOpNumThreads', 'model-config.yaml'],
      [json.intraOpNumThreads, 'intraOpNumThreads', 'models JSON'],
    ],
    'int',
    0,
  );

  const [clientTimeoutMs] = pick([[yaml.clientTimeoutInMills, 'clientTimeoutInMills', 'model-config.yaml']], 'int', 0);

  const [maxWorkerHeapMb] = pick(
    [[yaml.maxWorkerHeapMb, 'maxWorkerHeapMb', 'model-config.yaml']],
    'int',
    DEFAULT_MAX_WORKER_HEAP_MB,
  );

  const defaultWorkers =
    api.fallbackWorkers ??
    (server.defaultWorkersPerModel !== undefined && server.defaultWorkersPerModel > 0
      ? server.defaultWorkersPerModel
      : 1);
  let minWorkers = defaultWorkers;
  let maxWorkers: number | undefined;
  let workersSource: SettingSource = 'server default';
  const yamlMin = num(yaml.minWorkers, 'minWorkers', 'model-config.yaml', 'int');
  const yamlMax = num(yaml.maxWorkers, 'maxWorkers', 'model-config.yaml', 'int');
  const jsonMin = num(json.minWorkers, 'minWorkers', 'models JSON', 'int');
  const jsonMax = num(json.maxWorkers, 'maxWorkers', 'models JSON', 'int');
  const apiMin = num(
    api.initialWorkers ?? api.minWorkers,
    api.initialWorkers !== undefined ? 'initial_workers' : 'min_worker',
    'api',
    'int',
  );
  const apiMax = num(api.maxWorkers, 'max_worker', 'api', 'int');
  if (apiMin !== undefined && apiMin >= 0) {
    minWorkers = apiMin;
    maxWorkers = apiMax;
    workersSource = 'api';
  } else if (yamlMin !== undefined && yamlMin > 0 && (yamlMax === undefined || yamlMax >= yamlMin)) {
    minWorkers = yamlMin;
    maxWorkers = yamlMax;
    workersSource = 'model-config.yaml';
  } else if (jsonMin !== undefined && jsonMin > 0) {
    minWorkers = jsonMin;
    maxWorkers = jsonMax;
    workersSource = 'models JSON';
  }
  if (maxWorkers === undefined || maxWorkers < minWorkers) maxWorkers = minWorkers;

  const queue = resolveQueueSettings({ where, yaml, json, clientTimeoutMs });
  const yamlPinned = yaml.pinned;
  if (yamlPinned !== undefined && typeof yamlPinned !== 'boolean')
    throw createServeError.MARINA_ERR_MODEL_SETTINGS_INVALID(
      `${where}: pinned from model-config.yaml must be true or false, got ${JSON.stringify(yamlPinned).slice(0, 40)}`,
      { details: { key: 'pinned', source: 'model-config.yaml' } },
    );
  const pinned = api.pinned ?? (yamlPinned as boolean | undefined) ?? json.pinned ?? false;
  let idleUnloadSeconds = server.residency?.idleUnloadSeconds ?? 0;
  for (const [value, key, source] of [
    [api.idleUnloadSeconds, 'idle_unload_seconds', 'api'],
    [yaml.idleUnloadSeconds, 'idleUnloadSeconds', 'model-config.yaml'],
    [json.idleUnloadSeconds, 'idleUnloadSeconds', 'models JSON'],
  ] as Candidate[]) {
    const n = num(value, key, source, 'number');
    if (n !== undefined && n >= 0) {
      idleUnloadSeconds = n;
      break;
    }
  }

  return {
    batchSize,
    maxBatchDelayMs,
    responseTimeoutMs: responseTimeoutSec * 1000,
    startupTimeoutMs: startupTimeoutSec * 1000,
    minWorkers,
    maxWorkers,
    jobQueueSize,
    intraOpNumThreads: intraOp > 0 ? intraOp : undefined,
    clientTimeoutMs,
    maxWorkerHeapMb,
    queue,
    pinned,
    idleUnloadMs: idleUnloadSeconds * 1000,
    sources: {
      batchSize: batchSizeSource,
      maxBatchDelayMs: maxBatchDelaySource,
      responseTimeoutMs: responseTimeoutSource,
      startupTimeoutMs: startupTimeoutSource,
      workers: workersSource,
      jobQueueSize: jobQueueSizeSource,
      intraOpNumThreads: intraOp > 0 ? intraOpSource : 'server default',
    },
  };
}
