import { copyFile, mkdir, mkdtemp, rename, rm } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { packArchive } from '@marina/archive';
import type { ResultRow } from '../bench-result.ts';
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
  const rows: ResultRow[] = [];
  const notes: string[] = [];
  const { plan } = context;
  const dir = join(context.workDir, 'traffic');
  await mkdir(dir, { recursive: true });

  const withTwoVersions = async <T>(
    label: string,
    store: { storeDir: string; loadModels: string },
    modelName: string,
    body: (server: RunningServer) => Promise<T>,
  ): Promise<T> => {
    context.onProgress({ type: 'log', message: `starting server: ${label}` });
    const server = await startServer({
      serveBin: context.serveBin,
      modelStoreDir: store.storeDir,
      archiveFileName: 'v1.mar',
      modelName,
      modelVersion: '1.0',
      loadModels: store.loadModels,
      // One worker per version, and the default version 1.0.
      modelsJson: {
        [modelName]: {
          '1.0': { minWorkers: 1, maxWorkers: 1, defaultVersion: true },
          '2.0': { minWorkers: 1, maxWorkers: 1 },
        },
      },
      jobQueueSize: plan.concurrency > 90 ? plan.concurrency + 50 : undefined,
      // A TMPDIR (pid file) of its own: another bench's server on this machine must not block it.
      tmpDir: serverTmpDir(context, 'marina-bench-traffic'),
      workDir: join(dir, label.replace(/[^a-z0-9]+/gi, '-').toLowerCase()),
    });
    try {
      return await body(server);
    } finally {
      await server.stop();
    }
  };

  /** Rounds of `without` and `with`, alternating; returns each side's rounds and the median ratio with ÷ without. */
  const alternate = async (options: {
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
    /** Called after each with-policy round, while the policy is still in force (describe shows the shadow's counts only then). */
    afterWith?: () => Promise<void>;
  }) => {
    const without: ResultRow[] = [];
    const withPolicy: ResultRow[] = [];
    const ratios: number[] = [];
    const shadowVersion = (options.policy.shadow as { version?: string } | undefined)?.version;
    // Round 0 warms both sides up and is not counted.
    for (let round = 0; round <= TRAFFIC_ROUNDS; round++) {
      const order = round % 2 === 0 ? (['without', 'with'] as const) : (['with', 'without'] as const);
      const measured: Partial<Record<'without' | 'with', ResultRow>> = {};
      for (const side of order) {
        await putTraffic(options.server, options.modelName, side === 'with' ? options.policy : undefined);
        if (shadowVersion !== undefined) {
          await workersSettled(
            options.server,
            options.modelName,
            shadowVersion,
            side === 'with' ? 'background' : 'normal',
          );
          // Then until the replaced worker's thread has ended (its session and heap freed): the
          // server's CPU, ended threads included (utime + stime, 10 ms ticks), stays still for 250 ms.
          await waitForQuiet(() => listProcessTree(options.server.pid), {
            windowMs: 250,
            maxCpuShare: 0.05,
            timeoutMs: 10_000,
            readCpu: (pid) => (readCpuTicks(pid) ?? 0) * 1e7,
          });
        }
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
        if (side === 'with') await options.afterWith?.();
      }
      if (round === 0) continue;
      without.push(measured.without!);
      withPolicy.push(measured.with!);
      ratios.push(measured.with!.throughputPerSec / measured.without!.throughputPerSec);
    }
    const best = (list: ResultRow[]) => list.reduce((a, b) => (b.throughputPerSec > a.throughputPerSec ? b : a));
    const rounds = (list: ResultRow[]) => list.map((r) => r.throughputPerSec.toFixed(1)).join(' / ');
    rows.push(
      { ...best(without), note: `best of rounds ${rounds(without)} ${options.unit}` },
      { ...best(withPolicy), note: `best of rounds ${rounds(withPolicy)} ${options.unit}` },
    );
    // The server's CPU per answered request (its mean CPU over the round ÷ its rate): on a shared
    // machine this moves far less between rounds than the rate does, and says what the policy costs the server.
    const cpuUsPerRequest = (list: ResultRow[]) =>
      median(list.map((r) => (r.meanCpuPercent / 100 / r.throughputPerSec) * 1e6));
    return {
      ratio: median(ratios),
      ratios,
      cpuUs: { without: cpuUsPerRequest(without), with: cpuUsPerRequest(withPolicy) },
    };
  };

  if (context.tensorAssets) {
    const t = context.tensorAssets;
    const store = await twoVersionStore({
      dir: join(dir, 'tensor'),
      modelName: t.modelName,
      archiveFileName: t.archiveFileName,
      sourceStoreDir: t.modelStoreDir,
      modelPath: t.modelPath,
      handler: 'tensor',
    });
    await withTwoVersions('traffic split', store, t.modelName, async (server) => {
      // Rounds of about a second at this model's rate: shorter ones measured mostly the machine's jitter.
      const requests = Math.max(10_000, plan.images * 20);
      const split = await alternate({
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
      notes.push(
        `Traffic split: ${t.modelName} (2x+1), one server with versions 1.0 and 2.0 (1 worker each), ${TRAFFIC_ROUNDS} alternating rounds (after a warm-up pair not counted) of ${requests} requests at ${plan.overheadConcurrency} clients without a policy and with {"1.0": 90, "2.0": 10}: with ÷ without = ${split.ratio.toFixed(3)} (median of the rounds' ratios ${split.ratios.map((r) => r.toFixed(3)).join(' / ')}; target ≥ 0.95: ${split.ratio >= 0.95 ? 'met' : 'missed'}); server CPU per request ${split.cpuUs.without.toFixed(0)} µs without, ${split.cpuUs.with.toFixed(0)} µs with (medians of the rounds). Without a policy 2.0's worker is idle; with it, 2.0 takes a tenth of the requests on its own worker.`,
      );
    });
  }

  const a = context.assets;
  const store = await twoVersionStore({
    dir: join(dir, 'image'),
    modelName: a.modelName,
    archiveFileName: a.archiveFileName,
    sourceStoreDir: a.modelStoreDir,
    modelPath: a.modelPath,
    handler: 'image_classifier',
  });
  const jpeg = await readImage(a);
  await withTwoVersions('traffic shadow', store, a.modelName, async (server) => {
    const shadowPolicy = { weights: { '1.0': 100 }, shadow: { version: '2.0', percent: 100 } };
    const headroomRequests = Math.max(60, plan.images);
    // Cumulative counts, read while the shadow is in force; each phase's copies are the difference.
    let latest = { requests: 0, dropped: 0 } as Awaited<ReturnType<typeof shadowCounts>>;
    const afterWith = async () => {
      latest = await shadowCounts(server, a.modelName);
    };
    const before = latest;
    const headroom = await alternate({
      server,
      modelName: a.modelName,
      policy: shadowPolicy,
      path: `/predictions/${a.modelName}`,
      body: jpeg,
      contentType: 'image/jpeg',
      concurrency: 1,
      requests: headroomRequests,
      label: `${a.model} 100% shadow @ 1 client`,
      unit: 'img/s',
      afterWith,
    });
    const afterHeadroom = latest;
    const loadedRequests = Math.max(plan.concurrency, plan.images);
    const loaded = await alternate({
      server,
      modelName: a.modelName,
      policy: shadowPolicy,
      path: `/predictions/${a.modelName}`,
      body: jpeg,
      contentType: 'image/jpeg',
      concurrency: plan.concurrency,
      requests: loadedRequests,
      label: `${a.model} 100% shadow @ ${plan.concurrency} clients`,
      unit: 'img/s',
      afterWith,
    });
    const afterLoaded = latest;
    // Warm-up requests are shadowed too; the counts are the shadow's copies in each phase.
    const copies = (from: typeof before, to: typeof before) => ({
      ran: to.requests - from.requests,
      dropped: to.dropped - from.dropped,
    });
    const h = copies(before, afterHeadroom);
    const l = copies(afterHeadroom, afterLoaded);
    const share = (c: { ran: number; dropped: number }) =>
      c.ran + c.dropped > 0 ? `${((100 * c.dropped) / (c.ran + c.dropped)).toFixed(0)}%` : 'n/a';
    notes.push(
      `Shadow: ${a.model}, one server with versions 1.0 (live) and 2.0 (shadow, the same weights), 1 worker each, ${TRAFFIC_ROUNDS} alternating rounds (after a warm-up pair not counted; ${headroomRequests} and ${loadedRequests} requests a round) without and with a 100% shadow; with it, 2.0's worker runs at background CPU priority (describe's cpuPriority; each round starts once it serves). At 1 client (headroom: the shadow's worker has a core of its own) live throughput with ÷ without = ${headroom.ratio.toFixed(3)} (rounds ${headroom.ratios.map((r) => r.toFixed(3)).join(' / ')}; target ≥ 0.90: ${headroom.ratio >= 0.9 ? 'met' : 'missed'}); copies run ${h.ran}, dropped ${h.dropped} (${share(h)}); server CPU per live request ${(headroom.cpuUs.without / 1000).toFixed(1)} ms without, ${(headroom.cpuUs.with / 1000).toFixed(1)} ms with (copies included). At ${plan.concurrency} clients (no headroom) with ÷ without = ${loaded.ratio.toFixed(3)} (rounds ${loaded.ratios.map((r) => r.toFixed(3)).join(' / ')}); copies run ${l.ran}, dropped ${l.dropped} (${share(l)}): the shadow's copies are the work shed. Agreement of the shadow (same weights): ${afterLoaded.agreement === undefined ? 'n/a' : afterLoaded.agreement.toFixed(4)}.`,
    );
  });
  return { rows, notes };
}
