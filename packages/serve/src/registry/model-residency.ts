import type { EventEmitter } from 'node:events';
import { isMarinaError } from '@marina/errors';
import { createServeError } from '../errors.ts';
import { readProcessMemoryBytes } from '../metrics/process-memory.ts';
import type { LoadReason, RegistryEvents } from './model-registry-api.ts';
import { nextUse, type ModelVersion } from '../scheduling/model-version.ts';

/** Why a version leaves memory: marina_model_evictions_total counts 'evicted'. */
export type UnloadReason = 'evicted' | 'idle' | 'api';

export interface ModelResidencyOptions {
  /** model_memory_budget, bytes; undefined: no budget (loads never wait, nothing is evicted). */
  memoryBudgetBytes: number | undefined;
  /** Every registered version (the registry owns them). */
  versions(): Iterable<ModelVersion>;
  /** Starts `workers` workers of the version; resolves with how many became READY. */
  startWorkers(version: ModelVersion, workers: number): Promise<number>;
  /**
   * Stops every worker of the version (grace for running batches); resolves once their threads
   * ended or were abandoned, or, `isRecycled`, became spare threads for the load that evicted it.
   */
  stopWorkers(version: ModelVersion, options?: { isRecycled?: boolean }): Promise<void>;
  events: EventEmitter<RegistryEvents>;
  log: (level: 'info' | 'warn' | 'error', message: string) => void;
  /** The process's memory now, bytes (default: the resident set, process.memoryUsage.rss()). */
  readMemoryBytes?: () => number;
  /** A loaded version's first batch has run (it is warm): what waited for it to finish may start. */
  onFirstBatch?: (version: ModelVersion) => void;
}

/** Loads whose process-memory deltas overlap: measured together, split by their estimates. */
interface MeasureGroup {
  baseBytes: number;
  active: number;
  done: ModelVersion[];
  /** An unload ended while the group measured: the process shrank by memory that is not the group's. */
  isTainted: boolean;
}

/**
 * The one owner of which model versions are in memory. A version is loaded (its workers started,
 * sessions created) on demand, at start-up or by the API; under `model_memory_budget` a load first
 * unloads versions that are not pinned and have nothing waiting or running (the least asked-for and
 * least recently used first: #idleInEvictionOrder),
 * then, when those are not enough, busy ones that have been resident twice as long as their load
 * took (#isEvictableBusy), and waits (up to the version's startupTimeout) when none can go. Versions nobody called for their
 * `idleUnloadMs` are unloaded. What each load adds to the process's memory is measured (before and
 * after; loads that overlap share one measurement, split by their estimates) and is what the budget
 * counts from then on.
 */
export class ModelResidency {
  readonly memoryBudgetBytes: number | undefined;
  readonly #options: ModelResidencyOptions;
  readonly #readMemory: () => number;
  readonly #loads = new Map<ModelVersion, Promise<void>>();
  readonly #unloads = new Map<ModelVersion, Promise<void>>();
  /** Versions whose load has made room and holds its share of the budget before it is resident. */
  readonly #reserved = new Set<ModelVersion>();
  /**
   * Resident versions whose first batch has not finished: they still count their load's
   * reservation. onnxruntime touches the memory-mapped weights and sizes its arena at the first
   * run, not at session creation (a ResNet-50 of 102 MB adds 40–80 MB at its load and the rest at
   * its first run, measured), so until then neither its measure nor the process's memory shows
   * what it will hold.
   */
  readonly #warming = new Set<ModelVersion>();
  readonly #idleTimers = new Map<ModelVersion, ReturnType<typeof setTimeout>>();
  readonly #loadedAt = new Map<ModelVersion, number>();
  /**
   * How long each version's last load took once room was made, ms, kept after its unload: the busy
   * rule reads it while the version is resident (with #loadedAt), #agingMs for its next load.
   */
  readonly #loadMs = new WeakMap<ModelVersion, number>();
  /** Versions whose last load was measured alone (no other load or unload in its group): their first batch completes a clean measure. */
  readonly #cleanLoads = new WeakSet<ModelVersion>();
  /**
   * What the process showed of each version's last load, bytes (its share of its group's growth,
   * at least 0): what a loaded version before its first batch has already added. residentBytes is
   * not that when the load's measure was tainted (it is then at least the estimate).
   */
  readonly #loadGrowth = new WeakMap<ModelVersion, number>();
  #group: MeasureGroup | undefined;
  /** Counts loads and unloads: a first-batch measure is only kept when nothing else moved meanwhile. */
  #moves = 0;
  /** Versions whose last load could not be measured and kept the count of the load before (see #endMeasure). */
  readonly #keptCounts = new WeakSet<ModelVersion>();
  /** What each version's first batch added to the process the last time that could be measured, bytes. */
  readonly #firstBatchBytes = new WeakMap<ModelVersion, number>();
  readonly #firstBatch = new Map<ModelVersion, { onProgress: () => void; onBatch: () => void }>();
  /** The process's memory with no model in it (read whenever nothing is loaded, loading or unloading). */
  #baselineBytes: number | undefined;
  /** Watches the process's memory while a budget is set and models are resident (see #watch). */
  #watchTimer: ReturnType<typeof setInterval> | undefined;
  #isTrimming = false;
  /** #warnOverhead has spoken. */
  #isOverheadWarned = false;
  #isClosed = false;
  /**
   * Loads waiting for room, oldest first. Only the oldest may take free room or evict idle
   * versions: without the order, the room one load made by evicting went to another load woken by
   * the same unload (its wake-up ran before the evicting load's own continuation), and under Zipf
   * traffic a rarely used model's load waited 14 s for room while dozens of later ones got it
   * (logged). The strict order has a cost: with models of very different sizes, a small model's
   * load waits behind a large one that waits for a busy model (letting it take the free room the
   * first cannot use brought the starvation back, because a model not yet measured counts its
   * estimate, about twice a measured one's: bench run s8-12).
   */
  readonly #roomQueue: ModelVersion[] = [];
  /** The loads waiting in #changed: woken at the next change, or when the oldest one leaves the room queue. */
  readonly #turnWaiters = new Set<() => void>();
  /**
   * The versions whose 'progress' #wakeWaiters listens to while a load waits, as it does to the
   * registry's events (undefined: no load waits): one listener on each however many loads wait. A listener per
   * waiting load on every version made Node warn of a leak (MaxListenersExceededWarning) hundreds of
   * times a bench run, with eleven loads waiting at once under Zipf traffic.
   */
  #listenedVersions: Set<ModelVersion> | undefined;
  readonly #wakeWaiters = (): void => {
    for (const wake of [...this.#turnWaiters]) wake();
  };

  constructor(options: ModelResidencyOptions) {
    this.#options = options;
    this.memoryBudgetBytes = options.memoryBudgetBytes;
    this.#readMemory = options.readMemoryBytes ?? readProcessMemoryBytes;
  }

  /**
   * What `version` is counted for: its latest measure (its load and first batch, or what its last
   * unload gave back), else its estimate. A measure taken while other models moved can come out
   * high or low; the budget does not rely on it alone (usedBytes also reads the process), and the
   * largest one ever taken would keep a model counted at a size it does not have, so models that
   * fit together would evict each other.
   */
  needOf(version: ModelVersion): number {
    return version.residentBytes > 0 ? version.residentBytes : version.estimatedBytes;
  }

  /**
   * Bytes the budget counts now: what the process really holds above its memory without models,
   * plus what the loads under way will still add (#inFlightBytes). The process's own memory misses
   * nothing a resident model holds (its arena at larger batches, the decoded inputs a worker holds,
   * the allocator's slack), where per-model measures taken while other models load and serve are
   * noisy both ways. Before that memory was first read (no load yet), the models' counted sizes.
   */
  usedBytes(): number {
    const observed = this.observedModelBytes();
    return observed === undefined ? this.#countedBytes() : observed + this.#inFlightBytes();
  }

  /**
   * What loads that hold room will still add, bytes: a load whose workers are starting counts its
   * whole need (part of it may show in the process's memory already: counted twice, never missed);
   * a loaded version before its first batch counts its need less what the process showed of its
   * load. (Less its residentBytes, a load measured beside an unload, counted at its estimate, left
   * its first batch's arena, about 100 MB for a ResNet-50, counted nowhere while loads overlapped.)
   */
  #inFlightBytes(): number {
    let bytes = 0;
    for (const v of this.#reserved) bytes += this.#loadNeedOf(v);
    // A load leaves #reserved before it joins #warming (#load), so none is counted twice.
    for (const v of this.#warming)
      bytes += Math.max(0, this.#loadNeedOf(v) - (this.#loadGrowth.get(v) ?? v.residentBytes));
    return bytes;
  }

  /**
   * What the process holds now above its memory without models (Node, the HTTP stack), bytes;
   * undefined before that memory was first read (no load yet). That baseline is read whenever no
   * model is in memory and none is moving, and only ever lowered: what comes with the models stays
   * counted once none is loaded (onnxruntime's one-time cost in the process, 25–40 MB, see
   * docs/explanation/memory.md, and what the allocator has not given back yet). Raised to such a
   * reading, it made four ResNet-50s look like they fit where three did (measured: a reading 142 MiB
   * above the first, taken just after the last model left).
   */
  observedModelBytes(): number | undefined {
    const now = this.#readMemory();
    if (this.#isEmpty()) {
      this.#baselineBytes = Math.min(now, this.#baselineBytes ?? now);
      return now - this.#baselineBytes;
    }
    return this.#baselineBytes === undefined ? undefined : Math.max(0, now - this.#baselineBytes);
  }

  /** No model holds memory: none resident or unloading, and no load past making room. */
  #isEmpty(): boolean {
    if (this.#unloads.size > 0 || this.#reserved.size > 0) return false;
    for (const v of this.#options.versions()) if (this.#holdsMemory(v)) return false;
    return true;
  }

  /** Bytes the models are counted for: resident, loading (once room was made) and unloading versions. */
  #countedBytes(): number {
    let used = 0;
    for (const v of this.#options.versions())
      if (this.#holdsMemory(v))
        used += this.#reserved.has(v) || this.#warming.has(v) ? this.#loadNeedOf(v) : this.needOf(v);
    return used;
  }

  /** The versions #holdsMemory says hold memory. */
  #versionsInMemory(): ModelVersion[] {
    return [...this.#options.versions()].filter((v) => this.#holdsMemory(v));
  }

  /** Whether the version holds (or has room made for) memory an unload would give back. */
  #holdsMemory(v: ModelVersion): boolean {
    const state = v.state;
    return (
      this.#reserved.has(v) ||
      state === 'resident' ||
      state === 'unloading' ||
      // A load still making room holds nothing yet; workers started outside a load (a scale call) do.
      (state === 'loading' && v.transition === undefined)
    );
  }

  /**
   * The resident log line's account of what a load counts against model_memory_budget, and from
   * which measure (#loadNeedOf); empty without a budget.
   */
  #countedNeed(version: ModelVersion): string {
    if (this.memoryBudgetBytes === undefined) return '';
    const source =
      version.servingBytes > 0
        ? 'its serving measure'
        : version.residentBytes > version.estimatedBytes
          ? "its last load's measure"
          : 'its estimate from its files';
    return `; counted ${mib(this.#loadNeedOf(version))} MiB of model_memory_budget (${source})`;
  }

  /**
   * What a load holds from making room until its first batch has run (#reserved, #warming): its
   * estimate, or its measure when that is larger. Session creation alone shows little of it (a
   * ResNet-50 of 102 MB adds 40–80 MB); the mapped weights and the arena arrive at the first run.
   */
  #loadNeedOf(version: ModelVersion): number {
    return version.servingBytes || Math.max(this.needOf(version), version.estimatedBytes);
  }

  /**
   * What unloading the version is expected to give back, bytes: the most any of its measures or
   * its estimate says. A measure taken at its load alone (before its first batch, or split with
   * other loads) can be a fifth of what it holds serving; counting a victim too small would keep a
   * load waiting beside idle models it could evict. Counted too large, the load evicts one model too
   * few and looks again at the process's memory.
   */
  #freedBy(version: ModelVersion): number {
    return Math.max(version.servingBytes, this.needOf(version), version.estimatedBytes);
  }

  /** Measured bytes of resident versions only (marina_resident_bytes). */
  residentBytes(): number {
    let bytes = 0;
    for (const v of this.#options.versions()) if (v.state === 'resident') bytes += this.needOf(v);
    return bytes;
  }

  /**
   * Refuses a version that could never be loaded under the budget: by a clean measure of what it
   * holds serving (its load and first batch with nothing else moving), else by its estimate. Never
   * by a measure taken beside other loads: one that caught other models' growth (663 MiB for a
   * ResNet-50 under churn, measured) refused every later request to a model that fits.
   * @throws MARINA_ERR_MODEL_LARGER_THAN_BUDGET (400)
   */
  assertFits(version: ModelVersion): void {
    const budget = this.memoryBudgetBytes;
    const need = version.servingBytes || version.estimatedBytes;
    if (budget === undefined || need <= budget) return;
    throw createServeError.MARINA_ERR_MODEL_LARGER_THAN_BUDGET(
      `${version.label} needs about ${mib(need)} MiB (${version.servingBytes > 0 ? 'measured serving' : `estimated for ${Math.max(1, version.minWorkers)} worker(s) from its model files`}), more than the whole model_memory_budget of ${mib(budget)} MiB; raise model_memory_budget or give it fewer workers`,
      { details: { neededBytes: need, memoryBudgetBytes: budget } },
    );
  }

  /** Whether some version out of memory would load now without evicting anything (no budget: always). */
  hasRoomForLoad(): boolean {
    const budget = this.memoryBudgetBytes;
    if (budget === undefined) return true;
    const used = this.usedBytes();
    for (const v of this.#options.versions())
      if (v.state === 'registered' && used + this.#loadNeedOf(v) <= budget) return true;
    return false;
  }

  /** Whether the version fits beside what is resident now without evicting anything (start-up loading). */
  fitsNow(version: ModelVersion): boolean {
    return (
      this.memoryBudgetBytes === undefined || this.usedBytes() + this.#loadNeedOf(version) <= this.memoryBudgetBytes
    );
  }

  /**
   * Makes the version resident; concurrent calls share one load. Resolves at once when it is
   * resident already.
   * @throws MARINA_ERR_MEMORY_BUDGET_FULL (503) when no room came free within its startupTimeout,
   *   MARINA_ERR_MODEL_LARGER_THAN_BUDGET, MARINA_ERR_WORKER_START_FAILED.
   */
  load(version: ModelVersion, reason: LoadReason): Promise<void> {
    const pending = this.#loads.get(version);
    if (pending) return pending;
    if (version.state === 'resident' && !this.#unloads.has(version)) return Promise.resolve();
    const load = this.#load(version, reason).finally(() => this.#loads.delete(version));
    this.#loads.set(version, load);
    return load;
  }

  async #load(version: ModelVersion, reason: LoadReason): Promise<void> {
    const unloading = this.#unloads.get(version);
    if (unloading) await unloading;
    if (this.#isClosed)
      throw createServeError.MARINA_ERR_SERVER_CLOSING('the server is shutting down and loads no models');
    if (version.state === 'resident') return;
    const startedAt = performance.now();
    version.setTransition('loading');
    this.#emit(version, 'loading', reason);
    let isMeasuring = false;
    try {
      this.assertFits(version);
      // What the load counts against the budget, said when it is resident (the log then shows
      // whether a load grew past what it was admitted with).
      const counted = this.#countedNeed(version);
      await this.#makeRoom(version, reason);
      const workers = Math.max(1, version.minWorkers);
      if (version.maxWorkers < workers) version.maxWorkers = workers;
      version.plannedWorkers = workers;
      this.#beginMeasure();
      isMeasuring = true;
      const workersStartedAt = performance.now();
      const roomMs = workersStartedAt - startedAt;
      const ready = await this.#options.startWorkers(version, workers);
      if (ready === 0) {
        const cause = version.pool.lastError;
        throw createServeError.MARINA_ERR_WORKER_START_FAILED(
          `Failed to start workers for model ${version.modelName} version: ${version.modelVersion}: ${cause?.message ?? 'unknown error'}`,
          { cause },
        );
      }
      isMeasuring = false;
      this.#endMeasure(version);
      this.#loadedAt.set(version, Date.now());
      // A load by the API or at start-up is a use (#evictionOrder); one on demand follows its requests' uses.
      if (reason !== 'demand') version.lastUse = nextUse();
      this.#loadMs.set(version, performance.now() - workersStartedAt);
      version.setTransition(undefined);
      // From here its load's measure is in the process's memory; what is still to come, #warming counts.
      this.#reserved.delete(version);
      this.#warming.add(version);
      this.#measureFirstBatch(version);
      // A first load counts its estimate until measured: when the measure came out larger, the
      // idle versions (#idleInEvictionOrder) make up the difference.
      await this.#trimToBudget(version);
      this.#watch();
      this.#armIdle(version);
      this.#options.log(
        'info',
        `${version.label} resident (${reason}) in ${Math.round(performance.now() - startedAt)} ms: room ${Math.round(roomMs)} ms, workers ${Math.round(this.#loadMs.get(version) ?? 0)} ms, ${version.queue.waiting} waiting${counted}`,
      );
      this.#emit(version, 'resident', reason, {
        residentBytes: this.needOf(version),
        loadMs: performance.now() - startedAt,
        waitingRequests: version.queue.waiting,
      });
    } catch (error) {
      if (isMeasuring) this.#endMeasure(undefined);
      version.plannedWorkers = 0;
      if (version.pool.target > 0) await this.#options.stopWorkers(version);
      version.setTransition(undefined);
      const e = isMarinaError(error) ? error : createServeError.MARINA_ERR_INTERNAL(String(error), { cause: error });
      // The requests that waited for this load cannot be served by it: answer them now.
      version.failQueued(e);
      this.#emit(version, 'registered', 'failed');
      this.#options.log('error', `${version.label} was not loaded (${reason}): ${e.message}`);
      throw e;
    } finally {
      this.#reserved.delete(version);
    }
  }

  /**
   * Unloads until the version fits the budget: idle versions first (#idleInEvictionOrder), never a pinned version,
   * one that is loading, or one with anything waiting or running. When that is not enough, waits
   * for a change (a version goes idle, an unload ends) until the version's startupTimeout.
   */
  async #makeRoom(version: ModelVersion, reason: LoadReason): Promise<void> {
    const budget = this.memoryBudgetBytes;
    if (budget === undefined) {
      this.#reserved.add(version);
      return;
    }
    // The loop's first usedBytes() reads the baseline when nothing is in memory yet, before this load adds anything.
    // A version whose load passes through more than the budget (its measure fits: assertFits) may
    // still load once everything else that can go has gone.
    const need = Math.min(this.#loadNeedOf(version), budget);
    const roomSince = performance.now();
    const deadline = roomSince + version.settings.startupTimeoutMs;
    this.#roomQueue.push(version);
    try {
      await this.#takeRoom(version, reason, need, budget, roomSince, deadline);
    } finally {
      const at = this.#roomQueue.indexOf(version);
      if (at >= 0) this.#roomQueue.splice(at, 1);
      if (at === 0) this.#wakeWaiters();
    }
  }

  /** #makeRoom's wait, in the room queue's order (see #roomQueue). */
  async #takeRoom(
    version: ModelVersion,
    reason: LoadReason,
    need: number,
    budget: number,
    roomSince: number,
    deadline: number,
  ): Promise<void> {
    // Room this load made by evicting busy versions is its own, whatever its place in the queue.
    let hasEvicted = false;
    for (;;) {
      const isFirst = this.#roomQueue[0] === version;
      const free = budget - this.usedBytes();
      const mayTakeFree = isFirst || hasEvicted;
      hasEvicted = false;
      if (mayTakeFree && need <= free) {
        // Held at once: another load woken by the same change must not count this room as free.
        this.#reserved.add(version);
        return;
      }
      if (isFirst && this.#isEmpty()) {
        // No model is in memory, so no unload can make room: what fills the budget is the process's
        // own (allocator slack, garbage its threads have not collected yet), counted because the
        // next load reuses part of it. Waiting here waited for a garbage collection: in a bench
        // run (s9) every load stalled 53 s with nothing loaded, and 32 clients' requests with
        // them. The oldest load goes; the watch then keeps one model at least (#trimToBudget).
        this.#warnOverhead(version, need, free);
        this.#reserved.add(version);
        return;
      }
      const now = performance.now();
      // Free room and idle versions go to the oldest load first; a later one may only evict busy versions it is admitted to.
      const idle = isFirst
        ? this.#idleInEvictionOrder([...this.#options.versions()].filter((v) => v !== version && this.#isEvictable(v)))
        : [];
      // Busy ones after the idle ones, only those that weigh less than this version (busyWeight: its
      // demand times its waiting requests): a model called once must not push out one called every
      // second, whose waiting requests would bring it straight back (TinyLFU's admission rule). Each
      // aging period (#agingMs) the load has waited doubles its weight, so a load that weighs 16
      // times less than a busy one may evict it after four periods (before aging: after one,
      // whatever the busy one's count; under Zipf traffic the most asked-for model, 37% of the
      // requests, was then evicted with 20 waiting again and again, bench run s8-3). An idle model
      // goes whatever its count: holding a load back for it made a lone request to a rarely used
      // model wait seconds on a quiet server (measured). A load asked for by the API or at start-up
      // is not held back. Lightest first, nothing running before running.
      const isAlwaysAdmitted = reason !== 'demand';
      const periods = Math.floor((now - roomSince) / this.#agingMs(version));
      const wanted = busyWeight(version, now) * 2 ** Math.min(30, periods);
      const isAdmitted = (v: ModelVersion) => isAlwaysAdmitted || busyWeight(v, now) < wanted;
      const busy = [...this.#options.versions()]
        .filter((v) => v !== version && this.#isEvictableBusy(v) && isAdmitted(v))
        .sort(
          (a, b) => busyWeight(a, now) - busyWeight(b, now) || Number(a.runningJobs > 0) - Number(b.runningJobs > 0),
        );
      const chosen: ModelVersion[] = [];
      const usable = isFirst ? free : 0;
      let freed = 0;
      for (const c of [...idle, ...busy]) {
        if (need <= usable + freed) break;
        chosen.push(c);
        freed += this.#freedBy(c);
      }
      // When every model in memory is idle and unloading them all would still not make room by the
      // count, the process's own memory is the rest: the oldest load unloads them and goes alone
      // (the branch above) rather than wait beside idle models for room no unload can make. Busy
      // ones finish their work first: their wait ends by aging or at startupTimeout.
      const isEvictingAll =
        isFirst && idle.length > 0 && this.#versionsInMemory().every((v) => v === version || idle.includes(v));
      if (isEvictingAll && need > usable + freed) {
        hasEvicted = true;
        await Promise.all(
          idle.map((c) => this.unload(c, 'evicted', { isRecycled: true, because: `to load ${version.label}` })),
        );
        continue;
      }
      if (chosen.length > 0 && need <= usable + freed) {
        // Their threads leave their models and wait for this load (and the next): it skips a new
        // thread's start, most of a cold load's CPU on a busy machine (spare-threads.ts).
        hasEvicted = true;
        await Promise.all(
          chosen.map((c) => this.unload(c, 'evicted', { isRecycled: true, because: `to load ${version.label}` })),
        );
        continue;
      }
      const left = deadline - performance.now();
      // A busy version may become evictable by time alone (#isEvictableBusy, aging): look again then.
      const untilBusyEvictable = Math.min(
        this.#untilBusyEvictableMs(version),
        isAlwaysAdmitted ? Number.POSITIVE_INFINITY : roomSince + (periods + 1) * this.#agingMs(version) - now,
      );
      if (left > untilBusyEvictable) {
        await this.#changed(untilBusyEvictable);
        continue;
      }
      if (left <= 0 || !(await this.#changed(left)))
        throw createServeError.MARINA_ERR_MEMORY_BUDGET_FULL(
          `${version.label} needs about ${mib(need)} MiB to load, and model_memory_budget (${mib(budget)} MiB, ${mib(this.usedBytes())} MiB in use) stayed full of models that are pinned, busy or loading for its startupTimeout (${version.settings.startupTimeoutMs / 1000} s). Retry later, unpin a model, or raise model_memory_budget`,
          { details: { neededBytes: need, memoryBudgetBytes: budget, usedBytes: this.usedBytes() } },
        );
    }
  }

  /** Unloads idle versions (#idleInEvictionOrder; never `keep`), then busy ones, while more than the budget is in use. */
  async #trimToBudget(keep: ModelVersion | undefined, options: { isWatch?: boolean } = {}): Promise<void> {
    const budget = this.memoryBudgetBytes;
    if (budget === undefined) return;
    for (;;) {
      // The watch acts on what the process really holds; after a load, on what is counted too.
      const used = options.isWatch ? (this.observedModelBytes() ?? 0) : this.usedBytes();
      if (used <= budget) return;
      const others = [...this.#options.versions()].filter((v) => v !== keep);
      // Weighed at one instant: a comparator whose weights decay between calls is not consistent.
      const now = performance.now();
      const byWeight = (a: ModelVersion, b: ModelVersion) => busyWeight(a, now) - busyWeight(b, now);
      // Idle ones first. When the process itself is over the budget, busy ones too (the budget is a
      // bound, not a hope, when every model is busy): the one that weighs least (busyWeight), however
      // recently it was loaded. By a load's rule (#isEvictableBusy: resident at least a second) the
      // watch often had one candidate, the model resident longest, and under Zipf traffic that was
      // the most asked-for one, evicted with 12-23 requests waiting every 5-10 s (bench run s13 q2).
      const lru =
        this.#idleInEvictionOrder(others.filter((v) => this.#isEvictable(v)))[0] ??
        (options.isWatch ? others.filter((v) => this.#isTrimmableBusy(v)).sort(byWeight)[0] : undefined);
      if (lru === undefined) return;
      // The last model in memory stays: what is over the budget then is the process's own memory
      // (the model fits the budget by itself: assertFits), which its unload would not give back,
      // and its next request would load it again at once.
      if (options.isWatch && this.#versionsInMemory().length <= 1) return;
      await this.unload(lru, 'evicted', {
        because: options.isWatch
          ? 'as the models grew past it'
          : `as ${keep?.label ?? 'a load'} measured more than it was counted for`,
      });
    }
  }

  /** Says once that the process alone held the budget while no model was in memory (see #takeRoom). */
  #warnOverhead(version: ModelVersion, need: number, free: number): void {
    if (this.#isOverheadWarned) return;
    this.#isOverheadWarned = true;
    const budget = this.memoryBudgetBytes ?? 0;
    this.#options.log(
      'warn',
      `${version.label} needs about ${mib(need)} MiB and model_memory_budget (${mib(budget)} MiB) had ${mib(Math.max(0, free))} MiB free with no model in memory: the server itself holds the rest (allocator slack, uncollected garbage). It loads anyway, one model at a time while this lasts; raise model_memory_budget by what the process holds above its start (marina_resident_bytes against process_resident_memory_bytes) to keep several models resident. Said once`,
    );
  }

  /** Resident, not pinned, neither loading nor unloading: a version an unload may take, idle or busy. */
  #isUnloadable(v: ModelVersion): boolean {
    return v.state === 'resident' && !v.pinned && !this.#loads.has(v) && !this.#unloads.has(v);
  }

  /** A busy version the memory watch may unload when the process is over the budget (#trimToBudget). */
  #isTrimmableBusy(v: ModelVersion): boolean {
    return this.#isUnloadable(v) && v.pendingJobs > 0;
  }

  #isEvictable(v: ModelVersion): boolean {
    return this.#isUnloadable(v) && v.pendingJobs === 0;
  }

  /** ms until the first busy version (not `except`) becomes evictable by #isEvictableBusy's time rule; Infinity when none will. */
  #untilBusyEvictableMs(except: ModelVersion): number {
    let soonest = Number.POSITIVE_INFINITY;
    for (const v of this.#options.versions()) {
      if (v === except || !this.#isUnloadable(v)) continue;
      const loadedAt = this.#loadedAt.get(v);
      const loadMs = this.#loadMs.get(v);
      if (loadedAt === undefined || loadMs === undefined) continue;
      // Past it already: it was a candidate this time round.
      const remaining = loadedAt + this.#busyRentMs(loadMs) - Date.now();
      if (remaining > 0) soonest = Math.min(soonest, remaining);
    }
    return soonest;
  }

  /**
   * A version with requests waiting or running may make room too, once it has been resident at
   * least twice as long as its load took (ski rental: a version never spends more time being
   * loaded than serving, so two loads cannot evict each other back and forth). Without this a load
   * under steady traffic waits for some version to go idle, which with many clients is seconds.
   * Its running batch finishes (within unload_grace_seconds); its waiting requests stay queued and
   * load it again.
   */
  #isEvictableBusy(v: ModelVersion): boolean {
    if (!this.#isTrimmableBusy(v)) return false;
    const loadedAt = this.#loadedAt.get(v);
    const loadMs = this.#loadMs.get(v);
    return loadedAt !== undefined && loadMs !== undefined && Date.now() - loadedAt >= this.#busyRentMs(loadMs);
  }

  /**
   * How long a busy version stays before it may make room: twice its load, at least BUSY_MIN_MS. A
   * load that takes a recycled thread is 15–70 ms (measured), and twice that let the most asked-for
   * models be evicted with 14–17 requests waiting, again and again, under 32 clients (logged).
   */
  #busyRentMs(loadMs: number): number {
    return Math.max(BUSY_MIN_MS, 2 * loadMs);
  }

  /** A load's aging period (each doubles the count it outweighs, see #takeRoom): AGING_LOADS of its last load, at least AGING_MIN_MS. */
  #agingMs(version: ModelVersion): number {
    return Math.max(AGING_MIN_MS, AGING_LOADS * (this.#loadMs.get(version) ?? 0));
  }

  /**
   * Idle versions in the order they are evicted: least recently used first, where a use is a
   * request's arrival, or a load asked for by the API or at start-up. A load on demand is not a
   * use of its own: its requests arrived before it, and counting it made a model loaded for one
   * request look fresher than the model asked for every quarter second, whose last request came
   * after that one's (bench run s1 at two thirds of the memory: the second most asked-for model was
   * evicted 13 times in 24 s, each time asked for again within a second).
   */
  readonly #evictionOrder = (a: ModelVersion, b: ModelVersion): number => (a.lastUse ?? 0) - (b.lastUse ?? 0);

  /**
   * Idle candidates in the order they go: those asked for about as little as the least asked-for
   * one (under FREQUENT_FACTOR times its demand count, or a count of one) first, least recently
   * used first; then the others, least recently used first. Least recently used alone took a model
   * asked for every quarter second whenever it was idle for a moment, between two batches, while
   * models asked for once stayed (under Zipf traffic the second most asked-for model was loaded
   * again 14 times a phase). The count halves every 10 s, so a model nobody asks for any more drops
   * back among the others within half a minute.
   */
  #idleInEvictionOrder(candidates: ModelVersion[]): ModelVersion[] {
    const now = performance.now();
    const demand = new Map(candidates.map((v) => [v, v.demand.valueAt(now)]));
    const bar = FREQUENT_FACTOR * Math.max(1, Math.min(...demand.values()));
    const isFrequent = (v: ModelVersion) => Number(demand.get(v)! >= bar);
    return candidates.sort((a, b) => isFrequent(a) - isFrequent(b) || this.#evictionOrder(a, b));
  }

  #lastUse(v: ModelVersion): number {
    return Math.max(v.lastUsedAt ?? 0, this.#loadedAt.get(v) ?? 0);
  }

  /** Resolves true at the next change that may free room (a version's work or residency moved), false after `ms`. */
  #changed(ms: number): Promise<boolean> {
    return new Promise((resolve) => {
      const done = (value: boolean) => {
        clearTimeout(timer);
        this.#turnWaiters.delete(onChange);
        if (this.#turnWaiters.size === 0) this.#unlisten();
        resolve(value);
      };
      const onChange = () => done(true);
      const timer = setTimeout(() => done(false), ms);
      this.#turnWaiters.add(onChange);
      this.#listen();
    });
  }

  /** Listens for changes while loads wait (#wakeWaiters): once on the registry, once on each version (those registered since too). */
  #listen(): void {
    if (this.#listenedVersions === undefined) {
      this.#listenedVersions = new Set();
      this.#options.events.on('residency', this.#wakeWaiters);
      this.#options.events.on('changed', this.#wakeWaiters);
    }
    for (const v of this.#options.versions())
      if (!this.#listenedVersions.has(v)) {
        this.#listenedVersions.add(v);
        v.on('progress', this.#wakeWaiters);
      }
  }

  /** No load waits any more: stops listening (#listen). */
  #unlisten(): void {
    if (this.#listenedVersions === undefined) return;
    for (const v of this.#listenedVersions) v.off('progress', this.#wakeWaiters);
    this.#options.events.off('residency', this.#wakeWaiters);
    this.#options.events.off('changed', this.#wakeWaiters);
    this.#listenedVersions = undefined;
  }

  /**
   * Back to `registered`: its workers stop (a running batch gets unload_grace_seconds), its
   * measured size is kept for the next load. 'api' also answers what waits in its queue; requests
   * that arrive during an eviction or idle unload wait and load it again.
   */
  unload(
    version: ModelVersion,
    reason: UnloadReason,
    options: { isRecycled?: boolean; because?: string } = {},
  ): Promise<void> {
    const pending = this.#unloads.get(version);
    if (pending) return pending;
    const unload = this.#unload(version, reason, options).finally(() => {
      this.#unloads.delete(version);
      // Requests that arrived while it left bring it back.
      if (!this.#isClosed && version.queue.waiting > 0 && version.state === 'registered')
        void this.load(version, 'demand').catch(() => undefined);
    });
    this.#unloads.set(version, unload);
    return unload;
  }

  async #unload(
    version: ModelVersion,
    reason: UnloadReason,
    options: { isRecycled?: boolean; because?: string },
  ): Promise<void> {
    const loading = this.#loads.get(version);
    if (loading) await loading.catch(() => undefined);
    if (version.state === 'registered') return;
    this.#disarmIdle(version);
    this.#forgetFirstBatch(version);
    // Said before the version's queue may change (its batch finishes during the unload).
    const because = reason === 'evicted' ? `${options.because ?? 'to make room'}, ${evictionState(version)}` : '';
    version.setTransition('unloading');
    this.#emit(version, 'unloading', reason);
    if (reason === 'api')
      version.failQueued(
        createServeError.MARINA_ERR_MODEL_UNLOADING(
          `${version.label} was unloaded by an API call before this request could run; load it again (or send the request again: it loads on demand)`,
        ),
      );
    version.plannedWorkers = 0;
    // What the unload gives back is the other measure of its size (sessions, arenas, the worker
    // thread and its handler all go; a thread recycled for the load that evicted it stays, and that
    // load will not start one): taken when nothing else loads or unloads meanwhile, and no other
    // version's first batch is under way: a first batch grows the process by its model's arena and
    // mapped weights while the unload shrinks it, and the difference is no size at all. Under Zipf
    // traffic the most asked-for ResNet-50 was counted at 5 MiB, and its next seven loads each
    // counted that against the budget (bench run m4, session 14; a measure beside a first batch
    // explains it, test in model-residency.test.ts).
    const moves = this.#moves;
    const isAlone = () => this.#group === undefined && this.#unloads.size <= 1 && this.#warming.size === 0;
    const beforeBytes = isAlone() ? this.#readMemory() : undefined;
    try {
      await this.#options.stopWorkers(version, { isRecycled: options.isRecycled === true });
      if (beforeBytes !== undefined && this.#moves === moves && isAlone()) {
        const freed = beforeBytes - this.#readMemory();
        if (isPlausibleSize(version, freed)) {
          version.residentBytes = freed;
          version.recordServingBytes(freed);
        }
      }
    } finally {
      this.#loadedAt.delete(version);
      this.#moves++;
      if (this.#group) this.#group.isTainted = true;
      version.setTransition(undefined);
      this.#emit(version, 'registered', reason);
    }
    this.#options.log(
      'info',
      `${version.label} unloaded (${reason === 'evicted' ? `evicted under model_memory_budget ${because}` : reason === 'idle' ? `idle for ${version.idleUnloadMs / 1000} s` : 'API call'})`,
    );
  }

  /** A version was removed from the registry: forget its timers. */
  forget(version: ModelVersion): void {
    this.#disarmIdle(version);
    this.#forgetFirstBatch(version);
    this.#loadedAt.delete(version);
  }

  /** The version's idle setting changed (or it was pinned/unpinned): re-arm its timer. */
  refreshIdle(version: ModelVersion): void {
    this.#disarmIdle(version);
    if (version.state === 'resident') this.#armIdle(version);
  }

  /**
   * While a budget is set and a model is in memory, reads the process's memory ten times a second and
   * unloads least recently used versions (idle first) when the models have grown past the budget since
   * their loads (onnxruntime's arena grows with the largest batch a version has run). A load checks
   * the same before it starts; this bounds the growth between loads. Reading the memory (the resident
   * set) costs about 10 µs; the timer stops when no model is in memory.
   */
  #watch(): void {
    if (this.memoryBudgetBytes === undefined || this.#watchTimer !== undefined || this.#isClosed) return;
    this.#watchTimer = setInterval(() => {
      if (this.#isTrimming) return;
      const observed = this.observedModelBytes();
      // No model in memory: nothing to trim (what the process still holds above its baseline then,
      // onnxruntime's one-time cost and the allocator's slack, no unload can give back).
      if (this.#isEmpty()) {
        clearInterval(this.#watchTimer);
        this.#watchTimer = undefined;
        return;
      }
      // A load past making room grows the process on its way to its count: then only a process well
      // over the budget is trimmed. Loads still waiting for room hold nothing: under steady churn
      // one always waits, and skipping the watch for them left it idle (a Zipf phase's peak went
      // 30 MB past the budget + 150, bench run s8-3).
      const isGrowing = this.#reserved.size > 0 || this.#warming.size > 0 || this.#unloads.size > 0;
      const limit = (this.memoryBudgetBytes ?? Number.POSITIVE_INFINITY) + (isGrowing ? WATCH_HEADROOM_BYTES : 0);
      if ((observed ?? 0) <= limit) return;
      this.#isTrimming = true;
      this.#trimToBudget(undefined, { isWatch: true })
        .catch((error: unknown) =>
          this.#options.log('warn', `trimming to model_memory_budget failed: ${String(error)}`),
        )
        .finally(() => {
          this.#isTrimming = false;
        });
    }, WATCH_INTERVAL_MS);
    this.#watchTimer.unref?.();
  }

  /** Stops idle timers and refuses new loads (the registry drains the versions itself). */
  close(): void {
    this.#isClosed = true;
    clearInterval(this.#watchTimer);
    this.#watchTimer = undefined;
    for (const v of [...this.#idleTimers.keys()]) this.#disarmIdle(v);
  }

  #armIdle(version: ModelVersion, delayMs = version.idleUnloadMs): void {
    if (version.idleUnloadMs <= 0 || version.pinned || this.#isClosed) return;
    const timer = setTimeout(() => {
      this.#idleTimers.delete(version);
      if (version.state !== 'resident' || version.pinned || version.idleUnloadMs <= 0) return;
      const idleForMs = Date.now() - this.#lastUse(version);
      if (version.pendingJobs > 0 || idleForMs < version.idleUnloadMs) {
        this.#armIdle(version, Math.max(50, version.idleUnloadMs - Math.max(0, idleForMs)));
        return;
      }
      void this.unload(version, 'idle').catch((error: unknown) =>
        this.#options.log('warn', `${version.label}: idle unload failed: ${(error as Error).message}`),
      );
    }, delayMs);
    timer.unref?.();
    this.#idleTimers.set(version, timer);
  }

  #disarmIdle(version: ModelVersion): void {
    clearTimeout(this.#idleTimers.get(version));
    this.#idleTimers.delete(version);
  }

  /**
   * onnxruntime allocates its arena for activations at the first run, not at session creation: the
   * growth over the version's first batch is added to what its load measured, when no other load
   * or unload happened meanwhile (their memory would be mixed in).
   */
  #measureFirstBatch(version: ModelVersion): void {
    const moves = this.#moves;
    let startBytes: number | undefined;
    // The baseline is read when the first batch starts (the worker has not begun it yet), so other
    // models' traffic since the load is not counted.
    const onProgress = () => {
      if (startBytes !== undefined || version.runningJobs === 0) return;
      startBytes = this.#readMemory();
      version.off('progress', onProgress);
    };
    const onBatch = () => {
      this.#forgetFirstBatch(version);
      this.#warming.delete(version);
      this.#options.onFirstBatch?.(version);
      if (version.state !== 'resident') return;
      const isKept = this.#keptCounts.has(version);
      if (startBytes === undefined || this.#moves !== moves) {
        // Not measurable (other loads or unloads moved memory meanwhile, as under churn): count
        // what its first batch added the last time it was, else its serving size is counted at
        // its load alone (an arena short: about 100 MB for a ResNet-50, measured).
        if (!isKept) version.residentBytes += this.#firstBatchBytes.get(version) ?? 0;
        this.#clampNoisy(version);
        return;
      }
      const grown = this.#readMemory() - startBytes;
      if (grown > 0) this.#firstBatchBytes.set(version, grown);
      if (grown > 0 && !isKept) version.residentBytes += grown;
      // Its load's measure was clean too (#endMeasure kept it): load plus first batch is its whole size.
      if (this.#cleanLoads.has(version) && isPlausibleSize(version, version.residentBytes))
        version.recordServingBytes(version.residentBytes);
      else this.#clampNoisy(version);
    };
    this.#firstBatch.set(version, { onProgress, onBatch });
    version.on('progress', onProgress);
    version.once('batch', onBatch);
  }

  /**
   * Caps a count taken from a noisy measure (loads and unloads overlapping, as under churn) at the
   * version's clean serving measure or its estimate, whichever is larger. Uncapped, such counts
   * grew past the budget's half under Zipf traffic (a ResNet-50 counted at 392–547 MiB against
   * 100–150 serving, measured): its next load then waited for room it never got and failed with
   * MARINA_ERR_MEMORY_BUDGET_FULL after startupTimeout. The budget still reads the process's own
   * memory (usedBytes), so a count too small is corrected once the model is in memory.
   */
  #clampNoisy(version: ModelVersion): void {
    version.residentBytes = Math.min(version.residentBytes, Math.max(version.servingBytes, version.estimatedBytes));
  }

  #forgetFirstBatch(version: ModelVersion): void {
    this.#warming.delete(version);
    const listeners = this.#firstBatch.get(version);
    if (listeners) {
      version.off('progress', listeners.onProgress);
      version.off('batch', listeners.onBatch);
    }
    this.#firstBatch.delete(version);
  }

  #beginMeasure(): void {
    this.#moves++;
    if (!this.#group) this.#group = { baseBytes: this.#readMemory(), active: 0, done: [], isTainted: false };
    this.#group.active++;
  }

  /**
   * One load of the group ended (`version` undefined: it failed). When the last one ends, the
   * group's growth is split among its loads by their estimates; until then a load counts its estimate.
   */
  #endMeasure(version: ModelVersion | undefined): void {
    const group = this.#group;
    if (!group) return;
    group.active--;
    if (version) group.done.push(version);
    if (group.active > 0) return;
    this.#group = undefined;
    const grown = this.#readMemory() - group.baseBytes;
    const estimates = group.done.reduce((sum, v) => sum + Math.max(1, v.estimatedBytes), 0);
    for (const v of group.done) {
      if (group.done.length === 1 && !group.isTainted) this.#cleanLoads.add(v);
      else this.#cleanLoads.delete(v);
      this.#keptCounts.delete(v);
      const share = Math.round((grown * Math.max(1, v.estimatedBytes)) / estimates);
      this.#loadGrowth.set(v, Math.max(0, share));
      // Memory an unload freed during the group hides part of its loads' growth: never count less than the estimate then.
      if (share > 0) {
        v.residentBytes = group.isTainted ? Math.max(share, v.estimatedBytes) : share;
        // A share of a group, or a tainted measure, catches other models' memory too: it never
        // counts more than the version's clean serving measure or its estimate (see #clampNoisy).
        if (!this.#cleanLoads.has(v)) this.#clampNoisy(v);
      } else {
        // Memory freed elsewhere during the load hid its growth: keep what is known rather than 0.
        // What is known (its last load's count) holds a first batch's growth already: this load's
        // first batch must not add its own on top (#measureFirstBatch), or the count grows by an
        // arena at each load under churn (measured: 100 → 650 MiB in a minute, past the budget).
        v.residentBytes ||= v.estimatedBytes;
        this.#keptCounts.add(v);
        // Expected while another model unloads (under churn, most loads): said only when nothing explains it.
        // Without a budget nothing depends on the count (describe shows it): a collection or a thread
        // of an earlier server ending in the same process can shrink it, so it is said at info level.
        if (!group.isTainted)
          this.#options.log(
            this.memoryBudgetBytes === undefined ? 'info' : 'warn',
            `${v.label}: its load's memory could not be measured (the process shrank meanwhile); counting ${mib(v.residentBytes)} MiB`,
          );
      }
    }
  }

  #emit(
    version: ModelVersion,
    state: 'registered' | 'loading' | 'resident' | 'unloading',
    reason: string,
    extra: { residentBytes?: number; loadMs?: number; waitingRequests?: number } = {},
  ): void {
    this.#options.events.emit('residency', {
      modelName: version.modelName,
      modelVersion: version.modelVersion,
      state,
      reason,
      ...extra,
    });
  }
}

/**
 * What a busy version weighs against a waiting load (#takeRoom), and what the load weighs before
 * aging: its demand count times the requests waiting in its queue (at least one). Evicting a busy
 * version sends every request in its queue to wait for its next load, so a long queue counts as
 * much as a high demand. By demand alone, on a 2-core machine three times slower than the one the
 * aging was tuned on (AVX2 only: loads waited 2-4 s for room), the most asked-for model, 37% of a
 * Zipf phase's requests with 14-29 of them waiting, was evicted every 2-3 s and 91 of its 221
 * requests waited for its load again (bench run s13 new1).
 */
function busyWeight(version: ModelVersion, now: number): number {
  return version.demand.valueAt(now) * Math.max(1, version.queue.waiting);
}

/**
 * Whether a measure of what a version holds serving (what its unload gave back, or its load and
 * first batch with nothing else moving) can be its size: at least MIN_SIZE_SHARE of its estimate,
 * that is about half its files (a model holds its weights at least). A measure below that is kept
 * neither as its serving size nor as its count: the memory it had, or the next load takes, was
 * held elsewhere in the process meanwhile. Under Zipf traffic a ResNet-50 that holds 90-120 MiB
 * serving was once counted at 16 MiB (bench run m6, session 14), and its next load reserved that.
 * Both its load before (70 ms: it took the thread of the model it evicted) and its unload (its
 * thread went on to the model that evicted it) moved a thread between models. Most likely the
 * thread's malloc arena kept the small allocations of the model that left it (those under
 * MALLOC_MMAP_THRESHOLD_ stay in the arena at their free) and the next model reused them, so
 * neither the unload nor the load showed them; the log does not say which of the two it was.
 */
function isPlausibleSize(version: ModelVersion, bytes: number): boolean {
  return bytes > 0 && bytes >= version.estimatedBytes * MIN_SIZE_SHARE;
}

/** How an evicted version stood, for the log: idle, or busy and with how much waiting and running. */
function evictionState(version: ModelVersion): string {
  if (version.pendingJobs === 0) return 'idle';
  return `busy: ${version.queue.waiting} waiting, ${version.runningJobs} running, weight ${Math.round(busyWeight(version, performance.now()))}`;
}

/** A load's aging period is this many of its own load times, at least AGING_MIN_MS: each period it waits doubles its weight against busy versions (busyWeight). */
const AGING_LOADS = 4;
/** An idle version asked for this many times as often as the least asked-for idle one goes after the others (#idleInEvictionOrder). */
const FREQUENT_FACTOR = 4;
const AGING_MIN_MS = 1000;
/** The least share of its estimate a measure of a version's size may be (isPlausibleSize). */
const MIN_SIZE_SHARE = 0.25;
/** The least time a busy version stays resident before it may make room for another (#busyRentMs). */
const BUSY_MIN_MS = 1000;

/**
 * How often the memory watch reads the process's memory while models are resident (a read of the
 * resident set is about 10 µs). At 500 ms, models whose arenas grew with their batches overshot the
 * budget + 150 MB between reads in 2 of 4 bench runs (773 against 748 MB, 789 against 767); at 100
 * ms, within it in 4 of 6 (745 against 762, 758 against 771, 729 against 761, 770 against 779; 769
 * against 766 and, in the Zipf phase, 807 against 767).
 */
const WATCH_INTERVAL_MS = 100;
/**
 * How far past the budget the watch lets the process go while a load grows it (see #watch). The
 * bench holds a server to budget + 150 MB of PSS for its whole process tree, of which the server
 * alone is about 105 MB: at 64 MiB the watch by itself let the tree pass that while loads grew
 * (748 MB against 720 in one of seven runs, session 15). At 32 MiB, in four runs beside them: the
 * peak within it in all four, the watch trimming 0-2 times a run (0-10 at 64 MiB). Their Zipf
 * throughput (0.69-0.94 of all resident, against 0.75-0.97) and cold median (3.7-5.4 times its
 * base, against 3.7-4.5) were lower in two of the four, one of them a run whose watch never
 * trimmed, where the headroom changed nothing: the runs' spread, not the watch.
 */
const WATCH_HEADROOM_BYTES = 32 * 2 ** 20;

function mib(bytes: number): string {
  return (bytes / 2 ** 20).toFixed(0);
}
