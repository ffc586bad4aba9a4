import { existsSync } from 'node:fs';
import { stat } from 'node:fs/promises';
import os from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  experimentNames,
  type BenchResult,
  type ExperimentName,
  type MemoryVariant,
  type ReferenceTimings,
  type ResultRow,
} from './bench-result.ts';
import { defaultOrtTelemetryOff } from '@marina/archive';
import { benchErrors } from './errors.ts';
import { CEILING_NOISE_TOLERANCE, runCeiling } from './experiments/ceiling.ts';
import { median, readLoadAverage } from './stats.ts';
import { runDecentralized } from './experiments/decentralized.ts';
import type { BenchProgressEvent, ExperimentContext, RunPlan } from './experiments/experiment-context.ts';
import { runMemory } from './experiments/memory.ts';
import { manyModelsPlan, runManyModels } from './experiments/many-models.ts';
import { measureTensorOwnTime, runOverhead } from './experiments/overhead.ts';
import {
  runBatched,
  runCentralized,
  runSweep,
  runWorkers,
  type ServerRunResult,
} from './experiments/server-experiments.ts';
import { runProtocols } from './experiments/protocols.ts';
import type { Int8Summary, ManyModelsSummary } from './bench-result.ts';
import { runTraffic } from './experiments/traffic.ts';
import { runPriorities, runTracing } from './experiments/tracing-priorities.ts';
import { explainInt8Time, INT8_ROUNDS, runInt8 } from './experiments/int8.ts';
import { prepareInt8Assets } from './int8-assets.ts';
import { getMachineInfo } from './machine-info.ts';
import {
  benchModelNames,
  defaultCacheDir,
  prepareAssets,
  prepareTensorAssets,
  type BenchModelName,
} from './model-assets.ts';
import { writeReports, type ReportFiles } from './report/write-reports.ts';
import { bestOf, bestServerRow, checkTargets } from './targets.ts';

export type BenchMode = 'full' | 'quick' | 'smoke';

export interface BenchOptions {
  /** 'full' (ResNet-152, all experiments, 10–20 min on 2 cores), 'quick' (ResNet-18, a few minutes), 'smoke' (tiny model, seconds, for CI). Default 'full'. */
  mode?: BenchMode;
  /** Overrides the mode's model. */
  model?: BenchModelName;
  /** Requests per server experiment; overrides the mode's count. */
  images?: number;
  /** Client concurrency of the server experiments. Default 100 (smoke: 8). */
  concurrency?: number;
  /** Which experiments to run, in the fixed order of `experimentNames`. Default all (smoke: all but memory, int8, traffic, tracing and priorities). */
  experiments?: readonly ExperimentName[];
  /** Output folder. Default `bench-results/<timestamp>` under the directory pnpm was started from. */
  outDir?: string;
  /** Model cache. Default $MARINA_CACHE_DIR or ~/.cache/marina/bench. */
  cacheDir?: string;
  /** The serve CLI. Default: @marina/serve's bin/serve.js in this workspace. */
  serveBin?: string;
  /**
   * Where the servers' TMPDIRs go (`marina-bench`, `marina-bench-int8`, ...: their pid files and their
   * extraction and optimised-model caches, reused by later runs). Default os.tmpdir(). Two bench runs
   * at once need different roots: a server's pid file would otherwise stop the other run's server.
   */
  serverTmpRoot?: string;
  onProgress?: (event: BenchProgressEvent) => void;
}

const plans: Record<BenchMode, { model: BenchModelName; plan: RunPlan }> = {
  full: {
    model: 'resnet-152',
    plan: {
      images: 200,
      concurrency: 100,
      decentralizedJobs: 24,
      decentralizedCaps: [1, 2, 4, 8],
      ceilingBatchSizes: [1, 2, 4, 8],
      ceilingMinDurationMs: 8_000,
      sweepConcurrencies: [1, 2, 4, 8, 16, 32, 64],
      sweepMinRequests: 48,
      maxRunMs: 90_000,
      overheadDurationMs: 5_000,
      overheadConcurrency: 32,
    },
  },
  quick: {
    model: 'resnet-18',
    plan: {
      images: 150,
      concurrency: 100,
      decentralizedJobs: 8,
      decentralizedCaps: [1, 2, 4],
      ceilingBatchSizes: [1, 2, 4, 8],
      ceilingMinDurationMs: 1_500,
      sweepConcurrencies: [1, 4, 16, 64],
      sweepMinRequests: 40,
      maxRunMs: 15_000,
      overheadDurationMs: 2_000,
      overheadConcurrency: 32,
    },
  },
  smoke: {
    model: 'tiny',
    plan: {
      images: 40,
      concurrency: 8,
      decentralizedJobs: 3,
      decentralizedCaps: [1, 2],
      ceilingBatchSizes: [1, 8],
      ceilingMinDurationMs: 200,
      sweepConcurrencies: [1, 4],
      sweepMinRequests: 20,
      maxRunMs: 5_000,
      overheadDurationMs: 500,
      overheadConcurrency: 8,
    },
  },
};

/** The serve CLI inside this workspace (through the bench's own dependency link). */
export function defaultServeBin(): string {
  const packageDir = dirname(dirname(fileURLToPath(import.meta.url)));
  return join(packageDir, 'node_modules', '@marina', 'serve', 'bin', 'serve.js');
}

function defaultOutDir(startedAt: Date): string {
  // pnpm runs the bin inside packages/bench; INIT_CWD is where the user typed `pnpm bench`.
  const base = process.env.INIT_CWD ?? process.cwd();
  return join(base, 'bench-results', startedAt.toISOString().replace(/[:.]/g, '-').replace('Z', ''));
}

function checkPositiveInteger(name: string, value: number | undefined): void {
  if (value !== undefined && (!Number.isInteger(value) || value < 1)) {
    throw benchErrors.create.MARINA_ERR_BENCH_OPTION_INVALID(
      `${name} must be a whole number of 1 or more, got ${value}`,
    );
  }
}

/**
 * Runs the benchmark (ceiling, decentralized jobs, centralized server, batched,
 * workers, concurrency sweep, plus overhead and memory checks) side by side in one run,
 * writes results.csv, report.md, chart.svg and result.json into `outDir` (and `../latest`),
 * and returns what was measured. Never prints; progress goes to `onProgress`.
 *
 * @throws MARINA_ERR_BENCH_OPTION_INVALID for a bad option; MARINA_ERR_BENCH_DEPENDENCY_MISSING when the serve CLI or a workspace package is missing;
 *   MARINA_ERR_BENCH_SERVER_START_FAILED / MARINA_ERR_BENCH_CHILD_FAILED / MARINA_ERR_BENCH_REQUESTS_FAILED when a measured process fails.
 */
export async function runBench(options: BenchOptions = {}): Promise<{ result: BenchResult; files: ReportFiles }> {
  defaultOrtTelemetryOff(); // its job processes inherit it
  const mode = options.mode ?? 'full';
  if (!(mode in plans))
    throw benchErrors.create.MARINA_ERR_BENCH_OPTION_INVALID(
      `mode must be one of ${Object.keys(plans).join(', ')}, got '${mode}'`,
    );
  const model = options.model ?? plans[mode].model;
  if (!benchModelNames.includes(model))
    throw benchErrors.create.MARINA_ERR_BENCH_OPTION_INVALID(
      `model must be one of ${benchModelNames.join(', ')}, got '${model}'`,
    );
  checkPositiveInteger('images', options.images);
  checkPositiveInteger('concurrency', options.concurrency);
  const unknown = (options.experiments ?? []).filter((e) => !experimentNames.includes(e));
  if (unknown.length > 0)
    throw benchErrors.create.MARINA_ERR_BENCH_OPTION_INVALID(
      `unknown experiment(s) ${unknown.join(', ')}; choose from ${experimentNames.join(', ')}`,
    );
  const selected = new Set(
    options.experiments ??
      experimentNames.filter(
        (e) =>
          !(
            mode === 'smoke' &&
            (e === 'memory' ||
              e === 'int8' ||
              e === 'traffic' ||
              e === 'tracing' ||
              e === 'priorities' ||
              e === 'many-models')
          ),
      ),
  );
  const plan: RunPlan = {
    ...plans[mode].plan,
    ...(options.images ? { images: options.images } : {}),
    ...(options.concurrency ? { concurrency: options.concurrency } : {}),
  };
  const needsServer = [
    'centralized',
    'batched',
    'workers',
    'sweep',
    'overhead',
    'memory',
    'protocols',
    'int8',
    'traffic',
    'tracing',
    'priorities',
    'many-models',
  ].some((e) => selected.has(e as ExperimentName));
  const serveBin = resolve(options.serveBin ?? process.env.MARINA_SERVE_BIN ?? defaultServeBin());
  if (needsServer && !existsSync(serveBin)) {
    throw benchErrors.create.MARINA_ERR_BENCH_DEPENDENCY_MISSING(
      `the serve CLI is not at ${serveBin}; run \`pnpm install\` at the repository root, pass --serve-bin, or leave the server experiments out with --experiments ceiling,decentralized`,
    );
  }

  const onProgress = options.onProgress ?? (() => undefined);
  const startedAt = new Date();
  const outDir = resolve(options.outDir ?? defaultOutDir(startedAt));
  const cpuCount = os.availableParallelism();
  const assets = await prepareAssets({
    model,
    cacheDir: options.cacheDir,
    onStatus: (message) => onProgress({ type: 'log', message }),
  });
  const tensorAssets =
    selected.has('overhead') || selected.has('protocols') || selected.has('traffic') || selected.has('tracing')
      ? await prepareTensorAssets({ cacheDir: options.cacheDir })
      : undefined;
  const modelBytes = (await stat(assets.modelPath)).size;
  if (selected.has('int8') && model === 'tiny') {
    throw benchErrors.create.MARINA_ERR_BENCH_OPTION_INVALID(
      'the int8 experiment needs a ResNet (--model resnet-18|resnet-50|resnet-152, or --quick); the tiny model is too small to quantise meaningfully',
    );
  }
  const int8Assets = selected.has('int8')
    ? await prepareInt8Assets(assets, { onStatus: (message) => onProgress({ type: 'log', message }) })
    : undefined;
  const context: ExperimentContext = {
    assets,
    tensorAssets,
    plan,
    serveBin,
    workDir: join(outDir, 'servers'),
    serverTmpRoot: resolve(options.serverTmpRoot ?? os.tmpdir()),
    cpuCount,
    onProgress,
  };

  const rows: ResultRow[] = [];
  const notes: string[] = [];
  let memory: MemoryVariant[] = [];
  const references: ReferenceTimings = {
    ownEndToEndP50Ms: Number.NaN,
    ownInferP50Ms: Number.NaN,
    tinyOwnEndToEndP50Ms: Number.NaN,
    tinyOwnInferP50Ms: Number.NaN,
    loneClientPairs: [],
    overheadRounds: [],
  };
  const serverRuns: ServerRunResult[] = [];

  // The machine may be shared: the load average around each experiment says how quiet it was.
  const loadAverages: string[] = [];
  const withLoadAverage = async <T>(name: string, body: () => Promise<T>): Promise<T> => {
    const before = readLoadAverage();
    try {
      return await body();
    } finally {
      loadAverages.push(`${name} ${before.toFixed(2)} → ${readLoadAverage().toFixed(2)}`);
    }
  };

  if (selected.has('ceiling')) {
    const { rows: ceilingRows, ownTime, noisyBatchSizes } = await withLoadAverage('ceiling', () => runCeiling(context));
    rows.push(...ceilingRows);
    references.ownEndToEndP50Ms = ownTime.endToEndP50Ms;
    references.ownInferP50Ms = ownTime.inferP50Ms;
    if (noisyBatchSizes.length > 0) {
      notes.push(
        `Noisy ceiling: the repeats of batch ${noisyBatchSizes.join('/')} disagreed by more than ${CEILING_NOISE_TOLERANCE * 100}% even after a retry (another process took the cores), so every ratio to the ceiling is suspect: rerun on a quiet machine.`,
      );
    }
  }
  if (selected.has('decentralized'))
    rows.push(...(await withLoadAverage('decentralized', () => runDecentralized(context))));
  const addServerRuns = (runs: ServerRunResult[], extraRows: ResultRow[] = []) => {
    serverRuns.push(...runs);
    rows.push(...runs.map((r) => r.row), ...extraRows);
  };
  if (selected.has('centralized')) addServerRuns([await withLoadAverage('centralized', () => runCentralized(context))]);
  if (selected.has('batched')) {
    const { loaded, lone, lonePairs } = await withLoadAverage('batched', () => runBatched(context));
    addServerRuns([loaded], [lone]);
    references.loneClientPairs = lonePairs;
    if (!selected.has('ceiling') && lonePairs.length > 0) {
      // No ceiling run: the report's own time is that of the own-time runs beside the lone client.
      references.ownEndToEndP50Ms = median(lonePairs.map((p) => p.ownEndToEndMs));
      references.ownInferP50Ms = median(lonePairs.map((p) => p.ownInferMs));
    }
  }
  if (selected.has('workers')) addServerRuns(await withLoadAverage('workers', () => runWorkers(context)));
  let bestServerConfig: string | undefined;
  if (selected.has('sweep')) {
    const bestRow = bestServerRow(rows);
    const spec = serverRuns.find((r) => r.row === bestRow)?.spec ?? { label: '1 worker, defaults' };
    bestServerConfig = spec.label;
    rows.push(...(await withLoadAverage('sweep', () => runSweep(context, spec))));
  }
  if (selected.has('overhead') && tensorAssets) {
    const own = await measureTensorOwnTime(tensorAssets);
    references.tinyOwnEndToEndP50Ms = own.endToEndP50Ms;
    references.tinyOwnInferP50Ms = own.inferP50Ms;
    const overhead = await withLoadAverage('overhead', () => runOverhead(context));
    rows.push(...overhead.rows);
    references.overheadRounds = overhead.rounds;
  }
  if (selected.has('protocols')) {
    const measured = await withLoadAverage('protocols', () => runProtocols(context));
    rows.push(...measured.rows);
    notes.push(...measured.notes);
  }
  if (selected.has('traffic')) {
    const measured = await withLoadAverage('traffic', () => runTraffic(context));
    rows.push(...measured.rows);
    notes.push(...measured.notes);
  }
  if (selected.has('tracing')) {
    const measured = await withLoadAverage('tracing', () => runTracing(context));
    rows.push(...measured.rows);
    notes.push(...measured.notes);
  }
  if (selected.has('priorities')) {
    const measured = await withLoadAverage('priorities', () => runPriorities(context));
    rows.push(...measured.rows);
    notes.push(...measured.notes);
  }
  if (selected.has('memory')) {
    const measured = await withLoadAverage('memory', () => runMemory(context));
    rows.push(...measured.rows);
    memory = measured.variants;
  }

  let manyModels: ManyModelsSummary | undefined;
  if (selected.has('many-models')) {
    const measured = await withLoadAverage('many-models', () =>
      runManyModels(context, manyModelsPlan(mode), options.cacheDir ?? defaultCacheDir()),
    );
    rows.push(...measured.rows);
    manyModels = measured.summary;
  }

  let int8: Int8Summary | undefined;
  if (selected.has('int8') && int8Assets) {
    const measured = await withLoadAverage('int8', () => runInt8(context, int8Assets, { rounds: INT8_ROUNDS[mode] }));
    rows.push(...measured.rows);
    int8 = measured.summary;
    notes.push(
      `int8: ${int8.rounds} rounds each of ${int8.imagesPerRound} requests at ${plan.concurrency} clients, fp32, int8 and int8 with ${int8.int8WorkersConfig} alternating, all three servers running throughout (${int8.serverConfig} for the first two); int8 archive made by \`${int8.quantizeCommand}\`; its accuracy check: ${int8.agreement}. ${explainInt8Time(int8)}`,
    );
  }

  const ceiling = bestOf(rows, 'ceiling');
  const decentralized = bestOf(rows, 'decentralized');
  for (const row of rows) {
    if (
      row.experiment === 'overhead' ||
      row.experiment === 'memory' ||
      row.experiment === 'many-models' ||
      row.config.startsWith('1 MB') ||
      row.config.startsWith('tensor model')
    )
      continue;
    // The int8 rows' ratio is to the int8 ceiling (set by the experiment); the fp32 server's to the fp32 ceiling, when measured.
    if (row.experiment === 'int8') {
      if (ceiling && row.config.startsWith('fp32'))
        row.ratioToCeiling = row.throughputPerSec / ceiling.throughputPerSec;
      continue;
    }
    if (ceiling) row.ratioToCeiling = row.throughputPerSec / ceiling.throughputPerSec;
    if (decentralized) row.ratioToBestDecentralized = row.throughputPerSec / decentralized.throughputPerSec;
  }
  if (loadAverages.length > 0)
    notes.push(
      `Load average (1 min) before → after each experiment, on ${cpuCount} cores: ${loadAverages.join('; ')}.`,
    );
  const errorRows = rows.filter((r) => r.errors > 0);
  if (errorRows.length > 0)
    notes.push(
      `Requests or jobs failed in: ${errorRows.map((r) => `${r.experiment} ${r.config} (${r.errors})`).join('; ')}.`,
    );
  notes.push(
    `Server runs: one process tree started from ${serveBin} with a generated config.properties (logs under ${context.workDir}).`,
  );
  const modelSizeMb = modelBytes / 1_000_000; // decimal MB, like every size Marina prints
  const machine = getMachineInfo();
  const result: BenchResult = {
    machine,
    model,
    modelSizeMb,
    images: plan.images,
    concurrency: plan.concurrency,
    mode,
    startedAt: startedAt.toISOString(),
    durationSec: (Date.now() - startedAt.getTime()) / 1000,
    rows,
    references,
    memory,
    bestServerConfig,
    notes,
    ...(int8 ? { int8 } : {}),
    ...(manyModels ? { manyModels } : {}),
    targets: checkTargets({ model, rows, references, memory, modelSizeMb, cpuCount, int8, cpuFlags: machine.cpuFlags }),
  };
  const files = await writeReports(result, outDir);
  return { result, files };
}
