import { copyFile, mkdir, mkdtemp, rename, rm } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { packArchive } from '@marina/archive';
import type { ResultRow } from '../bench-result.ts';
import type { BenchAssets, TensorAssets } from '../model-assets.ts';
import { listProcessTree, readCpuTicks, waitForQuiet } from '../process-sampler.ts';
import { startServer, type RunningServer } from '../server-process.ts';
import { median } from '../stats.ts';
import { measureServerLoad, readImage, serverTmpDir, type ExperimentContext } from './experiment-context.ts';

/**
 * Counted rounds per side; the sides take turns (the order alternating), so a drift of the
 * machine's speed falls on both. A first pair of rounds warms both sides up and is not counted
 * (its first side used to run on a cold server and client: ratios of 2 and more).
 */
const TRAFFIC_ROUNDS = 8;

/**
 * A store holding the model's archive as version 1.0 and a copy packed as version 2.0 (the same
 * ONNX: the experiment measures what routing and shadowing cost, not a second model's speed).
 */
async function twoVersionStore(options: {
  dir: string;
  modelName: string;
  archiveFileName: string;
  sourceStoreDir: string;
  modelPath: string;
  handler: string;
}): Promise<{ storeDir: string; loadModels: string }> {
  const storeDir = join(options.dir, 'store');
  await mkdir(storeDir, { recursive: true });
  await copyFile(join(options.sourceStoreDir, options.archiveFileName), join(storeDir, 'v1.mar'));
  const work = await mkdtemp(join(options.dir, 'pack-'));
  // The image model's archives carry ImageNet's index_to_name.json, written beside the store.
  const index = join(dirname(options.sourceStoreDir), 'index_to_name.json');
  const packed = await packArchive({
    modelName: options.modelName,
    modelVersion: '2.0',
    handler: options.handler,
    serializedFile: options.modelPath,
    extraFiles: existsSync(index) ? [index] : [],
    exportPath: work,
    archiveFormat: 'default',
    isForced: true,
  });
  await rename(packed.outputPath, join(storeDir, 'v2.mar'));
  await rm(work, { recursive: true, force: true });
  return { storeDir, loadModels: `${options.modelName}=v1.mar,${options.modelName}=v2.mar` };
}

async function putTraffic(server: RunningServer, modelName: string, policy: Record<string, unknown> | undefined) {
  const response = await fetch(`${server.managementOrigin}/models/${modelName}/traffic`, {
    method: policy === undefined ? 'DELETE' : 'PUT',
    ...(policy === undefined ? {} : { headers: { 'content-type': 'application/json' }, body: JSON.stringify(policy) }),
  });
  const text = await response.text();
  if (response.status !== 200) throw new Error(`traffic policy of ${modelName}: ${response.status} ${text}`);
}

/**
 * Waits until the version serves with every worker READY or BUSY at `cpuPriority` (a shadow's
 * workers run at background priority, so setting or removing a shadow replaces them): a round
 * then measures the policy, not the replacement's model load.
 */
async function workersSettled(server: RunningServer, modelName: string, version: string, cpuPriority: string) {
  const deadline = Date.now() + 120_000;
  for (;;) {
    const response = await fetch(`${server.managementOrigin}/models/${modelName}/${version}`);
    const [description] = (await response.json()) as Array<{
      minWorkers: number;
      workers: Array<{ status: string; cpuPriority?: string }>;
    }>;
    const workers = description?.workers ?? [];
    if (
      workers.length === description?.minWorkers &&
      workers.every((w) => (w.status === 'READY' || w.status === 'BUSY') && (w.cpuPriority ?? 'normal') === cpuPriority)
    )
      return;
    if (Date.now() > deadline)
      throw new Error(`${modelName} ${version}: workers not settled at ${cpuPriority} priority`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/** The shadow version's counts from describe. */
async function shadowCounts(
  server: RunningServer,
  modelName: string,
): Promise<{ requests: number; dropped: number; agreement?: number }> {
  const response = await fetch(`${server.managementOrigin}/models/${modelName}/2.0`);
  const [description] = (await response.json()) as Array<{
    traffic?: { shadow?: { requests: number; dropped: number; agreement?: number } };
  }>;
  return description?.traffic?.shadow ?? { requests: 0, dropped: 0 };
}

type ShadowCounts = Awaited<ReturnType<typeof shadowCounts>>;
type Side = 'without' | 'with';

/** The two-version store a server starts from (see twoVersionStore). */
type TwoVersionStore = Awaited<ReturnType<typeof twoVersionStore>>;

/** What one phase of the experiment gives the report: its two rows and its note. */
interface TrafficPhase {
  rows: ResultRow[];
  note: string;
}

/** One policy measured against none, in alternating rounds on one running server. */
interface AlternateOptions {
  server: RunningServer;
  modelName: string;
  policy: Record<string, unknown>;
  path: string;
  body: Buffer;
  contentType?: string;
  concurrency: number;
  requests: number;
  label: string;
  unit: string;
}

/** Each side's counted rounds, each round's ratio with ÷ without, and the shadow's counts last read. */
interface AlternateRounds {
  without: ResultRow[];
  withPolicy: ResultRow[];
  ratios: number[];
  /** Cumulative, read after each with-policy round while the policy is in force (describe shows them only then); undefined without a shadow. */
  shadow: ShadowCounts | undefined;
}

/** The two sides' best rows and the medians the notes report. */
interface AlternateResult {
  rows: ResultRow[];
  ratio: number;
  ratios: number[];
  cpuUs: { without: number; with: number };
  shadow: ShadowCounts | undefined;
}

/**
 * Versions in production, side by side in one run:
 * - the 90/10 split's cost on the tensor model (2x+1, its own run a few µs, so the server is what
 *   is measured): one server with versions 1.0 and 2.0, rounds without a policy and with
 *   {"1.0": 90, "2.0": 10} taking turns, at the overhead experiment's concurrency (target: ≥ 0.95);
 * - a 100 % shadow on the run's image model (ResNet-18 with --quick): one server with 1.0 and 2.0
 *   (one worker each), rounds without and with the shadow taking turns, at one client (headroom:
 *   the shadow's worker has a core of its own; target ≥ 0.90 of the live throughput) and at the
 *   run's concurrency (no headroom: the shadow's copies must be the work that is shed).
 * Ratios are medians of the rounds' own ratios (each with-policy round against the round before it).
 */
export async function runTraffic(context: ExperimentContext): Promise<{ rows: ResultRow[]; notes: string[] }> {
  const dir = join(context.workDir, 'traffic');
  await mkdir(dir, { recursive: true });
  const phases: TrafficPhase[] = [];
  if (context.tensorAssets) phases.push(await runSplit(context, dir, context.tensorAssets));
  phases.push(await runShadow(context, dir, context.assets));
  return { rows: phases.flatMap((p) => p.rows), notes: phases.map((p) => p.note) };
}

/** Starts a server with both versions (one worker each, 1.0 the default), runs `body`, always stops it. */
async function withTwoVersions<T>(
  context: ExperimentContext,
  options: { dir: string; label: string; store: TwoVersionStore; modelName: string },
  body: (server: RunningServer) => Promise<T>,
): Promise<T> {
  const { modelName, label } = options;
  context.onProgress({ type: 'log', message: `starting server: ${label}` });
  const server = await startServer({
    serveBin: context.serveBin,
    modelStoreDir: options.store.storeDir,
    archiveFileName: 'v1.mar',
    modelName,
    modelVersion: '1.0',
    loadModels: options.store.loadModels,
    // One worker per version, and the default version 1.0.
    modelsJson: {
      [modelName]: {
        '1.0': { minWorkers: 1, maxWorkers: 1, defaultVersion: true },
        '2.0': { minWorkers: 1, maxWorkers: 1 },
      },
    },
    jobQueueSize: context.plan.concurrency > 90 ? context.plan.concurrency + 50 : undefined,
    // A TMPDIR (pid file) of its own: another bench's server on this machine must not block it.
    tmpDir: serverTmpDir(context, 'marina-bench-traffic'),
    workDir: join(options.dir, label.replace(/[^a-z0-9]+/gi, '-').toLowerCase()),
  });
  try {
    return await body(server);
  } finally {
    await server.stop();
  }
}

/** Rounds of `without` and `with`, alternating; the sides' best rows and the median ratio with ÷ without. */
async function alternate(context: ExperimentContext, options: AlternateOptions): Promise<AlternateResult> {
  const rounds = await runRounds(context, options);
  const { without, withPolicy, ratios } = rounds;
  return {
    rows: [bestWithRounds(without, options.unit), bestWithRounds(withPolicy, options.unit)],
    ratio: median(ratios),
    ratios,
    cpuUs: { without: cpuUsPerRequest(without), with: cpuUsPerRequest(withPolicy) },
    shadow: rounds.shadow,
  };
}

/** The alternating rounds themselves; round 0 warms both sides up and is not counted. */
async function runRounds(context: ExperimentContext, options: AlternateOptions): Promise<AlternateRounds> {
  const result: AlternateRounds = { without: [], withPolicy: [], ratios: [], shadow: undefined };
  const shadowVersion = (options.policy.shadow as { version?: string } | undefined)?.version;
  for (let round = 0; round <= TRAFFIC_ROUNDS; round++) {
    const order = round % 2 === 0 ? (['without', 'with'] as const) : (['with', 'without'] as const);
    const measured: Partial<Record<Side, ResultRow>> = {};
    for (const side of order) {
      await applySide(options, side, shadowVersion);
      measured[side] = await measureServerLoad(context, options.server, {
        path: options.path,
        body: options.body,
        contentType: options.contentType,
        concurrency: options.concurrency,
        requests: options.requests,
        warmupRequests: Math.min(50, options.requests),
        label: `${options.label}, ${side === 'with' ? 'with policy' : 'no policy'}`,
        experiment: 'traffic',
      });
      if (side === 'with' && shadowVersion !== undefined)
        result.shadow = await shadowCounts(options.server, options.modelName);
    }
    if (round === 0) continue;
    result.without.push(measured.without!);
    result.withPolicy.push(measured.with!);
    result.ratios.push(measured.with!.throughputPerSec / measured.without!.throughputPerSec);
  }
  return result;
}

/**
 * Puts the side's policy in force (none for `without`). With a shadow, waits until the shadow's
 * workers were replaced at the side's priority and the replaced worker's thread has ended.
 */
async function applySide(options: AlternateOptions, side: Side, shadowVersion: string | undefined): Promise<void> {
  const { server, modelName } = options;
  await putTraffic(server, modelName, side === 'with' ? options.policy : undefined);
  if (shadowVersion === undefined) return;
  await workersSettled(server, modelName, shadowVersion, side === 'with' ? 'background' : 'normal');
  // Then until the replaced worker's thread has ended (its session and heap freed): the
  // server's CPU, ended threads included (utime + stime, 10 ms ticks), stays still for 250 ms.
  await waitForQuiet(() => listProcessTree(server.pid), {
    windowMs: 250,
    maxCpuShare: 0.05,
    timeoutMs: 10_000,
    readCpu: (pid) => (readCpuTicks(pid) ?? 0) * 1e7,
  });
}

/** A side's best round, its note listing every round's throughput in `unit`. */
function bestWithRounds(list: ResultRow[], unit: string): ResultRow {
  const best = list.reduce((a, b) => (b.throughputPerSec > a.throughputPerSec ? b : a));
  const rounds = list.map((r) => r.throughputPerSec.toFixed(1)).join(' / ');
  return { ...best, note: `best of rounds ${rounds} ${unit}` };
}

/**
 * The server's CPU per answered request, µs (its mean CPU over the round ÷ its rate), median of the
 * rounds: on a shared machine this moves far less between rounds than the rate does, and says what
 * the policy costs the server.
 */
function cpuUsPerRequest(list: ResultRow[]): number {
  return median(list.map((r) => (r.meanCpuPercent / 100 / r.throughputPerSec) * 1e6));
}

/** The 90/10 split on the tensor model, at the overhead experiment's concurrency. */
async function runSplit(context: ExperimentContext, dir: string, t: TensorAssets): Promise<TrafficPhase> {
  const { plan } = context;
  const store = await twoVersionStore({
    dir: join(dir, 'tensor'),
    modelName: t.modelName,
    archiveFileName: t.archiveFileName,
    sourceStoreDir: t.modelStoreDir,
    modelPath: t.modelPath,
    handler: 'tensor',
  });
  const twoVersions = { dir, label: 'traffic split', store, modelName: t.modelName };
  return withTwoVersions(context, twoVersions, async (server) => {
    // Rounds of about a second at this model's rate: shorter ones measured mostly the machine's jitter.
    const requests = Math.max(10_000, plan.images * 20);
    const split = await alternate(context, {
      server,
      modelName: t.modelName,
      policy: { weights: { '1.0': 90, '2.0': 10 } },
      path: `/predictions/${t.modelName}`,
      body: t.body,
      contentType: t.contentType,
      concurrency: plan.overheadConcurrency,
      requests,
      label: `${t.modelName} 90/10 split @ ${plan.overheadConcurrency} clients`,
      unit: 'req/s',
    });
    return {
      rows: split.rows,
      note: `Traffic split: ${t.modelName} (2x+1), one server with versions 1.0 and 2.0 (1 worker each), ${TRAFFIC_ROUNDS} alternating rounds (after a warm-up pair not counted) of ${requests} requests at ${plan.overheadConcurrency} clients without a policy and with {"1.0": 90, "2.0": 10}: with ÷ without = ${split.ratio.toFixed(3)} (median of the rounds' ratios ${split.ratios.map((r) => r.toFixed(3)).join(' / ')}; target ≥ 0.95: ${split.ratio >= 0.95 ? 'met' : 'missed'}); server CPU per request ${split.cpuUs.without.toFixed(0)} µs without, ${split.cpuUs.with.toFixed(0)} µs with (medians of the rounds). Without a policy 2.0's worker is idle; with it, 2.0 takes a tenth of the requests on its own worker.`,
    };
  });
}

/** The 100 % shadow on the image model: at one client (headroom), then at the run's concurrency. */
async function runShadow(context: ExperimentContext, dir: string, a: BenchAssets): Promise<TrafficPhase> {
  const { plan } = context;
  const store = await twoVersionStore({
    dir: join(dir, 'image'),
    modelName: a.modelName,
    archiveFileName: a.archiveFileName,
    sourceStoreDir: a.modelStoreDir,
    modelPath: a.modelPath,
    handler: 'image_classifier',
  });
  const jpeg = await readImage(a);
  const twoVersions = { dir, label: 'traffic shadow', store, modelName: a.modelName };
  return withTwoVersions(context, twoVersions, async (server) => {
    // Both halves: the same server, policy, request and unit.
    const shadowed = {
      server,
      modelName: a.modelName,
      policy: { weights: { '1.0': 100 }, shadow: { version: '2.0', percent: 100 } },
      path: `/predictions/${a.modelName}`,
      body: jpeg,
      contentType: 'image/jpeg',
      unit: 'img/s',
    };
    const headroomRequests = Math.max(60, plan.images);
    const headroom = await alternate(context, {
      ...shadowed,
      concurrency: 1,
      requests: headroomRequests,
      label: `${a.model} 100% shadow @ 1 client`,
    });
    const loadedRequests = Math.max(plan.concurrency, plan.images);
    const loaded = await alternate(context, {
      ...shadowed,
      concurrency: plan.concurrency,
      requests: loadedRequests,
      label: `${a.model} 100% shadow @ ${plan.concurrency} clients`,
    });
    const note = shadowNote({ context, model: a.model, headroomRequests, loadedRequests, headroom, loaded });
    return { rows: [...headroom.rows, ...loaded.rows], note };
  });
}

/** The shadow phase's note: the ratios, and the shadow's copies run and dropped in each half. */
function shadowNote(options: {
  context: ExperimentContext;
  model: string;
  headroomRequests: number;
  loadedRequests: number;
  headroom: AlternateResult;
  loaded: AlternateResult;
}): string {
  const { headroom, loaded } = options;
  const { plan } = options.context;
  // Cumulative counts; warm-up requests are shadowed too, so each half's copies are the difference.
  const none: ShadowCounts = { requests: 0, dropped: 0 };
  const afterHeadroom = headroom.shadow ?? none;
  const afterLoaded = loaded.shadow ?? afterHeadroom;
  const h = copies(none, afterHeadroom);
  const l = copies(afterHeadroom, afterLoaded);
  return `Shadow: ${options.model}, one server with versions 1.0 (live) and 2.0 (shadow, the same weights), 1 worker each, ${TRAFFIC_ROUNDS} alternating rounds (after a warm-up pair not counted; ${options.headroomRequests} and ${options.loadedRequests} requests a round) without and with a 100% shadow; with it, 2.0's worker runs at background CPU priority (describe's cpuPriority; each round starts once it serves). At 1 client (headroom: the shadow's worker has a core of its own) live throughput with ÷ without = ${headroom.ratio.toFixed(3)} (rounds ${headroom.ratios.map((r) => r.toFixed(3)).join(' / ')}; target ≥ 0.90: ${headroom.ratio >= 0.9 ? 'met' : 'missed'}); copies run ${h.ran}, dropped ${h.dropped} (${share(h)}); server CPU per live request ${(headroom.cpuUs.without / 1000).toFixed(1)} ms without, ${(headroom.cpuUs.with / 1000).toFixed(1)} ms with (copies included). At ${plan.concurrency} clients (no headroom) with ÷ without = ${loaded.ratio.toFixed(3)} (rounds ${loaded.ratios.map((r) => r.toFixed(3)).join(' / ')}); copies run ${l.ran}, dropped ${l.dropped} (${share(l)}): the shadow's copies are the work shed. Agreement of the shadow (same weights): ${afterLoaded.agreement === undefined ? 'n/a' : afterLoaded.agreement.toFixed(4)}.`;
}

/** The shadow's copies between two cumulative readings. */
function copies(from: ShadowCounts, to: ShadowCounts): { ran: number; dropped: number } {
  return { ran: to.requests - from.requests, dropped: to.dropped - from.dropped };
}

/** The share of the copies that were dropped, as a percentage ('n/a' with no copies). */
function share(c: { ran: number; dropped: number }): string {
  return c.ran + c.dropped > 0 ? `${((100 * c.dropped) / (c.ran + c.dropped)).toFixed(0)}%` : 'n/a';
}
