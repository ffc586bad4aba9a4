import { join } from 'node:path';
import { readFile } from 'node:fs/promises';
import { emptyRow, type ExperimentName, type ResultRow } from '../bench-result.ts';
import type { BenchAssets, TensorAssets } from '../model-assets.ts';
import { listProcessTree, startProcessSampler, type ResourceUsage } from '../process-sampler.ts';
import { runLoad, type LoadResult } from '../load-generator.ts';
import { startServer, type RunningServer, type ServerModelSettings } from '../server-process.ts';
import { bestOfRepeats, summarizeLatencies, type LatencySummary } from '../stats.ts';

/** Progress events a run reports; the CLI draws them as a bar. */
export type BenchProgressEvent =
  | { type: 'phase'; label: string; total: number }
  | { type: 'tick'; done: number }
  | { type: 'log'; message: string };

/** The sizes of one run (full, quick or smoke), after flags are applied. */
export interface RunPlan {
  /** Requests per server experiment (centralized, batched, workers). */
  images: number;
  /** Client concurrency of those experiments. */
  concurrency: number;
  /** Jobs per decentralized cap. */
  decentralizedJobs: number;
  decentralizedCaps: number[];
  ceilingBatchSizes: number[];
  /** Minimum time per ceiling batch size, ms. */
  ceilingMinDurationMs: number;
  sweepConcurrencies: number[];
  /** Requests per sweep level at least; levels also send 4 × concurrency. */
  sweepMinRequests: number;
  /** Longest a single load run may take, ms (bounds slow levels on a loaded machine). */
  maxRunMs: number;
  /** Time per overhead measurement, ms. */
  overheadDurationMs: number;
  /** Client concurrency of the overhead comparison. */
  overheadConcurrency: number;
}

export interface ExperimentContext {
  assets: BenchAssets;
  /** The tensor model 2x+1, for the overhead experiment. */
  tensorAssets: TensorAssets | undefined;
  plan: RunPlan;
  serveBin: string;
  /** Folder for server logs and configs of this run. */
  workDir: string;
  /** Where the servers' TMPDIRs go (BenchOptions.serverTmpRoot): see `serverTmpDir`. */
  serverTmpRoot: string;
  cpuCount: number;
  onProgress: (event: BenchProgressEvent) => void;
}

/** Decimal megabytes, the unit marina-models and model-archiver print sizes in. */
const MB = 1_000_000;

/** Fills a row's latency, throughput and resource columns from one load run. */
/** The measured columns every row shares: latency percentiles and the process tree's CPU and memory. */
export function measuredColumns(
  latency: Pick<LatencySummary, 'p50Ms' | 'p90Ms' | 'p99Ms'>,
  usage: ResourceUsage,
): Pick<ResultRow, 'p50Ms' | 'p90Ms' | 'p99Ms' | 'peakCpuPercent' | 'meanCpuPercent' | 'peakRssMb'> {
  return {
    p50Ms: latency.p50Ms,
    p90Ms: latency.p90Ms,
    p99Ms: latency.p99Ms,
    peakCpuPercent: usage.peakCpuPercent,
    meanCpuPercent: usage.meanCpuPercent,
    peakRssMb: usage.peakRssBytes / MB,
  };
}

export function rowFromLoad(
  experiment: ExperimentName,
  config: string,
  concurrency: number,
  load: LoadResult,
  usage: ResourceUsage,
): ResultRow {
  const latency = summarizeLatencies(load.latenciesMs);
  return {
    ...emptyRow(experiment, config),
    images: latency.count,
    concurrency,
    throughputPerSec: load.throughputPerSec,
    ...measuredColumns(latency, usage),
    pssMb: usage.lastPssBytes > 0 ? usage.lastPssBytes / MB : Number.NaN,
    errors: load.errors,
    note: load.firstError ? `first error: ${load.firstError.slice(0, 120)}` : '',
  };
}

let serverCounter = 0;

/**
 * A server's TMPDIR under the run's `serverTmpRoot`: its pid file, and the extraction and
 * optimised-model caches later runs reuse. Servers that run at the same time need different names.
 */
export function serverTmpDir(context: Pick<ExperimentContext, 'serverTmpRoot'>, name = 'marina-bench'): string {
  return join(context.serverTmpRoot, name);
}

/** Starts a server for `archiveFileName` with `settings`, runs `body`, always stops it. */
export async function withServer<T>(
  context: ExperimentContext,
  options: {
    assets?: BenchAssets;
    model?: Pick<TensorAssets, 'modelStoreDir' | 'archiveFileName' | 'modelVersion'>;
    archiveFileName?: string;
    settings?: ServerModelSettings;
    env?: Record<string, string>;
    label: string;
    tmpDir?: string;
  },
  body: (server: RunningServer, modelPath: string) => Promise<T>,
): Promise<T> {
  serverCounter += 1;
  const model = options.model ?? options.assets!;
  const archiveFileName = options.archiveFileName ?? model.archiveFileName;
  const modelName = archiveFileName.replace(/\.mar$/, '');
  context.onProgress({ type: 'log', message: `starting server: ${options.label}` });
  const server = await startServer({
    serveBin: context.serveBin,
    modelStoreDir: model.modelStoreDir,
    archiveFileName,
    modelName,
    modelVersion: model.modelVersion,
    settings: options.settings,
    // Default queue (100) unless the clients alone would overflow it.
    jobQueueSize: context.plan.concurrency > 90 ? context.plan.concurrency + 50 : undefined,
    env: options.env,
    tmpDir: options.tmpDir ?? serverTmpDir(context),
    workDir: join(
      context.workDir,
      `server-${String(serverCounter).padStart(2, '0')}-${options.label.replace(/[^a-z0-9]+/gi, '-').toLowerCase()}`,
    ),
  });
  try {
    return await body(server, `/predictions/${modelName}`);
  } finally {
    await server.stop();
  }
}

/** One measured load run against a running server, with the server tree sampled every 100 ms. */
export async function measureServerLoad(
  context: ExperimentContext,
  server: RunningServer,
  options: {
    path: string;
    body: Buffer;
    contentType?: string;
    headers?: Record<string, string>;
    concurrency: number;
    requests: number;
    warmupRequests: number;
    label: string;
    experiment: ExperimentName;
    durationMs?: number;
    isPssSampled?: boolean;
  },
): Promise<ResultRow> {
  context.onProgress({ type: 'phase', label: options.label, total: options.requests });
  let tree = listProcessTree(server.pid);
  let lastListMs = performance.now();
  const getPids = () => {
    // Re-list the tree now and then: a server may start worker processes late.
    if (performance.now() - lastListMs > 1000) {
      tree = listProcessTree(server.pid);
      lastListMs = performance.now();
    }
    return tree;
  };
  // Warm-up first (not sampled), so load-time memory and CPU do not count as serving.
  await runLoad({
    origin: server.origin,
    path: options.path,
    body: options.body,
    contentType: options.contentType,
    headers: options.headers,
    concurrency: options.concurrency,
    requests: 0,
    warmupRequests: options.warmupRequests,
  });
  const sampler = startProcessSampler({ getPids, isPssSampled: options.isPssSampled });
  let load: LoadResult;
  try {
    load = await runLoad({
      origin: server.origin,
      path: options.path,
      body: options.body,
      contentType: options.contentType,
      headers: options.headers,
      concurrency: options.concurrency,
      requests: options.requests,
      durationMs: options.durationMs ?? context.plan.maxRunMs,
      onProgress: (done) => context.onProgress({ type: 'tick', done }),
    });
  } finally {
    sampler.sample();
  }
  const usage = sampler.stop();
  return rowFromLoad(options.experiment, options.label, options.concurrency, load, usage);
}

/** The sample JPEG of a model, read once per experiment. */
export function readImage(assets: BenchAssets): Promise<Buffer> {
  return readFile(assets.imagePath);
}

/**
 * The best of one configuration's rounds (measured in turns with the others, so a drift of the
 * machine's speed falls on all alike), its note listing every round's throughput in `unit` and
 * flagging rounds too far apart ("noisy").
 */
export function bestRound(rounds: readonly ResultRow[], unit: 'req/s' | 'img/s', digits: number): ResultRow {
  const verdict = bestOfRepeats(rounds.map((r) => r.throughputPerSec));
  const row = rounds[verdict.bestIndex]!;
  const repeats = rounds.map((r) => r.throughputPerSec.toFixed(digits)).join(' / ');
  return {
    ...row,
    note: [row.note, `best of rounds ${repeats} ${unit}${verdict.isNoisy ? ' (noisy: rerun on a quiet machine)' : ''}`]
      .filter(Boolean)
      .join('; '),
  };
}
