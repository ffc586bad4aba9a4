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
  /**
   * The many-models experiment's budget: the all-resident server's memory for the models ÷ this.
   * Default 3, the issue's goal (a budget that holds about a third of the models).
   */
  manyModelsBudgetDivisor?: number;
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
  const run = resolveRun(options);
  const startedAt = new Date();
  const outDir = resolve(options.outDir ?? defaultOutDir(startedAt));
  const prepared = await prepareRun({ options, run, outDir });
  const measured = newMeasured();
  await runClientAndServerExperiments(prepared.context, run.selected, measured);
  await runOtherExperiments({ context: prepared.context, run, options, int8Assets: prepared.int8Assets, measured });
  setRatios(measured.rows);
  addRunNotes({ measured, cpuCount: prepared.context.cpuCount, context: prepared.context });
  const modelSizeMb = prepared.modelBytes / 1_000_000; // decimal MB, like every size Marina prints
  const machine = getMachineInfo();
  const { rows, references, memory, int8, manyModels } = measured;
  const result: BenchResult = {
    machine,
    model: run.model,
    modelSizeMb,
    images: run.plan.images,
    concurrency: run.plan.concurrency,
    mode: run.mode,
    startedAt: startedAt.toISOString(),
    durationSec: (Date.now() - startedAt.getTime()) / 1000,
    rows,
    references,
    memory,
    bestServerConfig: measured.bestServerConfig,
    notes: measured.notes,
    ...(int8 ? { int8 } : {}),
    ...(manyModels ? { manyModels } : {}),
    targets: checkTargets({
      model: run.model,
      rows,
      references,
      memory,
      modelSizeMb,
      cpuCount: prepared.context.cpuCount,
      int8,
      cpuFlags: machine.cpuFlags,
    }),
  };
  const files = await writeReports(result, outDir);
  return { result, files };
}

/** What a run measures, decided from the options before anything runs. */
interface ResolvedRun {
  mode: BenchMode;
  model: BenchModelName;
  selected: Set<ExperimentName>;
  plan: RunPlan;
  serveBin: string;
}

/** The experiments that start a server: all but onnxruntime alone (ceiling) and the decentralized jobs. */
const SERVER_EXPERIMENTS: readonly ExperimentName[] = experimentNames.filter(
  (name) => name !== 'ceiling' && name !== 'decentralized',
);

/** The experiments a smoke run leaves out unless asked for. */
const NOT_IN_SMOKE: readonly ExperimentName[] = ['memory', 'int8', 'traffic', 'tracing', 'priorities', 'many-models'];

/**
 * Checks the options and picks the experiments and the plan.
 * @throws MARINA_ERR_BENCH_OPTION_INVALID, MARINA_ERR_BENCH_DEPENDENCY_MISSING (no serve CLI for a server experiment).
 */
function resolveRun(options: BenchOptions): ResolvedRun {
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
    options.experiments ?? experimentNames.filter((e) => !(mode === 'smoke' && NOT_IN_SMOKE.includes(e))),
  );
  const plan: RunPlan = {
    ...plans[mode].plan,
    ...(options.images ? { images: options.images } : {}),
    ...(options.concurrency ? { concurrency: options.concurrency } : {}),
  };
  const serveBin = resolve(options.serveBin ?? process.env.MARINA_SERVE_BIN ?? defaultServeBin());
  if (SERVER_EXPERIMENTS.some((e) => selected.has(e)) && !existsSync(serveBin)) {
    throw benchErrors.create.MARINA_ERR_BENCH_DEPENDENCY_MISSING(
      `the serve CLI is not at ${serveBin}; run \`pnpm install\` at the repository root, pass --serve-bin, or leave the server experiments out with --experiments ceiling,decentralized`,
    );
  }
  return { mode, model, selected, plan, serveBin };
}

/**
 * The model files the selected experiments need, and their shared context.
 * @throws MARINA_ERR_BENCH_OPTION_INVALID for int8 with the tiny model.
 */
async function prepareRun(options: { options: BenchOptions; run: ResolvedRun; outDir: string }) {
  const { run } = options;
  const { cacheDir } = options.options;
  const onProgress = options.options.onProgress ?? (() => undefined);
  const onStatus = (message: string) => onProgress({ type: 'log', message });
  const assets = await prepareAssets({ model: run.model, cacheDir, onStatus });
  const needsTensorModel = (['overhead', 'protocols', 'traffic', 'tracing'] as const).some((e) => run.selected.has(e));
  const tensorAssets = needsTensorModel ? await prepareTensorAssets({ cacheDir }) : undefined;
  const modelBytes = (await stat(assets.modelPath)).size;
  if (run.selected.has('int8') && run.model === 'tiny') {
    throw benchErrors.create.MARINA_ERR_BENCH_OPTION_INVALID(
      'the int8 experiment needs a ResNet (--model resnet-18|resnet-50|resnet-152, or --quick); the tiny model is too small to quantise meaningfully',
    );
  }
  const int8Assets = run.selected.has('int8') ? await prepareInt8Assets(assets, { onStatus }) : undefined;
  const context: ExperimentContext = {
    assets,
    tensorAssets,
    plan: run.plan,
    serveBin: run.serveBin,
    workDir: join(options.outDir, 'servers'),
    serverTmpRoot: resolve(options.options.serverTmpRoot ?? os.tmpdir()),
    cpuCount: os.availableParallelism(),
    onProgress,
  };
  return { context, modelBytes, int8Assets };
}

/** What the experiments measured so far, filled in as they run. */
interface Measured {
  rows: ResultRow[];
  notes: string[];
  references: ReferenceTimings;
  serverRuns: ServerRunResult[];
  memory: MemoryVariant[];
  /** `<experiment> <before> → <after>`: the machine may be shared, so the load average says how quiet it was. */
  loadAverages: string[];
  bestServerConfig?: string;
  manyModels?: ManyModelsSummary;
  int8?: Int8Summary;
}

function newMeasured(): Measured {
  return {
    rows: [],
    notes: [],
    references: {
      ownEndToEndP50Ms: Number.NaN,
      ownInferP50Ms: Number.NaN,
      tinyOwnEndToEndP50Ms: Number.NaN,
      tinyOwnInferP50Ms: Number.NaN,
      loneClientPairs: [],
      overheadRounds: [],
    },
    serverRuns: [],
    memory: [],
    loadAverages: [],
  };
}

/** Runs one experiment, recording the 1-minute load average before and after it. */
async function withLoadAverage<T>(measured: Measured, name: string, body: () => Promise<T>): Promise<T> {
  const before = readLoadAverage();
  try {
    return await body();
  } finally {
    measured.loadAverages.push(`${name} ${before.toFixed(2)} → ${readLoadAverage().toFixed(2)}`);
  }
}

/** The ceiling, the decentralized jobs, and the server experiments the sweep compares (centralized, batched, workers, sweep). */
async function runClientAndServerExperiments(
  context: ExperimentContext,
  selected: Set<ExperimentName>,
  measured: Measured,
): Promise<void> {
  const { rows, references } = measured;
  const timed = <T>(name: string, body: () => Promise<T>) => withLoadAverage(measured, name, body);
  if (selected.has('ceiling')) {
    const { rows: ceilingRows, ownTime, noisyBatchSizes } = await timed('ceiling', () => runCeiling(context));
    rows.push(...ceilingRows);
    references.ownEndToEndP50Ms = ownTime.endToEndP50Ms;
    references.ownInferP50Ms = ownTime.inferP50Ms;
    if (noisyBatchSizes.length > 0) {
      measured.notes.push(
        `Noisy ceiling: the repeats of batch ${noisyBatchSizes.join('/')} disagreed by more than ${CEILING_NOISE_TOLERANCE * 100}% even after a retry (another process took the cores), so every ratio to the ceiling is suspect: rerun on a quiet machine.`,
      );
    }
  }
  if (selected.has('decentralized')) rows.push(...(await timed('decentralized', () => runDecentralized(context))));
  const addServerRuns = (runs: ServerRunResult[], extraRows: ResultRow[] = []) => {
    measured.serverRuns.push(...runs);
    rows.push(...runs.map((r) => r.row), ...extraRows);
  };
  if (selected.has('centralized')) addServerRuns([await timed('centralized', () => runCentralized(context))]);
  if (selected.has('batched')) {
    const { loaded, lone, lonePairs } = await timed('batched', () => runBatched(context));
    addServerRuns([loaded], [lone]);
    references.loneClientPairs = lonePairs;
    if (!selected.has('ceiling') && lonePairs.length > 0) {
      // No ceiling run: the report's own time is that of the own-time runs beside the lone client.
      references.ownEndToEndP50Ms = median(lonePairs.map((p) => p.ownEndToEndMs));
      references.ownInferP50Ms = median(lonePairs.map((p) => p.ownInferMs));
    }
  }
  if (selected.has('workers')) addServerRuns(await timed('workers', () => runWorkers(context)));
  if (selected.has('sweep')) {
    const bestRow = bestServerRow(rows);
    const spec = measured.serverRuns.find((r) => r.row === bestRow)?.spec ?? { label: '1 worker, defaults' };
    measured.bestServerConfig = spec.label;
    rows.push(...(await timed('sweep', () => runSweep(context, spec))));
  }
}

/** Overhead, protocols, traffic, tracing, priorities, memory, many models and int8, each when selected. */
async function runOtherExperiments(options: {
  context: ExperimentContext;
  run: ResolvedRun;
  options: BenchOptions;
  int8Assets: Awaited<ReturnType<typeof prepareInt8Assets>> | undefined;
  measured: Measured;
}): Promise<void> {
  const { context, run, measured } = options;
  const { rows, notes, references } = measured;
  const timed = <T>(name: string, body: () => Promise<T>) => withLoadAverage(measured, name, body);
  if (run.selected.has('overhead') && context.tensorAssets) {
    const tensorAssets = context.tensorAssets;
    const own = await measureTensorOwnTime(tensorAssets);
    references.tinyOwnEndToEndP50Ms = own.endToEndP50Ms;
    references.tinyOwnInferP50Ms = own.inferP50Ms;
    const overhead = await timed('overhead', () => runOverhead(context));
    rows.push(...overhead.rows);
    references.overheadRounds = overhead.rounds;
  }
  for (const [name, runExperiment] of [
    ['protocols', runProtocols],
    ['traffic', runTraffic],
    ['tracing', runTracing],
    ['priorities', runPriorities],
  ] as const) {
    if (!run.selected.has(name)) continue;
    const result = await timed(name, () => runExperiment(context));
    rows.push(...result.rows);
    notes.push(...result.notes);
  }
  if (run.selected.has('memory')) {
    const result = await timed('memory', () => runMemory(context));
    rows.push(...result.rows);
    measured.memory = result.variants;
  }
  if (run.selected.has('many-models')) {
    const cacheDir = options.options.cacheDir ?? defaultCacheDir();
    const result = await timed('many-models', () =>
      runManyModels(context, manyModelsPlan(run.mode, options.options.manyModelsBudgetDivisor), cacheDir),
    );
    rows.push(...result.rows);
    measured.manyModels = result.summary;
  }
  const int8Assets = options.int8Assets;
  if (run.selected.has('int8') && int8Assets) {
    const result = await timed('int8', () => runInt8(context, int8Assets, { rounds: INT8_ROUNDS[run.mode] }));
    rows.push(...result.rows);
    const int8 = result.summary;
    measured.int8 = int8;
    notes.push(
      `int8: ${int8.rounds} rounds each of ${int8.imagesPerRound} requests at ${run.plan.concurrency} clients, fp32 and int8 with ${int8.serverConfig}, then fp32 and int8 with ${int8.workers.config}, alternating, all four servers running throughout; int8 archive made by \`${int8.quantizeCommand}\`; its accuracy check: ${int8.agreement}. ${explainInt8Time(int8)}`,
    );
  }
}

/** Each row's throughput as a share of the ceiling's and of the best decentralized run's. */
function setRatios(rows: ResultRow[]): void {
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
}

/** The notes on the run as a whole: the load averages, the failed requests, where the servers ran. */
function addRunNotes(options: { measured: Measured; cpuCount: number; context: ExperimentContext }): void {
  const { measured } = options;
  if (measured.loadAverages.length > 0)
    measured.notes.push(
      `Load average (1 min) before → after each experiment, on ${options.cpuCount} cores: ${measured.loadAverages.join('; ')}.`,
    );
  const errorRows = measured.rows.filter((r) => r.errors > 0);
  if (errorRows.length > 0)
    measured.notes.push(
      `Requests or jobs failed in: ${errorRows.map((r) => `${r.experiment} ${r.config} (${r.errors})`).join('; ')}.`,
    );
  measured.notes.push(
    `Server runs: one process tree started from ${options.context.serveBin} with a generated config.properties (logs under ${options.context.workDir}).`,
  );
}
