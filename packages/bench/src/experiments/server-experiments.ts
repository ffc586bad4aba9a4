import type { LoneClientRound, ResultRow } from '../bench-result.ts';
import type { ServerModelSettings } from '../server-process.ts';
import { startOwnTimeSteps, type OwnRun } from './ceiling.ts';
import { listProcessTree, waitForQuiet } from '../process-sampler.ts';
import { median } from '../stats.ts';
import { measureServerLoad, readImage, withServer, type ExperimentContext } from './experiment-context.ts';

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

async function runServerAtConcurrency(context: ExperimentContext, experiment: ResultRow['experiment'], spec: ServerSpec): Promise<ServerRunResult> {
  const body = await readImage(context.assets);
  const row = await withServer(context, { assets: context.assets, archiveFileName: spec.archiveFileName, settings: spec.settings, env: spec.env, label: spec.label }, (server, path) =>
    measureServerLoad(context, server, {
      path, body, experiment, label: spec.label, concurrency: context.plan.concurrency, requests: context.plan.images, warmupRequests: warmupFor(spec),
    }));
  return { row, spec };
}

/** Centralized: one server with default settings, `plan.images` requests at `plan.concurrency` (raw JPEG bodies). */
export function runCentralized(context: ExperimentContext): Promise<ServerRunResult> {
  return runServerAtConcurrency(context, 'centralized', { label: '1 worker, defaults' });
}

/** Lone-client rounds of the batched experiment; its latency target is judged on the median round's excess over the own time. */
export const LONE_CLIENT_ROUNDS = 3;

/** The median of the rounds' excess (lone p50 − own time), and the round it came from. */
export function medianLoneExcess(rounds: readonly LoneClientRound[]): { excessMs: number; round: LoneClientRound } | undefined {
  if (rounds.length === 0) return undefined;
  const sorted = [...rounds].sort((a, b) => (a.loneP50Ms - a.ownEndToEndP50Ms) - (b.loneP50Ms - b.ownEndToEndP50Ms));
  const round = sorted[Math.floor((sorted.length - 1) / 2)]!;
  return { excessMs: round.loneP50Ms - round.ownEndToEndP50Ms, round };
}

/**
 * Batched: batchSize 8, maxBatchDelay 100 ms at `plan.concurrency`; then a lone client on the same
 * server, whose latency shows whether the batcher waits when nothing else is coming.
 *
 * The lone client is compared with the model's own time (one process of its own, no server), and
 * this machine's speed drifts by more than the 5 ms being judged from one minute to the next. So
 * the two are measured side by side: `LONE_CLIENT_ROUNDS` rounds, each a block of lone requests
 * and a block of own-time runs (both back to back, as a lone client sends them), in alternating
 * order. Each block starts once the other side's threads are quiet: onnxruntime's pool spins for
 * about 50 ms after a run, which would slow the other side's first run. The row kept is the round
 * with the median excess; every round is returned for the target and the report.
 */
export async function runBatched(context: ExperimentContext): Promise<{ loaded: ServerRunResult; lone: ResultRow; loneRounds: LoneClientRound[] }> {
  const spec: ServerSpec = { label: 'batch 8, delay 100 ms', settings: { batchSize: 8, maxBatchDelay: 100 } };
  const body = await readImage(context.assets);
  const loneRequests = Math.max(10, Math.min(20, Math.round(context.plan.images / 5)));
  return withServer(context, { assets: context.assets, settings: spec.settings, label: spec.label }, async (server, path) => {
    const loaded = await measureServerLoad(context, server, {
      path, body, experiment: 'batched', label: spec.label, concurrency: context.plan.concurrency, requests: context.plan.images, warmupRequests: warmupFor(spec),
    });
    const own = await startOwnTimeSteps(context.assets.modelPath, context.assets.imagePath, context.cpuCount);
    const rounds: { row: ResultRow; runs: OwnRun[] }[] = [];
    let notQuiet = 0;
    const quiet = async (pids: () => readonly number[]) => { if (!(await waitForQuiet(pids))) notQuiet += 1; };
    const measureOwn = async () => {
      await quiet(() => listProcessTree(server.pid));
      const runs: OwnRun[] = [];
      for (let i = 0; i < loneRequests; i++) runs.push(await own.step());
      return runs;
    };
    const measureLone = async () => {
      await quiet(() => [own.pid]);
      return measureServerLoad(context, server, {
        path, body, experiment: 'batched', label: `${spec.label}, lone client`, concurrency: 1, requests: loneRequests, warmupRequests: 2,
      });
    };
    try {
      for (let r = 0; r < LONE_CLIENT_ROUNDS; r++) {
        if (r % 2 === 0) {
          const runs = await measureOwn();
          rounds.push({ runs, row: await measureLone() });
        } else {
          const row = await measureLone();
          rounds.push({ row, runs: await measureOwn() });
        }
      }
    } finally {
      await own.stop();
    }
    const loneRounds = rounds.map(({ row, runs }) => ({
      loneP50Ms: row.p50Ms, ownEndToEndP50Ms: median(runs.map((x) => x.endToEndMs)), ownInferP50Ms: median(runs.map((x) => x.inferMs)),
    }));
    const middle = medianLoneExcess(loneRounds)!;
    const lone = rounds[loneRounds.indexOf(middle.round)]!.row;
    const pairs = loneRounds.map((x) => `${x.loneP50Ms.toFixed(1)} vs ${x.ownEndToEndP50Ms.toFixed(1)} ms`).join(', ');
    lone.note = `blocks of ${loneRequests} lone requests and ${loneRequests} own-time runs in alternating order, each started once the other side was quiet${notQuiet > 0 ? ` (${notQuiet} times not quiet within 2 s)` : ''}; the median of ${loneRounds.length} rounds (lone p50 vs own p50): ${pairs}`;
    return { loaded: { row: loaded, spec }, lone, loneRounds };
  });
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
    results.push(await runServerAtConcurrency(context, 'workers', { label: `${workers} workers × ${threads} thread${threads > 1 ? 's' : ''}`, settings }));
    // Batching inside each worker: on CPU a batch of 4–8 ran up to ~10% faster than batch 1 (the ceiling's own rows).
    results.push(await runServerAtConcurrency(context, 'workers', {
      label: `${workers} workers × ${threads} thread${threads > 1 ? 's' : ''}, batch 8, delay 100 ms`,
      settings: { ...settings, batchSize: 8, maxBatchDelay: 100 },
    }));
    if (workers === 2 && context.assets.externalArchiveFileName) {
      results.push(await runServerAtConcurrency(context, 'workers', {
        label: `${workers} workers × ${threads} thread${threads > 1 ? 's' : ''}, external data`, settings, archiveFileName: context.assets.externalArchiveFileName,
      }));
    }
  }
  return results;
}

/** The concurrency sweep (perf_analyzer style) of one server configuration: one server, one row per level. */
export async function runSweep(context: ExperimentContext, spec: ServerSpec): Promise<ResultRow[]> {
  const body = await readImage(context.assets);
  return withServer(context, { assets: context.assets, archiveFileName: spec.archiveFileName, settings: spec.settings, env: spec.env, label: `sweep ${spec.label}` }, async (server, path) => {
    const rows: ResultRow[] = [];
    for (const concurrency of context.plan.sweepConcurrencies) {
      rows.push(await measureServerLoad(context, server, {
        path, body, experiment: 'sweep', label: `${spec.label} @ ${concurrency}`, concurrency,
        requests: Math.max(context.plan.sweepMinRequests, 4 * concurrency), warmupRequests: Math.min(concurrency, 8),
      }));
    }
    return rows;
  });
}
