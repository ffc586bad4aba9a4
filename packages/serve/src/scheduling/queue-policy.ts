/**
 * Priority levels and queue policies of a model version (Triton's `priority_levels`,
 * `default_priority_level`, `default_queue_policy` and `priority_queue_policy`, in camelCase and
 * milliseconds), and how one request's priority and timeout become its place in the JobQueue.
 */
import { createServeError } from '../errors.ts';
import type { JobSchedule } from './job.ts';

/** A level's queue policy, every field resolved. */
interface QueuePolicy {
  /** Jobs queued at the level at most; 0: only jobQueueSize bounds it. */
  maxQueueSize: number;
  /** A job not started within this many ms of arriving is answered (reject) or moved back (delay); 0: never. */
  timeoutMs: number;
  timeoutAction: 'reject' | 'delay';
  /** A request's own timeout applies when shorter than timeoutMs, or when the level has none. Default true. */
  allowTimeoutOverride: boolean;
}

/** A model version's priority settings, resolved. */
export interface QueueSettings {
  /** 1 … priorityLevels; 1 is the highest. Default 1. */
  priorityLevels: number;
  /** The level of a request that names none. Default: the lowest (priorityLevels), so a request opts in to a higher one. */
  defaultPriorityLevel: number;
  /** One policy per level, level 1 first. */
  levels: QueuePolicy[];
}

/** What a request asked for, as its protocol carried it (parsed, not yet checked against the model). */
export interface RequestScheduling {
  /** 0 or undefined: the model's defaultPriorityLevel. */
  priority?: number;
  /** The request's own timeout, ms from arrival; 0 or undefined: none. */
  timeoutMs?: number;
  /** performance.now() by which the caller stops waiting (a gRPC deadline): always honoured. */
  deadlineAt?: number;
}

type RawPolicy = Record<string, unknown>;

/** The raw priority keys of one source (model-config.yaml, or the models JSON entry). */
export interface RawQueueSettings {
  priorityLevels?: unknown;
  defaultPriorityLevel?: unknown;
  defaultQueuePolicy?: unknown;
  priorityQueuePolicy?: unknown;
}

/**
 * Combines the priority keys: each key from model-config.yaml, else from the models JSON. The
 * default policy's timeoutMs defaults to clientTimeoutInMills (TorchServe's one queue timeout).
 * @throws MARINA_ERR_MODEL_SETTINGS_INVALID naming the key and the source.
 */
export function resolveQueueSettings(options: {
  where: string;
  yaml: RawQueueSettings;
  json: RawQueueSettings;
  clientTimeoutMs: number;
}): QueueSettings {
  const { where, yaml, json } = options;
  const invalid = (key: string, source: string, value: unknown, must: string) =>
    createServeError.MARINA_ERR_MODEL_SETTINGS_INVALID(
      `${where}: ${key} from ${source} must be ${must}, got ${JSON.stringify(value)?.slice(0, 80)}`,
      { details: { key, source } },
    );
  const from = (key: keyof RawQueueSettings): [unknown, string] =>
    yaml[key] !== undefined ? [yaml[key], 'model-config.yaml'] : [json[key], 'models JSON'];
  const integer = (key: string, source: string, value: unknown, min: number, max = Infinity): number => {
    if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max)
      throw invalid(key, source, value, max === Infinity ? `an integer >= ${min}` : `an integer from ${min} to ${max}`);
    return value;
  };

  const [levelsValue, levelsSource] = from('priorityLevels');
  const priorityLevels = levelsValue === undefined ? 1 : integer('priorityLevels', levelsSource, levelsValue, 1, 64);
  const [defaultValue, defaultSource] = from('defaultPriorityLevel');
  const defaultPriorityLevel =
    defaultValue === undefined
      ? priorityLevels
      : integer('defaultPriorityLevel', defaultSource, defaultValue, 1, priorityLevels);

  const policyOf = (value: unknown, key: string, source: string, base: QueuePolicy): QueuePolicy => {
    if (value === undefined) return base;
    if (typeof value !== 'object' || value === null || Array.isArray(value))
      throw invalid(key, source, value, 'an object {maxQueueSize, timeoutMs, timeoutAction, allowTimeoutOverride}');
    const raw = value as RawPolicy;
    for (const name of Object.keys(raw))
      if (!['maxQueueSize', 'timeoutMs', 'timeoutAction', 'allowTimeoutOverride'].includes(name))
        throw invalid(
          `${key}.${name}`,
          source,
          raw[name],
          'one of maxQueueSize, timeoutMs, timeoutAction, allowTimeoutOverride',
        );
    const action = raw.timeoutAction;
    if (action !== undefined && action !== 'reject' && action !== 'delay')
      throw invalid(`${key}.timeoutAction`, source, action, "'reject' or 'delay'");
    const override = raw.allowTimeoutOverride;
    if (override !== undefined && typeof override !== 'boolean')
      throw invalid(`${key}.allowTimeoutOverride`, source, override, 'true or false');
    return {
      maxQueueSize:
        raw.maxQueueSize === undefined
          ? base.maxQueueSize
          : integer(`${key}.maxQueueSize`, source, raw.maxQueueSize, 0),
      timeoutMs: raw.timeoutMs === undefined ? base.timeoutMs : integer(`${key}.timeoutMs`, source, raw.timeoutMs, 0),
      timeoutAction: (action as QueuePolicy['timeoutAction'] | undefined) ?? base.timeoutAction,
      allowTimeoutOverride: (override as boolean | undefined) ?? base.allowTimeoutOverride,
    };
  };

  const builtIn: QueuePolicy = {
    maxQueueSize: 0,
    timeoutMs: options.clientTimeoutMs,
    timeoutAction: 'reject',
    allowTimeoutOverride: true,
  };
  const [defaultPolicyValue, defaultPolicySource] = from('defaultQueuePolicy');
  const defaultPolicy = policyOf(defaultPolicyValue, 'defaultQueuePolicy', defaultPolicySource, builtIn);
  const levels = Array.from({ length: priorityLevels }, () => defaultPolicy);
  const [mapValue, mapSource] = from('priorityQueuePolicy');
  if (mapValue !== undefined) {
    if (typeof mapValue !== 'object' || mapValue === null || Array.isArray(mapValue))
      throw invalid('priorityQueuePolicy', mapSource, mapValue, 'a map from level (1 …) to a queue policy');
    for (const [level, policy] of Object.entries(mapValue as Record<string, unknown>)) {
      const n = Number(level);
      if (!/^\d+$/.test(level) || n < 1 || n > priorityLevels)
        throw invalid(
          `priorityQueuePolicy.${level.slice(0, 20)}`,
          mapSource,
          level,
          `a level from 1 to priorityLevels (${priorityLevels})`,
        );
      levels[n - 1] = policyOf(policy, `priorityQueuePolicy.${n}`, mapSource, defaultPolicy);
    }
  }
  return { priorityLevels, defaultPriorityLevel, levels };
}

/**
 * Where one request waits and until when: its level (the default when it names none), and its
 * deadline: the level's timeoutMs, the request's own when allowed and shorter (or the level has
 * none), and a gRPC deadline always. With timeoutAction 'delay', the level's timeout moves the
 * job back instead of answering it; the request's own timeout and deadline still answer it.
 * @throws MARINA_ERR_PRIORITY_INVALID when the priority is outside 1 … priorityLevels.
 */
export function scheduleOf(
  settings: QueueSettings,
  request: RequestScheduling | undefined,
  arrivedAt: number,
  label: string,
): JobSchedule {
  const asked = request?.priority;
  if (asked !== undefined && asked !== 0 && (asked < 1 || asked > settings.priorityLevels))
    throw createServeError.MARINA_ERR_PRIORITY_INVALID(
      settings.priorityLevels === 1
        ? `${label} has one priority level; priority ${asked} does not exist (send 1, or leave it out)`
        : `${label} has priority levels 1 (highest) to ${settings.priorityLevels}; priority ${asked} does not exist`,
      { details: { priority: asked, priorityLevels: settings.priorityLevels } },
    );
  const priority = asked === undefined || asked === 0 ? settings.defaultPriorityLevel : asked;
  const policy = settings.levels[priority - 1]!;
  const levelAt = policy.timeoutMs > 0 ? arrivedAt + policy.timeoutMs : undefined;
  let ownAt =
    policy.allowTimeoutOverride && request?.timeoutMs !== undefined && request.timeoutMs > 0
      ? arrivedAt + request.timeoutMs
      : undefined;
  if (request?.deadlineAt !== undefined) ownAt = Math.min(ownAt ?? Infinity, request.deadlineAt);
  const schedule: JobSchedule = { priority };
  if (policy.timeoutAction === 'delay') {
    if (levelAt !== undefined && (ownAt === undefined || levelAt < ownAt)) schedule.delayAt = levelAt;
    if (ownAt !== undefined) {
      schedule.deadline = ownAt;
      schedule.isRequestDeadline = true;
    }
  } else if (ownAt !== undefined && (levelAt === undefined || ownAt <= levelAt)) {
    schedule.deadline = ownAt;
    schedule.isRequestDeadline = true;
  } else if (levelAt !== undefined) {
    schedule.deadline = levelAt;
  }
  return schedule;
}

/** The request header names (REST) and gRPC metadata keys that carry a request's priority and timeout. */
const PRIORITY_HEADER = 'x-marina-priority';
const TIMEOUT_HEADER = 'x-marina-timeout-ms';

function parseCount(text: unknown, what: 'priority' | 'timeout', unit: string): number | undefined {
  if (text === undefined || text === null) return undefined;
  const value = typeof text === 'string' ? text.trim() : text;
  const n = typeof value === 'number' ? value : /^\d{1,15}$/.test(String(value)) ? Number(value) : Number.NaN;
  if (Number.isInteger(n) && n >= 0) return n;
  const shown = JSON.stringify(typeof text === 'string' ? text.slice(0, 40) : text)?.slice(0, 60);
  if (what === 'priority')
    throw createServeError.MARINA_ERR_PRIORITY_INVALID(
      `the request's priority must be an integer, 1 the highest (0 or absent: the model's default), got ${shown}`,
    );
  throw createServeError.MARINA_ERR_TIMEOUT_INVALID(
    `the request's timeout must be a non-negative integer in ${unit} (0 or absent: none), got ${shown}`,
  );
}

/**
 * A request's priority and timeout from its headers (REST `x-marina-priority`, `x-marina-timeout-ms`;
 * gRPC metadata of the same names) and OIP `parameters` (`priority`, and `timeout` in microseconds,
 * as Triton's). A parameter wins over a header. undefined when the request names neither.
 * @throws MARINA_ERR_PRIORITY_INVALID, MARINA_ERR_TIMEOUT_INVALID (400)
 */
export function requestSchedulingOf(
  headers: Readonly<Record<string, string>> | undefined,
  parameters?: Readonly<Record<string, unknown>>,
): RequestScheduling | undefined {
  const headerPriority = headers?.[PRIORITY_HEADER];
  const headerTimeout = headers?.[TIMEOUT_HEADER];
  const paramPriority = parameters?.priority;
  const paramTimeout = parameters?.timeout;
  if (
    headerPriority === undefined &&
    headerTimeout === undefined &&
    paramPriority === undefined &&
    paramTimeout === undefined
  )
    return undefined;
  const priority = parseCount(paramPriority ?? headerPriority, 'priority', '');
  const timeoutUs = parseCount(paramTimeout, 'timeout', 'microseconds');
  const timeoutMs = timeoutUs !== undefined ? timeoutUs / 1000 : parseCount(headerTimeout, 'timeout', 'ms');
  const scheduling: RequestScheduling = {};
  if (priority !== undefined) scheduling.priority = priority;
  if (timeoutMs !== undefined) scheduling.timeoutMs = timeoutMs;
  return scheduling;
}
