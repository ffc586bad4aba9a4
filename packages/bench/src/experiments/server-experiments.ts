import { Pool } from 'undici';
import { emptyRow, type LoneClientPair, type ResultRow } from '../bench-result.ts';
import { runLoad } from '../load-generator.ts';
import type { RunningServer, ServerModelSettings } from '../server-process.ts';
import { serverTimingDurations } from '../server-timing.ts';
import { startOwnTimeSteps, type OwnRun, type OwnTimeSteps } from './ceiling.ts';
import { listProcessTree, readCpuNs, readRssBytes, waitForQuiet, type ResourceUsage } from '../process-sampler.ts';
import { median, summarizeLatencies } from '../stats.ts';
import {
  measuredColumns,
  measureServerLoad,
  readImage,
  withServer,
  type ExperimentContext,
} from './experiment-context.ts';

/** A server configuration the bench can start again (the sweep reruns the best one). */
export interface ServerSpec {
  label: string;
  /** Archive to load; undefined = the model's inline-weights archive. */
  archiveFileName?: string;
  /** models JSON for the version; undefined = the server's defaults. */
  settings?: ServerModelSettings;
  env?: Record<string, string>;
}

export interface ServerRunResult {
  row: ResultRow;
  spec: ServerSpec;
}

function warmupFor(spec: ServerSpec): number {
  const workers = spec.settings?.minWorkers ?? 1;
  const batch = spec.settings?.batchSize ?? 1;
  return Math.max(4, 2 * workers * batch);
}

async function runServerAtConcurrency(
  context: ExperimentContext,
  experiment: ResultRow['experiment'],
  spec: ServerSpec,
): Promise<ServerRunResult> {
  const body = await readImage(context.assets);
  const row = await withServer(
    context,
    {
      assets: context.assets,
      archiveFileName: spec.archiveFileName,
      settings: spec.settings,
      env: spec.env,
      label: spec.label,
    },
    (server, path) =>
      measureServerLoad(context, server, {
        path,
        body,
        experiment,
        label: spec.label,
        concurrency: context.plan.concurrency,
        requests: context.plan.images,
        warmupRequests: warmupFor(spec),
      }),
  );
  return { row, spec };
}

/** Centralized: one server with default settings, `plan.images` requests at `plan.concurrency` (raw JPEG bodies). */
export function runCentralized(context: ExperimentContext): Promise<ServerRunResult> {
  return runServerAtConcurrency(context, 'centralized', { label: '1 worker, defaults' });
}

/** Lone requests (and own-time runs) in each block of a lone-client turn: back to back, as a lone client sends them. */
export const LONE_CLIENT_BLOCK = 5;

/** What the lone-client pairs say: the target's p50s, the paired differences, and where the difference lies. */
export interface LoneClientSummary {
  pairs: number;
  loneP50Ms: number;
  ownEndToEndP50Ms: number;
  ownInferP50Ms: number;
  /** The target's number: lone p50 − own p50, over every pair's two sides. */
  excessMs: number;
  /** The median of the pairs' differences (lone − own), and its 95% confidence interval (order statistics of the differences). */
  pairedMedianMs: number;
  pairedLowMs: number;
  pairedHighMs: number;
  /** The paired median of what lies outside the model's run: (lone − server inference) − (own end to end − own run); NaN without Server-Timing. */
  outsideRunMs: number;
  /** The paired median of the run itself: server inference − own run; NaN without Server-Timing. */
  runMs: number;
  /**
   * The control (a second, identical own-time process in the same turns): its p50 − the own p50, and the
   * paired median of its run − the own run. The target's resolution here; NaN where no control ran.
   */
  controlExcessMs: number;
  controlRunMs: number;
}

/** Summarises the batched experiment's lone-client pairs; undefined when there are none. */
export function summarizeLoneClient(pairs: readonly LoneClientPair[]): LoneClientSummary | undefined {
  const n = pairs.length;
  if (n === 0) return undefined;
  const differences = pairs.map((p) => p.loneMs - p.ownEndToEndMs).sort((a, b) => a - b);
  // Distribution-free interval for a median: the sorted differences at ranks n/2 − 1.96·√n/2
  // (rounded down) and 1 + n/2 + 1.96·√n/2 (rounded up), 1-based.
  const half = (1.96 * Math.sqrt(n)) / 2;
  const timed = pairs.filter((p) => Number.isFinite(p.serverInferenceMs));
  const controlled = pairs.filter((p) => Number.isFinite(p.controlEndToEndMs) && Number.isFinite(p.controlInferMs));
  const loneP50Ms = median(pairs.map((p) => p.loneMs));
  const ownEndToEndP50Ms = median(pairs.map((p) => p.ownEndToEndMs));
  return {
    pairs: n,
    loneP50Ms,
    ownEndToEndP50Ms,
    ownInferP50Ms: median(pairs.map((p) => p.ownInferMs)),
    excessMs: loneP50Ms - ownEndToEndP50Ms,
    pairedMedianMs: median(differences),
    pairedLowMs: differences[Math.max(1, Math.floor(n / 2 - half)) - 1]!,
    pairedHighMs: differences[Math.min(n, Math.ceil(1 + n / 2 + half)) - 1]!,
    outsideRunMs:
      timed.length === 0
        ? Number.NaN
        : median(timed.map((p) => p.loneMs - p.serverInferenceMs - (p.ownEndToEndMs - p.ownInferMs))),
    runMs: timed.length === 0 ? Number.NaN : median(timed.map((p) => p.serverInferenceMs - p.ownInferMs)),
    controlExcessMs:
      controlled.length === 0
        ? Number.NaN
        : median(controlled.map((p) => p.controlEndToEndMs)) - median(controlled.map((p) => p.ownEndToEndMs)),
    controlRunMs: controlled.length === 0 ? Number.NaN : median(controlled.map((p) => p.controlInferMs - p.ownInferMs)),
  };
}

/**
 * Batched: batchSize 8, maxBatchDelay 100 ms at `plan.concurrency`; then a lone client on the same
 * server, whose latency shows whether the batcher waits when nothing else is coming.
 *
 * The lone client is compared with the model's own time (one process of its own, no server), and
 * this machine's speed drifts by more than the 5 ms being judged, at times within seconds (a
 * p50 of 20 taken a few seconds after the other moved by up to 90 ms here). So the two are
 * measured side by side, in turns: each turn a block of `LONE_CLIENT_BLOCK` lone requests and a
 * block of as many own-time runs, back to back, about `plan.images` of each in all. Request i of a
 * block is paired with run i of the other. A third block in each turn comes from the control, a
 * second own-time process like the first: what separates two identical processes here is what
 * the target can resolve (eight own-time processes taking turns for 80 s lay up to 10 ms apart in
 * one trial on this machine, and within 1.5 ms in the next). Every six turns run the three blocks
 * in each of their six orders once. Each block starts once the other sides' threads are quiet:
 * onnxruntime's pool spins for about 50 ms after a run in an own-time process, which would slow
 * the server's first run. Nothing samples the server while a block runs (a sampler's wake-ups
 * would take a core from the model's threads); its CPU and memory are read between blocks.
 */
export async function runBatched(
  context: ExperimentContext,
): Promise<{ loaded: ServerRunResult; lone: ResultRow; lonePairs: LoneClientPair[] }> {
  const spec: ServerSpec = { label: 'batch 8, delay 100 ms', settings: { batchSize: 8, maxBatchDelay: 100 } };
  const body = await readImage(context.assets);
  const turns = Math.max(2, Math.round(context.plan.images / LONE_CLIENT_BLOCK));
  return withServer(
    context,
    { assets: context.assets, settings: spec.settings, label: spec.label },
    async (server, path) => {
      const loaded = await measureServerLoad(context, server, {
        path,
        body,
        experiment: 'batched',
        label: spec.label,
        concurrency: context.plan.concurrency,
        requests: context.plan.images,
        warmupRequests: warmupFor(spec),
      });
      const label = `${spec.label}, lone client`;
      const measured = await measureLoneClient({ context, server, path, body, label, turns });
      return {
        loaded: { row: loaded, spec },
        lone: loneClientRow({ label, turns, ...measured }),
        lonePairs: measured.pairs,
      };
    },
  );
}

/** The lone blocks' totals: their wall and the server's CPU in them, its memory after each, failures. */
interface LoneTotals {
  wallMs: number;
  cpuNs: number;
  peakCpuPercent: number;
  peakRssBytes: number;
  lastRssBytes: number;
  errors: number;
  firstError: string | undefined;
}

/** What the lone-client turns measured. */
interface LoneClientMeasured {
  pairs: LoneClientPair[];
  latenciesMs: number[];
  totals: LoneTotals;
  /** Blocks that started without the other sides quiet within 2 s. */
  notQuiet: number;
}

/**
 * The lone client, the own-time process and the control, in `turns` turns of one block each (see
 * runBatched): each of the six orders of the three sides once every six turns.
 */
async function measureLoneClient(options: {
  context: ExperimentContext;
  server: RunningServer;
  path: string;
  body: Buffer;
  label: string;
  turns: number;
}): Promise<LoneClientMeasured> {
  const { context, server, path, body, turns } = options;
  const own = await startOwnTimeSteps(context.assets.modelPath, context.assets.imagePath, context.cpuCount);
  let control: OwnTimeSteps;
  try {
    control = await startOwnTimeSteps(context.assets.modelPath, context.assets.imagePath, context.cpuCount);
  } catch (error) {
    await own.stop();
    throw error;
  }
  // One connection for every block, as a lone client keeps it; the warm-up opens it.
  const pool = new Pool(server.origin, { connections: 1, pipelining: 1, keepAliveTimeout: 60_000 });
  const blocks = createLoneBlocks({ context, server, path, body, pool, own, control });
  const pairs: LoneClientPair[] = [];
  try {
    await runLoad({ origin: server.origin, path, body, concurrency: 1, requests: 0, warmupRequests: 2, pool });
    for (let i = 0; i < 2; i++) await own.step();
    for (let i = 0; i < 2; i++) await control.step();
    context.onProgress({ type: 'phase', label: options.label, total: turns * LONE_CLIENT_BLOCK });
    for (let t = 0; t < turns; t++) {
      let lone = { latenciesMs: [] as number[], inferenceMs: [] as number[] };
      let runs: OwnRun[] = [];
      let controlRuns: OwnRun[] = [];
      const sides = [
        async () => {
          runs = await blocks.measureOwn(own, control);
        },
        async () => {
          lone = await blocks.measureLone();
        },
        async () => {
          controlRuns = await blocks.measureOwn(control, own);
        },
      ];
      // Every six turns, each of the six orders of the three sides once.
      for (let k = 0; k < sides.length; k++) await sides[(t + (t % 2 === 0 ? k : sides.length - k)) % sides.length]!();
      lone.latenciesMs.forEach((loneMs, i) => {
        pairs.push({
          loneMs,
          serverInferenceMs: lone.inferenceMs[i] ?? Number.NaN,
          ownEndToEndMs: runs[i]!.endToEndMs,
          ownInferMs: runs[i]!.inferMs,
          controlEndToEndMs: controlRuns[i]!.endToEndMs,
          controlInferMs: controlRuns[i]!.inferMs,
        });
      });
    }
  } finally {
    await pool.close();
    await Promise.all([own.stop(), control.stop()]);
  }
  return { pairs, latenciesMs: blocks.latenciesMs, totals: blocks.totals, notQuiet: blocks.notQuiet() };
}

/** One block of each side: `LONE_CLIENT_BLOCK` own-time runs, or as many lone requests (with the server's CPU and memory around them). */
function createLoneBlocks(options: {
  context: ExperimentContext;
  server: RunningServer;
  path: string;
  body: Buffer;
  pool: Pool;
  own: OwnTimeSteps;
  control: OwnTimeSteps;
}) {
  const { context, server, path, body, pool, own, control } = options;
  const latenciesMs: number[] = [];
  const totals: LoneTotals = {
    wallMs: 0,
    cpuNs: 0,
    peakCpuPercent: 0,
    peakRssBytes: 0,
    lastRssBytes: 0,
    errors: 0,
    firstError: undefined,
  };
  let notQuiet = 0;
  const quiet = async (pids: () => readonly number[]) => {
    if (!(await waitForQuiet(pids))) notQuiet += 1;
  };
  const serverCpuNs = (tree: readonly number[]) => tree.reduce((sum, pid) => sum + readCpuNs(pid), 0);
  return {
    latenciesMs,
    totals,
    notQuiet: () => notQuiet,
    async measureOwn(steps: OwnTimeSteps, other: OwnTimeSteps): Promise<OwnRun[]> {
      // Listed once per block: the waits below read the tree's CPU every 10 ms.
      const pids = [...listProcessTree(server.pid), other.pid];
      await quiet(() => pids);
      const runs: OwnRun[] = [];
      for (let i = 0; i < LONE_CLIENT_BLOCK; i++) runs.push(await steps.step());
      return runs;
    },
    async measureLone(): Promise<{ latenciesMs: number[]; inferenceMs: number[] }> {
      await quiet(() => [own.pid, control.pid]);
      const tree = listProcessTree(server.pid);
      const cpuBefore = serverCpuNs(tree);
      const load = await runLoad({
        origin: server.origin,
        path,
        body,
        concurrency: 1,
        requests: LONE_CLIENT_BLOCK,
        collectHeader: 'server-timing',
        pool,
      });
      const cpuNs = serverCpuNs(tree) - cpuBefore;
      totals.wallMs += load.wallMs;
      totals.cpuNs += cpuNs;
      if (load.wallMs > 0) totals.peakCpuPercent = Math.max(totals.peakCpuPercent, (cpuNs / 1e6 / load.wallMs) * 100);
      totals.lastRssBytes = tree.reduce((sum, pid) => sum + readRssBytes(pid), 0);
      totals.peakRssBytes = Math.max(totals.peakRssBytes, totals.lastRssBytes);
      totals.errors += load.errors;
      totals.firstError ??= load.firstError;
      latenciesMs.push(...load.latenciesMs);
      context.onProgress({ type: 'tick', done: latenciesMs.length });
      // A failed request has no latency and no header: such a block pairs only when every request succeeded.
      return load.errors === 0
        ? {
            latenciesMs: load.latenciesMs,
            inferenceMs: load.headerValues.map((value) => serverTimingDurations(value).inference ?? Number.NaN),
          }
        : { latenciesMs: [], inferenceMs: [] };
    },
  };
}

/** The lone client's row: its latency and the server's CPU and memory over the lone blocks. */
function loneClientRow(options: LoneClientMeasured & { label: string; turns: number }): ResultRow {
  const { totals, latenciesMs, turns, notQuiet } = options;
  const latency = summarizeLatencies(latenciesMs);
  const usage: ResourceUsage = {
    peakCpuPercent: totals.peakCpuPercent,
    meanCpuPercent: totals.wallMs > 0 ? (totals.cpuNs / 1e6 / totals.wallMs) * 100 : 0,
    peakRssBytes: totals.peakRssBytes,
    peakPssBytes: 0,
    lastRssBytes: totals.lastRssBytes,
    lastPssBytes: 0,
    samples: turns,
  };
  const summary = summarizeLoneClient(options.pairs);
  return {
    ...emptyRow('batched', options.label),
    images: latency.count,
    concurrency: 1,
    throughputPerSec: totals.wallMs > 0 ? latenciesMs.length / (totals.wallMs / 1000) : 0,
    ...measuredColumns(latency, usage),
    errors: totals.errors,
    note: [
      `${turns} turns, each ${LONE_CLIENT_BLOCK} lone requests, ${LONE_CLIENT_BLOCK} own-time runs and ${LONE_CLIENT_BLOCK} runs of a second own-time process (the control) back to back, in every order in turn, each block started once the other sides were quiet${notQuiet > 0 ? ` (${notQuiet} times not quiet within 2 s)` : ''}`,
      summary
        ? `own p50 ${summary.ownEndToEndP50Ms.toFixed(1)} ms over the same turns; paired median ${summary.pairedMedianMs >= 0 ? '+' : ''}${summary.pairedMedianMs.toFixed(1)} ms`
        : '',
      totals.firstError ? `first error: ${totals.firstError.slice(0, 120)}` : '',
    ]
      .filter(Boolean)
      .join('; '),
  };
}

/**
 * Workers: 2, 4, 8 … workers (up to the core count) with cores ÷ workers intra-op threads each,
 * so the cores are never oversubscribed; 2 workers also with external-data (memory-mapped) weights.
 */
export async function runWorkers(context: ExperimentContext): Promise<ServerRunResult[]> {
  const results: ServerRunResult[] = [];
  const counts = [2, 4, 8, 16].filter((w) => w <= Math.max(2, context.cpuCount));
  for (const workers of counts) {
    const threads = Math.max(1, Math.floor(context.cpuCount / workers));
    const settings: ServerModelSettings = { minWorkers: workers, maxWorkers: workers, intraOpNumThreads: threads };
    results.push(
      await runServerAtConcurrency(context, 'workers', {
        label: `${workers} workers × ${threads} thread${threads > 1 ? 's' : ''}`,
        settings,
      }),
    );
    // Batching inside each worker: on CPU a batch of 4–8 ran up to ~10% faster than batch 1 (the ceiling's own rows).
    results.push(
      await runServerAtConcurrency(context, 'workers', {
        label: `${workers} workers × ${threads} thread${threads > 1 ? 's' : ''}, batch 8, delay 100 ms`,
        settings: { ...settings, batchSize: 8, maxBatchDelay: 100 },
      }),
    );
    if (workers === 2 && context.assets.externalArchiveFileName) {
      results.push(
        await runServerAtConcurrency(context, 'workers', {
          label: `${workers} workers × ${threads} thread${threads > 1 ? 's' : ''}, external data`,
          settings,
          archiveFileName: context.assets.externalArchiveFileName,
        }),
      );
    }
  }
  return results;
}

/** The concurrency sweep (perf_analyzer style) of one server configuration: one server, one row per level. */
export async function runSweep(context: ExperimentContext, spec: ServerSpec): Promise<ResultRow[]> {
  const body = await readImage(context.assets);
  return withServer(
    context,
    {
      assets: context.assets,
      archiveFileName: spec.archiveFileName,
      settings: spec.settings,
      env: spec.env,
      label: `sweep ${spec.label}`,
    },
    async (server, path) => {
      const rows: ResultRow[] = [];
      for (const concurrency of context.plan.sweepConcurrencies) {
        rows.push(
          await measureServerLoad(context, server, {
            path,
            body,
            experiment: 'sweep',
            label: `${spec.label} @ ${concurrency}`,
            concurrency,
            requests: Math.max(context.plan.sweepMinRequests, 4 * concurrency),
            warmupRequests: Math.min(concurrency, 8),
          }),
        );
      }
      return rows;
    },
  );
}
