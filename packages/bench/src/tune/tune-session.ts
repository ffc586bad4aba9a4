import { join } from 'node:path';
import { runLoad } from '../load-generator.ts';
import { type RunningServer, startServer } from '../server-process.ts';
import { summarizeLatencies } from '../stats.ts';
import {
  configSettings,
  describeConfig,
  rank,
  type SkippedConfig,
  type TuneConfig,
  type TuneCurvePoint,
  type TuneInput,
  type TuneMeasurement,
} from './tune-plan.ts';

/** The shortest measurement worth making, ms. */
const MIN_MEASURE_MS = 1_000;

export interface TuneSessionOptions {
  input: TuneInput;
  serveBin: string;
  modelStoreDir: string;
  archiveFileName: string;
  /** A folder of this run's own: each server's work folder, and the pid file and caches they share. */
  workRoot: string;
  budgetS: number;
  /** performance.now() when the run started. */
  startedMs: number;
  log: (message: string) => void;
}

/**
 * One tune run against the budget: starts a server per configuration, measures it, and keeps what
 * was measured and what was skipped (with why). The phases run in order: worker × thread pairs at
 * batch 1, batch sizes for the best pair, a longer delay where batching helped, then the curve.
 */
export class TuneSession {
  /** Every measurement, in the order made. */
  readonly measured: TuneMeasurement[] = [];
  readonly skipped: SkippedConfig[] = [];
  readonly #options: TuneSessionOptions;
  readonly #deadlineMs: number;
  /** The slowest server start seen so far, ms: each measurement pays one. */
  #startCostMs = 0;
  #serverCount = 0;

  constructor(options: TuneSessionOptions) {
    this.#options = options;
    this.#deadlineMs = options.startedMs + options.budgetS * 1000;
  }

  /** Phase 1: each workers × threads pair at batch 1 (the first always, however small the budget). */
  async measurePairs(options: { pairs: ReadonlyArray<{ workers: number; threads: number }>; phasesAfter: number }) {
    const plan: TuneConfig[] = options.pairs.map((p) => ({ ...p, batchSize: 1, maxBatchDelay: 0 }));
    for (let i = 0; i < plan.length; i++) {
      const ms =
        this.#sliceMs(plan.length - 1 - i + options.phasesAfter) ??
        (this.measured.length === 0 ? MIN_MEASURE_MS : undefined);
      if (ms === undefined) this.#outOfBudget(plan[i]!);
      else await this.#measure(plan[i]!, ms);
    }
  }

  /**
   * Phase 2: the best pair at each batch size (5 ms delay). Phase 3: where a batched run beat
   * batch 1 by more than the noise of a short run, the best batched one with a 25 ms delay.
   */
  async measureBatching(options: { batchSizes: readonly number[] }): Promise<void> {
    const bestPair = [...this.measured].sort(rank)[0];
    if (!bestPair) return;
    const batch1 = bestPair.throughputPerSec;
    let bestBatched: TuneMeasurement | undefined;
    for (let i = 0; i < options.batchSizes.length; i++) {
      const config = {
        workers: bestPair.workers,
        threads: bestPair.threads,
        batchSize: options.batchSizes[i]!,
        maxBatchDelay: 5,
      };
      const ms = this.#sliceMs(options.batchSizes.length - 1 - i + 1);
      if (ms === undefined) {
        this.#outOfBudget(config);
        continue;
      }
      const m = await this.#measure(config, ms);
      if (m && (!bestBatched || rank(m, bestBatched) < 0)) bestBatched = m;
    }
    if (bestBatched && bestBatched.throughputPerSec > batch1 * 1.05) {
      const config = { ...pick(bestBatched), maxBatchDelay: 25 };
      const ms = this.#sliceMs(0);
      if (ms === undefined) this.#outOfBudget(config);
      else await this.#measure(config, ms);
    } else if (bestBatched) {
      this.#options.log(
        `batching did not help (best batched ${bestBatched.throughputPerSec.toFixed(1)}/s vs batch 1 ${batch1.toFixed(1)}/s), so maxBatchDelay is not varied`,
      );
    }
  }

  /** The best configuration against 1, 2, 4, ... clients, in what is left of the budget. */
  async measureCurve(best: TuneMeasurement): Promise<TuneCurvePoint[]> {
    const curve: TuneCurvePoint[] = [];
    const levels: number[] = [];
    for (let c = 1; c <= Math.max(best.concurrency * 2, 4); c *= 2) levels.push(c);
    // Stopping the last server takes a moment too: the curve ends 2 s before the deadline.
    const curveLeftMs = () => this.#deadlineMs - 2_000 - performance.now();
    if (curveLeftMs() <= this.#startCostMs + levels.length * 500) {
      this.skipped.push({
        config: `curve of ${describeConfig(best)}`,
        reason: `not measured: the budget (${this.#options.budgetS} s) ran out`,
      });
      return curve;
    }
    this.#options.log(`curve of ${describeConfig(best)} at ${levels.join(', ')} clients`);
    await this.#withServer(best, async (origin) => {
      for (let i = 0; i < levels.length; i++) {
        const ms = (curveLeftMs() - 500) / (levels.length - i);
        if (ms < 300) break;
        const load = await this.#load({
          origin,
          concurrency: levels[i]!,
          durationMs: Math.min(ms, 10_000),
          warmupRequests: i === 0 ? levels[0]! : 0,
        });
        const stats = summarizeLatencies(load.latenciesMs);
        curve.push({
          concurrency: levels[i]!,
          throughputPerSec: load.throughputPerSec,
          p50Ms: stats.p50Ms,
          p99Ms: stats.p99Ms,
          requests: stats.count,
          errors: load.errors,
        });
      }
    });
    return curve;
  }

  /** Measures one configuration with a closed loop of clients for `measureMs`. */
  async #measure(config: TuneConfig, measureMs: number): Promise<TuneMeasurement | undefined> {
    const concurrency = Math.max(2, config.workers * config.batchSize * 2);
    this.#options.log(
      `measuring ${describeConfig(config)} with ${concurrency} clients for ${(measureMs / 1000).toFixed(1)} s`,
    );
    const outcome = await this.#withServer(config, (origin) =>
      this.#load({ origin, concurrency, durationMs: measureMs, warmupRequests: concurrency * 2 }),
    );
    if (!outcome) return undefined;
    const stats = summarizeLatencies(outcome.value.latenciesMs);
    const m: TuneMeasurement = {
      ...config,
      concurrency,
      requests: stats.count,
      errors: outcome.value.errors,
      throughputPerSec: outcome.value.throughputPerSec,
      p50Ms: stats.p50Ms,
      p99Ms: stats.p99Ms,
      startMs: outcome.startMs,
    };
    this.measured.push(m);
    this.#options.log(
      `  ${m.throughputPerSec.toFixed(1)}/s, p50 ${m.p50Ms.toFixed(1)} ms, p99 ${m.p99Ms.toFixed(1)} ms`,
    );
    return m;
  }

  #load(options: { origin: string; concurrency: number; durationMs: number; warmupRequests: number }) {
    const { input } = this.#options;
    return runLoad({
      ...options,
      path: `/predictions/${input.modelName}`,
      body: input.body,
      contentType: input.contentType,
      requests: Number.MAX_SAFE_INTEGER,
    });
  }

  /** Starts a server with `config`, runs `body` against it, stops it. Undefined (and a skipped entry) when it did not start. */
  async #withServer<T>(
    config: TuneConfig,
    body: (origin: string) => Promise<T>,
  ): Promise<{ value: T; startMs: number } | undefined> {
    const t0 = performance.now();
    let server: RunningServer;
    try {
      server = await this.#startServer(config);
    } catch (error) {
      this.skipped.push({ config: describeConfig(config), reason: (error as Error).message.slice(0, 300) });
      return undefined;
    }
    const startMs = performance.now() - t0;
    this.#startCostMs = Math.max(this.#startCostMs, startMs);
    try {
      return { value: await body(server.origin), startMs };
    } catch (error) {
      this.skipped.push({
        config: describeConfig(config),
        reason: `measurement failed: ${(error as Error).message.slice(0, 300)}`,
      });
      return undefined;
    } finally {
      await server.stop();
    }
  }

  #startServer(config: TuneConfig): Promise<RunningServer> {
    const { input, workRoot } = this.#options;
    return startServer({
      serveBin: this.#options.serveBin,
      modelStoreDir: this.#options.modelStoreDir,
      archiveFileName: this.#options.archiveFileName,
      modelName: input.modelName,
      modelVersion: input.modelVersion,
      settings: configSettings(config),
      workDir: join(workRoot, `server-${++this.#serverCount}`),
      // Its own pid file and caches, shared by this run's servers only: a tune never meets the bench's or another tune's server.
      tmpDir: join(workRoot, 'tmp'),
      startTimeoutMs: Math.max(5_000, this.#deadlineMs - performance.now()),
    });
  }

  /**
   * How long the next measurement may run when `plannedAfter` more follow it, or undefined when
   * not even a short one fits: a quarter of the budget is kept for the curve of the best, and each
   * measurement also pays a server start (the slowest seen so far; before the first, a tenth of the budget or 3 s).
   */
  #sliceMs(plannedAfter: number): number | undefined {
    const { budgetS } = this.#options;
    const startCost = this.#startCostMs > 0 ? this.#startCostMs : Math.max(3_000, budgetS * 100);
    const left = this.#deadlineMs - performance.now() - budgetS * 1000 * 0.25;
    if (left < startCost + MIN_MEASURE_MS) return undefined;
    return Math.min(15_000, Math.max(MIN_MEASURE_MS, left / (plannedAfter + 1) - startCost));
  }

  #outOfBudget(config: TuneConfig): void {
    this.skipped.push({
      config: describeConfig(config),
      reason: `not measured: the budget (${this.#options.budgetS} s) ran out`,
    });
  }
}

function pick(m: TuneMeasurement): Omit<TuneConfig, 'maxBatchDelay'> {
  return { workers: m.workers, threads: m.threads, batchSize: m.batchSize };
}
