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
  const sources: Sources = {
    where: `model '${options.modelName}' version '${options.modelVersion}'`,
    server: options.server,
    yaml: options.modelYamlConfig ?? {},
    json: options.modelsJson ?? {},
    api: options.api ?? {},
  };
  const timing = resolveTiming(sources);
  const threads = resolveThreadsAndLimits(sources);
  const workers = resolveWorkers(sources);
  const { where, yaml, json } = sources;
  const queue = resolveQueueSettings({ where, yaml, json, clientTimeoutMs: threads.clientTimeoutMs });
  const pinned = resolvePinned(sources);
  const idleUnloadSeconds = resolveIdleUnloadSeconds(sources);
  return {
    batchSize: timing.batchSize[0],
    maxBatchDelayMs: timing.maxBatchDelayMs[0],
    responseTimeoutMs: timing.responseTimeoutSec[0] * 1000,
    startupTimeoutMs: timing.startupTimeoutSec[0] * 1000,
    minWorkers: workers.minWorkers,
    maxWorkers: workers.maxWorkers,
    jobQueueSize: threads.jobQueueSize[0],
    intraOpNumThreads: threads.intraOp[0] > 0 ? threads.intraOp[0] : undefined,
    clientTimeoutMs: threads.clientTimeoutMs,
    maxWorkerHeapMb: threads.maxWorkerHeapMb,
    queue,
    pinned,
    idleUnloadMs: idleUnloadSeconds * 1000,
    sources: {
      batchSize: timing.batchSize[1],
      maxBatchDelayMs: timing.maxBatchDelayMs[1],
      responseTimeoutMs: timing.responseTimeoutSec[1],
      startupTimeoutMs: timing.startupTimeoutSec[1],
      workers: workers.source,
      jobQueueSize: threads.jobQueueSize[1],
      intraOpNumThreads: threads.intraOp[0] > 0 ? threads.intraOp[1] : 'server default',
    },
  };
}

/** Where a version's settings come from, and the version's name for messages. */
interface Sources {
  where: string;
  server: ResolveModelSettingsOptions['server'];
  yaml: Record<string, unknown>;
  json: ModelVersionSettings;
  api: ApiModelSettings;
}

/** A value as a source gave it, its key there, and the source. */
type Candidate = [unknown, string, SettingSource];

/**
 * A value as a number, or undefined when unset.
 * @throws MARINA_ERR_MODEL_SETTINGS_INVALID when it is not a number (an integer for `int`).
 */
function readNumber(where: string, [value, key, source]: Candidate, kind: 'int' | 'number'): number | undefined {
  if (value === undefined || value === null) return undefined;
  const n = typeof value === 'string' && value.trim() !== '' ? Number(value) : value;
  if (typeof n !== 'number' || !Number.isFinite(n) || (kind === 'int' && !Number.isInteger(n))) {
    throw createServeError.MARINA_ERR_MODEL_SETTINGS_INVALID(
      `${where}: ${key} from ${source} must be ${kind === 'int' ? 'an integer' : 'a number'}, got ${JSON.stringify(value)}`,
      { details: { key, source, value } },
    );
  }
  return n;
}

/** The first candidate above 0 (or 0 from a source in `allowZeroFrom`), else the fallback as a server default. */
function pickSetting(
  where: string,
  candidates: Candidate[],
  options: { kind: 'int' | 'number'; fallback: number; allowZeroFrom?: SettingSource[] },
): [number, SettingSource] {
  for (const candidate of candidates) {
    const n = readNumber(where, candidate, options.kind);
    if (n === undefined) continue;
    if (n > 0 || (n === 0 && (options.allowZeroFrom ?? []).includes(candidate[2]))) return [n, candidate[2]];
  }
  return [options.fallback, 'server default'];
}

/** Batch size, batch delay and the two timeouts: API, then model-config.yaml, then the models JSON. */
function resolveTiming({ where, server, yaml, json, api }: Sources) {
  return {
    batchSize: pickSetting(
      where,
      [
        [api.batchSize, 'batch_size', 'api'],
        [yaml.batchSize, 'batchSize', 'model-config.yaml'],
        [json.batchSize, 'batchSize', 'models JSON'],
      ],
      { kind: 'int', fallback: 1 },
    ),
    // 0 means "never wait to fill a batch", from any source.
    maxBatchDelayMs: pickSetting(
      where,
      [
        [api.maxBatchDelayMs, 'max_batch_delay', 'api'],
        [yaml.maxBatchDelay, 'maxBatchDelay', 'model-config.yaml'],
        [json.maxBatchDelayMs, 'maxBatchDelay', 'models JSON'],
      ],
      { kind: 'number', fallback: 100, allowZeroFrom: ['api', 'model-config.yaml', 'models JSON'] },
    ),
    responseTimeoutSec: pickSetting(
      where,
      [
        [api.responseTimeoutSec, 'response_timeout', 'api'],
        [yaml.responseTimeout, 'responseTimeout', 'model-config.yaml'],
        [json.responseTimeoutSec, 'responseTimeout', 'models JSON'],
      ],
      { kind: 'number', fallback: server.defaultResponseTimeoutSec },
    ),
    startupTimeoutSec: pickSetting(
      where,
      [
        [api.startupTimeoutSec, 'startup_timeout', 'api'],
        [yaml.startupTimeout, 'startupTimeout', 'model-config.yaml'],
        [json.startupTimeoutSec, 'startupTimeout', 'models JSON'],
      ],
      { kind: 'number', fallback: server.defaultStartupTimeoutSec },
    ),
  };
}

/** Queue size, intra-op threads, the client timeout and the worker heap: no API value for these. */
function resolveThreadsAndLimits({ where, server, yaml, json }: Sources) {
  const jobQueueSize = pickSetting(
    where,
    [
      [yaml.jobQueueSize, 'jobQueueSize', 'model-config.yaml'],
      [json.jobQueueSize, 'jobQueueSize', 'models JSON'],
    ],
    { kind: 'int', fallback: server.jobQueueSize },
  );
  const intraOp = pickSetting(
    where,
    [
      [yaml.intraOpNumThreads, 'intraOpNumThreads', 'model-config.yaml'],
      [json.intraOpNumThreads, 'intraOpNumThreads', 'models JSON'],
    ],
    { kind: 'int', fallback: 0 },
  );
  const [clientTimeoutMs] = pickSetting(
    where,
    [[yaml.clientTimeoutInMills, 'clientTimeoutInMills', 'model-config.yaml']],
    {
      kind: 'int',
      fallback: 0,
    },
  );
  const [maxWorkerHeapMb] = pickSetting(where, [[yaml.maxWorkerHeapMb, 'maxWorkerHeapMb', 'model-config.yaml']], {
    kind: 'int',
    fallback: DEFAULT_MAX_WORKER_HEAP_MB,
  });
  return { jobQueueSize, intraOp, clientTimeoutMs, maxWorkerHeapMb };
}

/**
 * min/max workers: the API's (0 allowed), else model-config.yaml's as a pair (min > 0, max >= min),
 * else the models JSON's (min > 0), else the fallback; maxWorkers defaults to minWorkers.
 */
function resolveWorkers({ where, server, yaml, json, api }: Sources): {
  minWorkers: number;
  maxWorkers: number;
  source: SettingSource;
} {
  const defaultWorkers =
    api.fallbackWorkers ??
    (server.defaultWorkersPerModel !== undefined && server.defaultWorkersPerModel > 0
      ? server.defaultWorkersPerModel
      : 1);
  const yamlMin = readNumber(where, [yaml.minWorkers, 'minWorkers', 'model-config.yaml'], 'int');
  const yamlMax = readNumber(where, [yaml.maxWorkers, 'maxWorkers', 'model-config.yaml'], 'int');
  const jsonMin = readNumber(where, [json.minWorkers, 'minWorkers', 'models JSON'], 'int');
  const jsonMax = readNumber(where, [json.maxWorkers, 'maxWorkers', 'models JSON'], 'int');
  const apiMinKey = api.initialWorkers !== undefined ? 'initial_workers' : 'min_worker';
  const apiMin = readNumber(where, [api.initialWorkers ?? api.minWorkers, apiMinKey, 'api'], 'int');
  const apiMax = readNumber(where, [api.maxWorkers, 'max_worker', 'api'], 'int');
  let chosen: { min: number; max: number | undefined; source: SettingSource } = {
    min: defaultWorkers,
    max: undefined,
    source: 'server default',
  };
  if (apiMin !== undefined && apiMin >= 0) chosen = { min: apiMin, max: apiMax, source: 'api' };
  else if (yamlMin !== undefined && yamlMin > 0 && (yamlMax === undefined || yamlMax >= yamlMin))
    chosen = { min: yamlMin, max: yamlMax, source: 'model-config.yaml' };
  else if (jsonMin !== undefined && jsonMin > 0) chosen = { min: jsonMin, max: jsonMax, source: 'models JSON' };
  const maxWorkers = chosen.max === undefined || chosen.max < chosen.min ? chosen.min : chosen.max;
  return { minWorkers: chosen.min, maxWorkers, source: chosen.source };
}

/**
 * pinned: the API's, else model-config.yaml's, else the models JSON's, else false.
 * @throws MARINA_ERR_MODEL_SETTINGS_INVALID when model-config.yaml's is not a boolean.
 */
function resolvePinned({ where, yaml, json, api }: Sources): boolean {
  const yamlPinned = yaml.pinned;
  if (yamlPinned !== undefined && typeof yamlPinned !== 'boolean')
    throw createServeError.MARINA_ERR_MODEL_SETTINGS_INVALID(
      `${where}: pinned from model-config.yaml must be true or false, got ${JSON.stringify(yamlPinned).slice(0, 40)}`,
      { details: { key: 'pinned', source: 'model-config.yaml' } },
    );
  return api.pinned ?? (yamlPinned as boolean | undefined) ?? json.pinned ?? false;
}

/** Idle unload, seconds: the first source that sets it (0 = never), else the server's. */
function resolveIdleUnloadSeconds({ where, server, yaml, json, api }: Sources): number {
  for (const candidate of [
    [api.idleUnloadSeconds, 'idle_unload_seconds', 'api'],
    [yaml.idleUnloadSeconds, 'idleUnloadSeconds', 'model-config.yaml'],
    [json.idleUnloadSeconds, 'idleUnloadSeconds', 'models JSON'],
  ] as Candidate[]) {
    const n = readNumber(where, candidate, 'number');
    if (n !== undefined && n >= 0) return n;
  }
  return server.residency?.idleUnloadSeconds ?? 0;
}
