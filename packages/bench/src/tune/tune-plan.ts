import type { ServerModelSettings } from '../server-process.ts';

/** One configuration of a model version on the server. */
export interface TuneConfig {
  workers: number;
  /** intraOpNumThreads per worker; workers × threads never exceeds the cores. */
  threads: number;
  batchSize: number;
  /** ms; 0 for batch size 1 (nothing to wait for). */
  maxBatchDelay: number;
}

export interface TuneMeasurement extends TuneConfig {
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

export interface TuneCurvePoint {
  concurrency: number;
  throughputPerSec: number;
  p50Ms: number;
  p99Ms: number;
  requests: number;
  errors: number;
}

/** A configuration planned but not measured, and why (budget, a failed start). */
export interface SkippedConfig {
  config: string;
  reason: string;
}

/** The request every measurement sends, and the model it goes to. */
export interface TuneInput {
  body: Buffer;
  contentType: string;
  /** Where the body came from: the file name, or the handler it was made for. */
  from: string;
  handler: string;
  modelName: string;
  modelVersion: string;
}

/** A configuration as people read it: `2 worker(s) x 4 thread(s), batch 8, maxBatchDelay 5 ms`. */
export function describeConfig(c: TuneConfig): string {
  return `${c.workers} worker(s) x ${c.threads} thread(s), batch ${c.batchSize}${c.batchSize > 1 ? `, maxBatchDelay ${c.maxBatchDelay} ms` : ''}`;
}

/** The `models=` settings of a configuration (TorchServe's keys plus Marina's intraOpNumThreads). */
export function configSettings(c: TuneConfig): ServerModelSettings {
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
export function configLines(options: {
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
export function batchSizes(max: number): number[] {
  const sizes: number[] = [];
  for (let b = 4; b < max; b *= 2) sizes.push(b);
  if (max > 1) sizes.push(max);
  return sizes;
}

/** Best first: the highest throughput; within 5% of each other (the noise of a short run), the lower p99. */
export function rank(a: TuneMeasurement, b: TuneMeasurement): number {
  const top = Math.max(a.throughputPerSec, b.throughputPerSec);
  if (top > 0 && Math.abs(a.throughputPerSec - b.throughputPerSec) / top <= 0.05) return a.p99Ms - b.p99Ms;
  return b.throughputPerSec - a.throughputPerSec;
}
