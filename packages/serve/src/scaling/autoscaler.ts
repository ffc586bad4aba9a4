/**
 * Workers that scale themselves between `minWorkers` and `maxWorkers` (TorchServe accepts
 * max_worker but never uses it). A pure policy, `decideWorkerCount`, plus a small controller
 * that samples `registry.stats()` every `intervalMs` and calls `registry.setWorkerCount`.
 *
 * The policy moves one worker at a time and needs the same signal at every sample for a whole
 * window, so a burst does not start a worker that would only finish loading after the burst,
 * and a lull does not stop one that is needed a second later. The core removes a worker only
 * once it is idle, so scaling down never drops a request.
 */
import type { ModelRegistryApi, ModelVersionStats } from '../registry/model-registry-api.ts';
import type { ServerConfig } from '../config/server-config.ts';

/** The policy's knobs. Shown in describe as `autoscaling`. */
export interface AutoscalingKnobs {
  /** How often the controller samples queue depth and busy workers, ms. Default 1000. */
  intervalMs: number;
  /**
   * Queued jobs per live worker above which a model counts as "behind". Default 1: more jobs
   * waiting than workers means every job waits at least one full inference.
   */
  scaleUpQueueDepth: number;
  /** How long a model must stay behind, at every sample, before it gains a worker, ms. Default 3000. */
  scaleUpAfterMs: number;
  /**
   * How long a model must have an empty queue and at least one idle worker, at every sample,
   * before it gives one worker back, ms. Default 60000: a worker costs a full model copy to
   * start again (seconds for large models), so it is kept through short lulls.
   */
  scaleDownIdleMs: number;
}

export const DEFAULT_AUTOSCALING_KNOBS: Readonly<AutoscalingKnobs> = Object.freeze({
  intervalMs: 1000,
  scaleUpQueueDepth: 1,
  scaleUpAfterMs: 3000,
  scaleDownIdleMs: 60_000,
});

/** What the policy sees for one model version. */
export interface ScalingState {
  workers: number;
  minWorkers: number;
  maxWorkers: number;
  /** Epoch ms since which the queue has been deep at every sample; undefined when it is not. */
  behindSinceMs: number | undefined;
  /** Epoch ms since which the model has had spare capacity at every sample; undefined when it has not. */
  idleSinceMs: number | undefined;
  nowMs: number;
  /** Threads one more worker would use (its intraOpNumThreads). */
  threadsPerWorker: number;
  /** Threads the workers of every model use now. */
  threadsInUse: number;
  /** Threads the machine can run without oversubscription (cpuCount). */
  threadBudget: number;
  /** False when the user pinned thread counts explicitly: the budget is then theirs to keep. */
  isThreadBudgetEnforced: boolean;
}

export interface ScalingDecision {
  workers: number;
  reason: 'behind' | 'idle' | 'steady' | 'at-max' | 'at-min' | 'thread-budget' | 'outside-range';
}

/** Pure policy: the worker count a model version should have now. Moves by at most one. */
export function decideWorkerCount(state: ScalingState, knobs: AutoscalingKnobs): ScalingDecision {
  const { workers, minWorkers, maxWorkers, nowMs } = state;
  // Below min or above max is the scale API's business (the core enforces it); never fight it.
  if (workers < minWorkers || workers > maxWorkers) return { workers, reason: 'outside-range' };
  if (state.behindSinceMs !== undefined && nowMs - state.behindSinceMs >= knobs.scaleUpAfterMs) {
    if (workers >= maxWorkers) return { workers, reason: 'at-max' };
    if (state.isThreadBudgetEnforced && state.threadsInUse + state.threadsPerWorker > state.threadBudget) {
      return { workers, reason: 'thread-budget' };
    }
    return { workers: workers + 1, reason: 'behind' };
  }
  if (state.idleSinceMs !== undefined && nowMs - state.idleSinceMs >= knobs.scaleDownIdleMs) {
    if (workers <= minWorkers) return { workers, reason: 'at-min' };
    return { workers: workers - 1, reason: 'idle' };
  }
  return { workers, reason: 'steady' };
}

/** The clock the controller uses; tests pass a fake one. */
export interface AutoscalerClock {
  now(): number;
  setInterval(callback: () => void, ms: number): unknown;
  clearInterval(handle: unknown): void;
}

const realClock: AutoscalerClock = {
  now: () => Date.now(),
  setInterval: (callback, ms) => {
    const handle = setInterval(callback, ms);
    handle.unref();
    return handle;
  },
  clearInterval: (handle) => clearInterval(handle as NodeJS.Timeout),
};

export interface CreateAutoscalerOptions {
  registry: ModelRegistryApi;
  /** cpuCount (the thread budget), ompNumThreads and per-model intraOpNumThreads (pinning) are read. */
  config: Pick<ServerConfig, 'cpuCount' | 'ompNumThreads' | 'models'>;
  knobs?: Partial<AutoscalingKnobs>;
  clock?: AutoscalerClock;
  /** Called after each change the autoscaler makes, or a failed attempt. */
  onScale?: (event: {
    modelName: string;
    modelVersion: string;
    from: number;
    to: number;
    reason: string;
    error?: Error;
  }) => void;
}

export interface Autoscaler {
  readonly knobs: Readonly<AutoscalingKnobs>;
  start(): void;
  stop(): void;
  /** One sampling round (what the timer runs); resolves when its scale calls have finished. */
  tick(): Promise<void>;
  /** The `autoscaling` field of describe for one model version. */
  describe(modelName: string, modelVersion: string): Record<string, unknown>;
}

interface Tracked {
  behindSinceMs: number | undefined;
  idleSinceMs: number | undefined;
  isScaling: boolean;
  last?: { atMs: number; from: number; to: number; reason: string };
}

const keyOf = (s: { modelName: string; modelVersion: string }) => `${s.modelName}\u0000${s.modelVersion}`;

/** Starts nothing until `start()`. Only model versions with maxWorkers > minWorkers are touched. */
export function createAutoscaler(options: CreateAutoscalerOptions): Autoscaler {
  const { registry, config } = options;
  const knobs: Readonly<AutoscalingKnobs> = Object.freeze({ ...DEFAULT_AUTOSCALING_KNOBS, ...options.knobs });
  const clock = options.clock ?? realClock;
  const tracked = new Map<string, Tracked>();
  let handle: unknown;
  let inTick: Promise<void> | undefined;

  const isPinned = (s: ModelVersionStats): boolean =>
    config.ompNumThreads !== undefined || config.models[s.modelName]?.[s.modelVersion]?.intraOpNumThreads !== undefined;

  const runTick = async (): Promise<void> => {
    const nowMs = clock.now();
    const stats = registry.stats();
    // Threads of workers still leaving count too: a stuck native run() holds its cores until it returns.
    const threadsInUse = stats.reduce((sum, s) => sum + (s.threadsInUse ?? s.workers * s.intraOpNumThreads), 0);
    let plannedThreads = threadsInUse;
    const seen = new Set<string>();
    const calls: Promise<void>[] = [];
    for (const s of stats) {
      const key = keyOf(s);
      seen.add(key);
      let t = tracked.get(key);
      if (!t) {
        t = { behindSinceMs: undefined, idleSinceMs: undefined, isScaling: false };
        tracked.set(key, t);
      }
      const isBehind = s.workers > 0 && s.queueDepth > knobs.scaleUpQueueDepth * s.workers;
      const isIdle = s.queueDepth === 0 && s.busyWorkers < s.workers;
      t.behindSinceMs = isBehind ? (t.behindSinceMs ?? nowMs) : undefined;
      t.idleSinceMs = isIdle ? (t.idleSinceMs ?? nowMs) : undefined;
      if (t.isScaling || s.maxWorkers <= s.minWorkers) continue;
      const decision = decideWorkerCount(
        {
          workers: s.workers,
          minWorkers: s.minWorkers,
          maxWorkers: s.maxWorkers,
          behindSinceMs: t.behindSinceMs,
          idleSinceMs: t.idleSinceMs,
          nowMs,
          threadsPerWorker: s.intraOpNumThreads,
          threadsInUse: plannedThreads,
          threadBudget: config.cpuCount,
          isThreadBudgetEnforced: !isPinned(s),
        },
        knobs,
      );
      if (decision.workers === s.workers) continue;
      plannedThreads += (decision.workers - s.workers) * s.intraOpNumThreads;
      // Restart both windows: the next move needs a full window of evidence with the new count.
      t.behindSinceMs = undefined;
      t.idleSinceMs = undefined;
      t.isScaling = true;
      const from = s.workers;
      const entry = t;
      calls.push(
        registry
          .setWorkerCount(s.modelName, s.modelVersion, decision.workers)
          .then(
            () => {
              entry.last = { atMs: nowMs, from, to: decision.workers, reason: decision.reason };
              options.onScale?.({
                modelName: s.modelName,
                modelVersion: s.modelVersion,
                from,
                to: decision.workers,
                reason: decision.reason,
              });
            },
            (error: Error) => {
              options.onScale?.({
                modelName: s.modelName,
                modelVersion: s.modelVersion,
                from,
                to: decision.workers,
                reason: decision.reason,
                error,
              });
            },
          )
          .finally(() => {
            entry.isScaling = false;
          }),
      );
    }
    for (const key of tracked.keys()) if (!seen.has(key)) tracked.delete(key);
    await Promise.all(calls);
  };

  const autoscaler: Autoscaler = {
    knobs,
    start() {
      if (handle !== undefined) return;
      handle = clock.setInterval(() => {
        // A slow scale call must not stack rounds; runTick skips versions still scaling anyway.
        if (inTick) return;
        inTick = runTick().finally(() => {
          inTick = undefined;
        });
      }, knobs.intervalMs);
    },
    stop() {
      if (handle !== undefined) clock.clearInterval(handle);
      handle = undefined;
    },
    tick: runTick,
    describe(modelName, modelVersion) {
      const s = registry.stats().find((x) => x.modelName === modelName && x.modelVersion === modelVersion);
      const t = tracked.get(keyOf({ modelName, modelVersion }));
      return {
        enabled: handle !== undefined && s !== undefined && s.maxWorkers > s.minWorkers,
        ...knobs,
        threadBudget: config.cpuCount,
        isThreadBudgetEnforced: s ? !isPinned(s) : config.ompNumThreads === undefined,
        ...(t?.last
          ? {
              lastScaledAt: new Date(t.last.atMs).toISOString(),
              lastScaledFrom: t.last.from,
              lastScaledTo: t.last.to,
              lastReason: t.last.reason,
            }
          : {}),
      };
    },
  };
  return autoscaler;
}
