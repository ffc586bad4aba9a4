import { mkdtemp, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import { basename, dirname, join, resolve } from 'node:path';
import * as ort from 'onnxruntime-node';
import { sessionSignature, syntheticRequestBody } from '@marina/handlers';
import { benchErrors } from '../errors.ts';
import { runLoad } from '../load-generator.ts';
import { getMachineInfo, type MachineInfo } from '../machine-info.ts';
import { openModel, warmupSamplePath } from '../profile/profile-model.ts';
import { defaultServeBin } from '../run-bench.ts';
import { type RunningServer, startServer, type ServerModelSettings } from '../server-process.ts';
import { readLoadAverage, summarizeLatencies } from '../stats.ts';

/** One configuration of a model version on the server. */
interface TuneConfig {
  workers: number;
  /** intraOpNumThreads per worker; workers × threads never exceeds the cores. */
  threads: number;
  batchSize: number;
  /** ms; 0 for batch size 1 (nothing to wait for). */
  maxBatchDelay: number;
}

interface TuneMeasurement extends TuneConfig {
  /** Closed-loop clients during the measurement. */
  concurrency: number;
  requests: number;
  errors: number;
  throughputPerSec: number;
  p50Ms: number;
  p99Ms: number;
  /** Server start and model load, ms. */
  startMs: number;
}

interface TuneCurvePoint {
  concurrency: number;
  throughputPerSec: number;
  p50Ms: number;
  p99Ms: number;
  requests: number;
  errors: number;
}

export interface TuneResult {
  archive: string;
  modelName: string;
  modelVersion: string;
  handler: string;
  cores: number;
  budgetS: number;
  elapsedS: number;
  /** 1-minute load average at the start and the end: other work on the machine skews every number. */
  loadAverage: { start: number; end: number };
  machine: MachineInfo;
  input: { from: string; bytes: number; contentType: string };
  /** Every configuration measured, best first. */
  measured: TuneMeasurement[];
  /** Configurations planned but not measured, and why (budget, a failed start). */
  skipped: Array<{ config: string; reason: string }>;
  recommendation: TuneMeasurement & {
    /** The lines to put into config.properties, exactly as the measured server had them. */
    configLines: string[];
  };
  /** The recommended configuration's throughput and latency against concurrent clients. */
  curve: TuneCurvePoint[];
}

export interface TuneOptions {
  /** A model archive (.mar, .tar.gz or folder) in a model store folder. */
  archivePath: string;
  /** Seconds for everything, server starts included. Default 120. */
  budgetS?: number;
  /** A request body; default the archive's `warmup.input`, else synthetic from the signature (built-in handlers only). */
  inputPath?: string;
  contentType?: string;
  /** Largest batch size tried. Default 8. */
  maxBatchSize?: number;
  serveBin?: string;
  /** Cores to plan for. Default os.availableParallelism(). */
  cores?: number;
  onProgress?: (message: string) => void;
}

function describeConfig(c: TuneConfig): string {
  return `${c.workers} worker(s) x ${c.threads} thread(s), batch ${c.batchSize}${c.batchSize > 1 ? `, maxBatchDelay ${c.maxBatchDelay} ms` : ''}`;
}

/** The `models=` settings of a configuration (TorchServe's keys plus Marina's intraOpNumThreads). */
function configSettings(c: TuneConfig): ServerModelSettings {
  // No maxBatchDelay at batch size 1: there is nothing to wait for, and a 0 there reads as "unset" (100 ms).
  return {
    minWorkers: c.workers,
    maxWorkers: c.workers,
    batchSize: c.batchSize,
    ...(c.batchSize > 1 ? { maxBatchDelay: c.maxBatchDelay } : {}),
    intraOpNumThreads: c.threads,
  };
}

/** The config.properties lines that serve `c`: the same `load_models` and `models` lines the measured server was started with. */
function configLines(options: {
  modelName: string;
  modelVersion: string;
  archiveFileName: string;
  config: TuneConfig;
}): string[] {
  return [
    `load_models=${options.modelName}=${options.archiveFileName}`,
    `models=${JSON.stringify({ [options.modelName]: { [options.modelVersion]: configSettings(options.config) } })}`,
  ];
}

/** workers × threads pairs that use the cores without oversubscribing them: for each worker count (powers of two), the most threads that fit. */
export function workerThreadPairs(cores: number): Array<{ workers: number; threads: number }> {
  const pairs: Array<{ workers: number; threads: number }> = [];
  for (let workers = 1; workers <= cores; workers *= 2)
    pairs.push({ workers, threads: Math.max(1, Math.floor(cores / workers)) });
  if (!pairs.some((p) => p.workers === cores)) pairs.push({ workers: cores, threads: 1 });
  return pairs;
}

/** Batch sizes tried beyond 1: powers of two up to the maximum, and the maximum itself. */
function batchSizes(max: number): number[] {
  const sizes: number[] = [];
  for (let b = 4; b < max; b *= 2) sizes.push(b);
  if (max > 1) sizes.push(max);
  return sizes;
}

/** Best first: the highest throughput; within 5% of each other (the noise of a short run), the lower p99. */
function rank(a: TuneMeasurement, b: TuneMeasurement): number {
  const top = Math.max(a.throughputPerSec, b.throughputPerSec);
  if (top > 0 && Math.abs(a.throughputPerSec - b.throughputPerSec) / top <= 0.05) return a.p99Ms - b.p99Ms;
  return b.throughputPerSec - a.throughputPerSec;
}

async function requestBody(
  options: TuneOptions,
  archivePath: string,
): Promise<{
  body: Buffer;
  contentType: string;
  from: string;
  handler: string;
  modelName: string;
  modelVersion: string;
}> {
  const model = await openModel(archivePath);
  try {
    if (model.modelDir === undefined)
      throw benchErrors.create.MARINA_ERR_BENCH_OPTION_INVALID(
        `tune needs a model archive (.mar, .tar.gz or an archive folder), not a bare ONNX file: package it with model-archiver first`,
      );
    const handler = model.handler ?? 'base_handler';
    const defaultType = ['image_classifier', 'image_segmenter', 'object_detector'].includes(handler)
      ? 'image/jpeg'
      : handler === 'tensor' || handler === 'base_handler'
        ? 'application/json'
        : 'application/octet-stream';
    const samplePath = options.inputPath ?? (await warmupSamplePath(model));
    const base = { handler, modelName: model.modelName, modelVersion: model.modelVersion ?? '1.0' };
    if (samplePath)
      return {
        ...base,
        body: await readFile(samplePath),
        contentType: options.contentType ?? defaultType,
        from: basename(samplePath),
      };
    const session = await ort.InferenceSession.create(model.modelFile, { intraOpNumThreads: 1 });
    const signature = sessionSignature(session);
    await session.release();
    const synthetic = await syntheticRequestBody(handler, signature);
    if (!synthetic)
      throw benchErrors.create.MARINA_ERR_BENCH_OPTION_INVALID(
        `the archive's handler '${handler}' is custom, so no request can be made from the model's signature; pass a request body with --input <file> (and --content-type)`,
      );
    return {
      ...base,
      body: synthetic.body,
      contentType: options.contentType ?? synthetic.contentType,
      from: `synthetic from the signature (${handler})`,
    };
  } finally {
    await model.cleanup();
  }
}

/**
 * Finds the configuration that serves an archive fastest on this machine: starts a real server
 * (`serve`, as a user would) for each combination of workers × intra-op threads × batch size (and
 * maxBatchDelay where a batch size above 1 beats batch 1), never with more threads than cores,
 * drives a closed-loop load against it, and measures throughput and p50/p99 latency. Then a
 * concurrency curve of the best. Everything fits in `budgetS`: configurations that would not are
 * listed as skipped. The recommendation is the best measured configuration, as config.properties lines.
 *
 * @throws MARINA_ERR_BENCH_OPTION_INVALID for a bad option or input; MARINA_ERR_BENCH_TUNE_NO_RESULT when nothing could be measured.
 */
export async function tuneArchive(options: TuneOptions): Promise<TuneResult> {
  const startedMs = performance.now();
  const budgetS = options.budgetS ?? 120;
  const deadlineMs = startedMs + budgetS * 1000;
  const cores = options.cores ?? os.availableParallelism();
  const maxBatchSize = options.maxBatchSize ?? 8;
  if (!(budgetS > 0))
    throw benchErrors.create.MARINA_ERR_BENCH_OPTION_INVALID(`--budget-s must be above 0, got ${budgetS}`);
  if (!Number.isInteger(maxBatchSize) || maxBatchSize < 1)
    throw benchErrors.create.MARINA_ERR_BENCH_OPTION_INVALID(
      `--max-batch-size must be a whole number of 1 or more, got ${maxBatchSize}`,
    );
  const archivePath = resolve(options.archivePath);
  const serveBin = resolve(options.serveBin ?? process.env.MARINA_SERVE_BIN ?? defaultServeBin());
  const loadStart = readLoadAverage();
  const input = await requestBody(options, archivePath);
  const modelStoreDir = dirname(archivePath);
  const archiveFileName = basename(archivePath);
  const workRoot = await mkdtemp(join(os.tmpdir(), 'marina-tune-'));
  const measured: TuneMeasurement[] = [];
  const skipped: TuneResult['skipped'] = [];
  let startCostMs = 0;
  let serverCount = 0;
  const log = (message: string) => options.onProgress?.(message);

  /** Starts a server with `config`, runs `body` against it, stops it. Undefined (and a skipped entry) when it did not start. */
  const withServer = async <T>(
    config: TuneConfig,
    body: (origin: string) => Promise<T>,
  ): Promise<{ value: T; startMs: number } | undefined> => {
    const t0 = performance.now();
    let server: RunningServer;
    try {
      server = await startServer({
        serveBin,
        modelStoreDir,
        archiveFileName,
        modelName: input.modelName,
        modelVersion: input.modelVersion,
        settings: configSettings(config),
        workDir: join(workRoot, `server-${++serverCount}`),
        // Its own pid file and caches, shared by this run's servers only: a tune never meets the bench's or another tune's server.
        tmpDir: join(workRoot, 'tmp'),
        startTimeoutMs: Math.max(5_000, deadlineMs - performance.now()),
      });
    } catch (error) {
      skipped.push({ config: describeConfig(config), reason: (error as Error).message.slice(0, 300) });
      return undefined;
    }
    const startMs = performance.now() - t0;
    startCostMs = Math.max(startCostMs, startMs);
    try {
      return { value: await body(server.origin), startMs };
    } catch (error) {
      skipped.push({
        config: describeConfig(config),
        reason: `measurement failed: ${(error as Error).message.slice(0, 300)}`,
      });
      return undefined;
    } finally {
      await server.stop();
    }
  };

  const measure = async (config: TuneConfig, measureMs: number): Promise<TuneMeasurement | undefined> => {
    const concurrency = Math.max(2, config.workers * config.batchSize * 2);
    log(`measuring ${describeConfig(config)} with ${concurrency} clients for ${(measureMs / 1000).toFixed(1)} s`);
    const outcome = await withServer(config, (origin) =>
      runLoad({
        origin,
        path: `/predictions/${input.modelName}`,
        body: input.body,
        contentType: input.contentType,
        concurrency,
        requests: Number.MAX_SAFE_INTEGER,
        durationMs: measureMs,
        warmupRequests: concurrency * 2,
      }),
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
    measured.push(m);
    log(`  ${m.throughputPerSec.toFixed(1)}/s, p50 ${m.p50Ms.toFixed(1)} ms, p99 ${m.p99Ms.toFixed(1)} ms`);
    return m;
  };

  const MIN_MEASURE_MS = 1_000;
  /**
   * How long the next measurement may run when `plannedAfter` more follow it, or undefined when
   * not even a short one fits: a quarter of the budget is kept for the curve of the best, and each
   * measurement also pays a server start (the slowest seen so far; before the first, a tenth of the budget or 3 s).
   */
  const sliceMs = (plannedAfter: number): number | undefined => {
    const startCost = startCostMs > 0 ? startCostMs : Math.max(3_000, budgetS * 100);
    const left = deadlineMs - performance.now() - budgetS * 1000 * 0.25;
    if (left < startCost + MIN_MEASURE_MS) return undefined;
    return Math.min(15_000, Math.max(MIN_MEASURE_MS, left / (plannedAfter + 1) - startCost));
  };
  const outOfBudget = (config: TuneConfig) =>
    skipped.push({ config: describeConfig(config), reason: `not measured: the budget (${budgetS} s) ran out` });

  try {
    const pairs = workerThreadPairs(cores);
    const plan: TuneConfig[] = pairs.map((p) => ({ ...p, batchSize: 1, maxBatchDelay: 0 }));
    const extraBatches = batchSizes(maxBatchSize);
    // Phase 1: workers x threads at batch 1. Phase 2: batch sizes for the best pair. Phase 3: a longer delay where batching helped.
    for (let i = 0; i < plan.length; i++) {
      // The first configuration is always measured, however small the budget.
      const ms =
        sliceMs(plan.length - 1 - i + extraBatches.length + 1) ?? (measured.length === 0 ? MIN_MEASURE_MS : undefined);
      if (ms === undefined) outOfBudget(plan[i]!);
      else await measure(plan[i]!, ms);
    }
    const bestPair = [...measured].sort(rank)[0];
    if (bestPair) {
      const batch1 = bestPair.throughputPerSec;
      let bestBatched: TuneMeasurement | undefined;
      for (let i = 0; i < extraBatches.length; i++) {
        const config = {
          workers: bestPair.workers,
          threads: bestPair.threads,
          batchSize: extraBatches[i]!,
          maxBatchDelay: 5,
        };
        const ms = sliceMs(extraBatches.length - 1 - i + 1);
        if (ms === undefined) {
          outOfBudget(config);
          continue;
        }
        const m = await measure(config, ms);
        if (m && (!bestBatched || rank(m, bestBatched) < 0)) bestBatched = m;
      }
      // Batching helps when a batched run beat batch 1 by more than the noise of a short run.
      if (bestBatched && bestBatched.throughputPerSec > batch1 * 1.05) {
        const config = {
          workers: bestBatched.workers,
          threads: bestBatched.threads,
          batchSize: bestBatched.batchSize,
          maxBatchDelay: 25,
        };
        const ms = sliceMs(0);
        if (ms === undefined) outOfBudget(config);
        else await measure(config, ms);
      } else if (bestBatched) {
        log(
          `batching did not help (best batched ${bestBatched.throughputPerSec.toFixed(1)}/s vs batch 1 ${batch1.toFixed(1)}/s), so maxBatchDelay is not varied`,
        );
      }
    }
    const usable = measured.filter((m) => m.requests > 0);
    if (usable.length === 0) {
      throw benchErrors.create.MARINA_ERR_BENCH_TUNE_NO_RESULT(
        `no configuration of ${archiveFileName} was measured within ${budgetS} s (${skipped.map((s) => `${s.config}: ${s.reason}`).join('; ') || 'none started'}); raise --budget-s`,
      );
    }
    usable.sort(rank);
    const best = usable[0]!;

    // The curve: the best configuration against 1, 2, 4, ... clients, in what is left of the budget.
    const curve: TuneCurvePoint[] = [];
    const levels: number[] = [];
    for (let c = 1; c <= Math.max(best.concurrency * 2, 4); c *= 2) levels.push(c);
    // Stopping the last server takes a moment too: the curve ends 2 s before the deadline.
    const curveLeftMs = () => deadlineMs - 2_000 - performance.now();
    if (curveLeftMs() > startCostMs + levels.length * 500) {
      log(`curve of ${describeConfig(best)} at ${levels.join(', ')} clients`);
      await withServer(best, async (origin) => {
        for (let i = 0; i < levels.length; i++) {
          const ms = (curveLeftMs() - 500) / (levels.length - i);
          if (ms < 300) break;
          const load = await runLoad({
            origin,
            path: `/predictions/${input.modelName}`,
            body: input.body,
            contentType: input.contentType,
            concurrency: levels[i]!,
            requests: Number.MAX_SAFE_INTEGER,
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
    } else {
      skipped.push({
        config: `curve of ${describeConfig(best)}`,
        reason: `not measured: the budget (${budgetS} s) ran out`,
      });
    }

    return {
      archive: archivePath,
      modelName: input.modelName,
      modelVersion: input.modelVersion,
      handler: input.handler,
      cores,
      budgetS,
      elapsedS: (performance.now() - startedMs) / 1000,
      loadAverage: { start: loadStart, end: readLoadAverage() },
      machine: getMachineInfo(),
      input: { from: input.from, bytes: input.body.length, contentType: input.contentType },
      measured: usable,
      skipped,
      recommendation: {
        ...best,
        configLines: configLines({
          modelName: input.modelName,
          modelVersion: input.modelVersion,
          archiveFileName,
          config: best,
        }),
      },
      curve,
    };
  } finally {
    await rm(workRoot, { recursive: true, force: true });
  }
}

/** The tune result as text: the recommended lines, the best few, every measurement, the curve. */
export function formatTuneResult(result: TuneResult): string {
  const f = (v: number, digits = 1) => (Number.isFinite(v) ? v.toFixed(digits) : 'n/a');
  const lines: string[] = [];
  lines.push(
    `${result.modelName} ${result.modelVersion} (${result.handler}) on ${result.machine.cpuModel}, ${result.cores} cores; load average ${f(result.loadAverage.start, 2)} -> ${f(result.loadAverage.end, 2)}`,
  );
  lines.push(
    `input: ${result.input.from}, ${result.input.bytes} bytes, ${result.input.contentType}; ${result.measured.length} configurations in ${f(result.elapsedS)} s of a ${result.budgetS} s budget`,
  );
  lines.push('');
  lines.push(
    `recommended (${describeConfig(result.recommendation)}): ${f(result.recommendation.throughputPerSec)}/s, p50 ${f(result.recommendation.p50Ms)} ms, p99 ${f(result.recommendation.p99Ms)} ms at ${result.recommendation.concurrency} clients`,
  );
  lines.push('# config.properties');
  lines.push(...result.recommendation.configLines);
  lines.push('');
  const header = [
    '#',
    'workers',
    'threads',
    'batch',
    'delay ms',
    'clients',
    'req/s',
    'p50 ms',
    'p99 ms',
    'requests',
    'errors',
    'start s',
  ];
  const rows = result.measured.map((m, i) => [
    String(i + 1),
    String(m.workers),
    String(m.threads),
    String(m.batchSize),
    String(m.maxBatchDelay),
    String(m.concurrency),
    f(m.throughputPerSec),
    f(m.p50Ms),
    f(m.p99Ms),
    String(m.requests),
    String(m.errors),
    f(m.startMs / 1000),
  ]);
  const widths = header.map((h, c) => Math.max(h.length, ...rows.map((r) => r[c]!.length)));
  const line = (cells: string[]) => cells.map((cell, c) => cell.padStart(widths[c]!)).join('  ');
  lines.push('measured, best first:', line(header), ...rows.map(line));
  if (result.curve.length > 0) {
    lines.push('', `curve of the recommendation (clients: req/s, p50 / p99 ms):`);
    for (const p of result.curve)
      lines.push(
        `  ${String(p.concurrency).padStart(3)}: ${f(p.throughputPerSec).padStart(8)}/s  ${f(p.p50Ms)} / ${f(p.p99Ms)}${p.errors > 0 ? `  (${p.errors} errors)` : ''}`,
      );
  }
  for (const s of result.skipped) lines.push(`skipped ${s.config}: ${s.reason}`);
  return lines.join('\n');
}
