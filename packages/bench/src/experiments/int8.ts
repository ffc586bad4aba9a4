import type { Int8LayoutServer, Int8Summary, ResultRow, StageMeansMs } from '../bench-result.ts';
import type { Int8Assets } from '../int8-assets.ts';
import { runLoad, type LoadResult } from '../load-generator.ts';
import { listProcessTree, startProcessSampler, type ResourceUsage } from '../process-sampler.ts';
import type { RunningServer, ServerModelSettings } from '../server-process.ts';
import { serverTimingDurations } from '../server-timing.ts';
import { ceilingRowAtBatch1, runCeiling } from './ceiling.ts';
import { readImage, rowFromLoad, serverTmpDir, withServer, type ExperimentContext } from './experiment-context.ts';

/** Rounds per server: fp32, int8, fp32, int8, … */
export const INT8_ROUNDS: Record<'full' | 'quick' | 'smoke', number> = { full: 3, quick: 2, smoke: 2 };

/** Parses `name;dur=1.23;desc="…", …` headers and averages each entry's duration. */
export function meanServerTimings(values: readonly string[]): StageMeansMs {
  const sums = new Map<string, { total: number; count: number }>();
  for (const value of values) {
    for (const [name, ms] of Object.entries(serverTimingDurations(value))) {
      const sum = sums.get(name) ?? { total: 0, count: 0 };
      sum.total += ms;
      sum.count += 1;
      sums.set(name, sum);
    }
  }
  return Object.fromEntries([...sums.entries()].map(([name, s]) => [name, s.total / s.count]));
}

interface Round {
  load: LoadResult;
  usage: ResourceUsage;
}

const MB = 1_000_000;

async function measureRound(
  context: ExperimentContext,
  server: RunningServer,
  options: { path: string; body: Buffer; label: string; warmupRequests: number },
): Promise<Round> {
  const { plan } = context;
  context.onProgress({ type: 'phase', label: options.label, total: plan.images });
  await runLoad({
    origin: server.origin,
    path: options.path,
    body: options.body,
    concurrency: plan.concurrency,
    requests: 0,
    warmupRequests: options.warmupRequests,
  });
  const tree = listProcessTree(server.pid);
  const sampler = startProcessSampler({ getPids: () => tree, isPssSampled: true });
  let load: LoadResult;
  try {
    load = await runLoad({
      origin: server.origin,
      path: options.path,
      body: options.body,
      concurrency: plan.concurrency,
      requests: plan.images,
      durationMs: plan.maxRunMs,
      collectHeader: 'server-timing',
      onProgress: (done) => context.onProgress({ type: 'tick', done }),
    });
  } finally {
    sampler.sample();
  }
  return { load, usage: sampler.stop() };
}

/** One row for all of a server's rounds: every latency, images ÷ the summed measured wall time, the last round's memory. */
function combineRounds(
  label: string,
  concurrency: number,
  rounds: readonly Round[],
): { row: ResultRow; stages: StageMeansMs } {
  const wallMs = rounds.reduce((sum, r) => sum + r.load.wallMs, 0);
  const latenciesMs = rounds.flatMap((r) => r.load.latenciesMs);
  const load: LoadResult = {
    latenciesMs,
    wallMs,
    throughputPerSec: latenciesMs.length / (wallMs / 1000),
    errors: rounds.reduce((sum, r) => sum + r.load.errors, 0),
    firstError: rounds.find((r) => r.load.firstError)?.load.firstError,
    headerValues: rounds.flatMap((r) => r.load.headerValues),
  };
  const last = rounds[rounds.length - 1]!.usage;
  const usage: ResourceUsage = {
    ...last,
    peakCpuPercent: Math.max(...rounds.map((r) => r.usage.peakCpuPercent)),
    meanCpuPercent: rounds.reduce((sum, r) => sum + r.usage.meanCpuPercent * r.load.wallMs, 0) / wallMs,
    peakRssBytes: Math.max(...rounds.map((r) => r.usage.peakRssBytes)),
    peakPssBytes: Math.max(...rounds.map((r) => r.usage.peakPssBytes)),
  };
  const row = rowFromLoad('int8', label, concurrency, load, usage);
  const perRound = rounds
    .map((r) => r.load.throughputPerSec.toFixed(r.load.throughputPerSec >= 100 ? 0 : 2))
    .join(' / ');
  row.note = [`rounds ${perRound} img/s; PSS after the last round`, row.note].filter(Boolean).join('; ');
  return { row, stages: meanServerTimings(load.headerValues) };
}

type ServerKey = 'fp32' | 'int8' | 'fp32Workers' | 'int8Workers';

interface ServerSpec {
  key: ServerKey;
  archiveFileName: string;
  /** Its own TMPDIR's name (pid file, extraction and optimised-model caches), since all run at once. */
  tmpName: string;
  /** What the progress lines call it. */
  name: string;
  settings: ServerModelSettings | undefined;
}

interface StartedServer {
  key: ServerKey;
  name: string;
  server: RunningServer;
  path: string;
}

/** Starts every server of `specs` (one after the other), runs `body` with all of them up, always stops them. */
function withServers<T>(
  context: ExperimentContext,
  assets: ExperimentContext['assets'],
  specs: readonly ServerSpec[],
  body: (started: StartedServer[]) => Promise<T>,
  started: StartedServer[] = [],
): Promise<T> {
  const [spec, ...rest] = specs;
  if (!spec) return body(started);
  return withServer(
    context,
    {
      assets,
      archiveFileName: spec.archiveFileName,
      label: `int8 experiment ${spec.name}`,
      ...(spec.settings ? { settings: spec.settings } : {}),
      tmpDir: serverTmpDir(context, spec.tmpName),
    },
    (server, path) =>
      withServers(context, assets, rest, body, [...started, { key: spec.key, name: spec.name, server, path }]),
  );
}

/** A second-layout server's measures for the summary. */
function layoutServer(combined: { row: ResultRow; stages: StageMeansMs }, rounds: readonly Round[]): Int8LayoutServer {
  return {
    perSec: combined.row.throughputPerSec,
    roundsPerSec: rounds.map((r) => r.load.throughputPerSec),
    pssMb: combined.row.pssMb,
    rssMb: rounds[rounds.length - 1]!.usage.lastRssBytes / MB,
    meanCpuPercent: combined.row.meanCpuPercent,
    stages: combined.stages,
  };
}

function describeAgreement(quantization: Record<string, unknown>): string {
  const agreement = quantization.agreement as
    | { metric?: string; value?: number; samples?: number; outputs?: Array<{ minCosine?: number }> }
    | undefined;
  if (!agreement || typeof agreement.value !== 'number') return 'not recorded';
  const cosine = agreement.outputs?.[0]?.minCosine;
  const kept = Array.isArray(quantization.autoKeptFp32) ? quantization.autoKeptFp32.length : 0;
  const how =
    quantization.evaluation === 'k-fold'
      ? `by ${Array.isArray(quantization.folds) ? quantization.folds.length : '?'}-fold, each calibrated on ${quantization.calibrationSamples}+`
      : `held out, calibrated on ${quantization.calibrationSamples}`;
  return `${agreement.metric} ${agreement.value.toFixed(3)}${typeof cosine === 'number' ? `, lowest cosine ${cosine.toFixed(5)}` : ''} on ${agreement.samples} images ${how} (${quantization.method} calibration; ${kept} nodes kept in fp32)`;
}

/**
 * int8: the seed experiment with a quantised model. The fp32 archive (external-data weights where the model has them)
 * and the int8 archive `model-archiver --quantize int8` made from it are served in two layouts, each archive by a
 * server of its own: the default centralized configuration (1 worker, defaults: every core as its intra-op threads),
 * and one single-threaded worker per core (no intra-op barrier; TorchServe's own default is a worker per core). All
 * four servers start before anything is measured. Each round takes them in turn: fp32, int8, fp32 and int8 with the
 * workers (`rounds` each), at `plan.concurrency` clients with the model's 640×480 JPEG, so a change in the machine's
 * load hits each pair alike; each server's PSS is read after its rounds. The 2.8x comparison is made per layout, int8
 * against fp32 in the same configuration; the better int8 server is compared with the int8 ceiling. Then the ceiling
 * experiment runs on the int8 model (onnxruntime alone, every batch size), and the Server-Timing headers of every
 * measured response say where each server's time went.
 */
export async function runInt8(
  context: ExperimentContext,
  int8: Int8Assets,
  options: { rounds: number },
): Promise<{ rows: ResultRow[]; summary: Int8Summary }> {
  const { assets, plan } = context;
  const body = await readImage(assets);
  const serverConfig = '1 worker, defaults';
  const fp32Label = `fp32 server (${int8.fp32ArchiveFileName}), ${serverConfig}`;
  const int8Label = `int8 server (${int8.archiveFileName}), ${serverConfig}`;
  const workerCount = Math.max(1, context.cpuCount);
  const workersConfig = `${workerCount} workers × 1 thread`;
  const workersSettings = { minWorkers: workerCount, maxWorkers: workerCount, intraOpNumThreads: 1 };
  const fp32WorkersLabel = `fp32 server (${int8.fp32ArchiveFileName}), ${workersConfig}`;
  const int8WorkersLabel = `int8 server (${int8.archiveFileName}), ${workersConfig}`;
  const servers = (
    [
      ['fp32', int8.fp32ArchiveFileName, 'marina-bench', 'fp32', undefined],
      ['int8', int8.archiveFileName, 'marina-bench-int8', 'int8', undefined],
      ['fp32Workers', int8.fp32ArchiveFileName, 'marina-bench-fp32-workers', `fp32, ${workersConfig}`, workersSettings],
      ['int8Workers', int8.archiveFileName, 'marina-bench-int8-workers', `int8, ${workersConfig}`, workersSettings],
    ] as const
  ).map(([key, archiveFileName, tmpName, name, settings]) => ({ key, archiveFileName, tmpName, name, settings }));
  const rounds = await withServers(context, assets, servers, async (started) => {
    const measured: Record<ServerKey, Round[]> = { fp32: [], int8: [], fp32Workers: [], int8Workers: [] };
    for (let i = 0; i < options.rounds; i++) {
      const warmupRequests = i === 0 ? 8 : 4;
      for (const { key, name, server, path } of started)
        measured[key].push(
          await measureRound(context, server, {
            path,
            body,
            label: `int8 experiment, round ${i + 1}/${options.rounds}: ${name}`,
            warmupRequests,
          }),
        );
    }
    return measured;
  });
  const { fp32, int8: int8Rounds } = rounds;
  const fp32Combined = combineRounds(fp32Label, plan.concurrency, fp32);
  const int8Combined = combineRounds(int8Label, plan.concurrency, int8Rounds);
  const fp32WorkersCombined = combineRounds(fp32WorkersLabel, plan.concurrency, rounds.fp32Workers);
  const int8WorkersCombined = combineRounds(int8WorkersLabel, plan.concurrency, rounds.int8Workers);

  const ceiling = await runCeiling({ ...context, assets: { ...assets, modelPath: int8.modelPath } });
  const ceilingRows = ceiling.rows.map((row) => ({
    ...row,
    experiment: 'int8' as const,
    config: `int8 ceiling, ${row.config}`,
  }));
  const ceilingBatch1 = ceilingRowAtBatch1(ceilingRows);
  const bestCeiling = ceilingRows.reduce((a, b) => (b.throughputPerSec > a.throughputPerSec ? b : a));
  for (const row of [...ceilingRows, int8Combined.row, int8WorkersCombined.row])
    row.ratioToCeiling = row.throughputPerSec / bestCeiling.throughputPerSec;
  if (ceiling.noisyBatchSizes.length > 0)
    bestCeiling.note = `${bestCeiling.note}; noisy at batch ${ceiling.noisyBatchSizes.join('/')}`;

  const quantizedBytes = (int8.quantization.modelBytes as { fp32?: number; int8?: number } | undefined) ?? {};
  const summary: Int8Summary = {
    serverConfig,
    cores: workerCount,
    fp32ArchiveFileName: int8.fp32ArchiveFileName,
    int8ArchiveFileName: int8.archiveFileName,
    imagesPerRound: plan.images,
    rounds: options.rounds,
    fp32PerSec: fp32Combined.row.throughputPerSec,
    int8PerSec: int8Combined.row.throughputPerSec,
    fp32RoundsPerSec: fp32.map((r) => r.load.throughputPerSec),
    int8RoundsPerSec: int8Rounds.map((r) => r.load.throughputPerSec),
    workers: {
      config: workersConfig,
      fp32: layoutServer(fp32WorkersCombined, rounds.fp32Workers),
      int8: layoutServer(int8WorkersCombined, rounds.int8Workers),
    },
    int8CeilingPerSec: bestCeiling.throughputPerSec,
    int8CeilingBatch1P50Ms: ceilingBatch1?.p50Ms ?? Number.NaN,
    int8CeilingBatch1PerSec: ceilingBatch1?.throughputPerSec ?? Number.NaN,
    int8Own: ceiling.ownTime,
    fp32PssMb: fp32Combined.row.pssMb,
    int8PssMb: int8Combined.row.pssMb,
    fp32RssMb: fp32[fp32.length - 1]!.usage.lastRssBytes / MB,
    int8RssMb: int8Rounds[int8Rounds.length - 1]!.usage.lastRssBytes / MB,
    fp32MeanCpuPercent: fp32Combined.row.meanCpuPercent,
    int8MeanCpuPercent: int8Combined.row.meanCpuPercent,
    fp32Stages: fp32Combined.stages,
    int8Stages: int8Combined.stages,
    fp32ModelMb: (quantizedBytes.fp32 ?? assets.modelBytes) / MB,
    int8ModelMb: int8.modelBytes / MB,
    agreement: describeAgreement(int8.quantization),
    quantizeCommand: int8.command,
  };
  return {
    rows: [fp32Combined.row, int8Combined.row, fp32WorkersCombined.row, int8WorkersCombined.row, ...ceilingRows],
    summary,
  };
}

const fmt = (value: number | undefined, digits = 1): string =>
  value !== undefined && Number.isFinite(value) ? value.toFixed(digits) : 'n/a';

/**
 * Where the int8 server's time goes, in words, from measured numbers only: a per-image budget of the server's wall time
 * (1000 ÷ images/s) split by the mean Server-Timing stages, with the rest outside the handler; the model's run in the server
 * against the ceiling's batch-1 run; the ceiling at batch 1 against its best batch; and the decode + preprocess share of
 * one image in one process.
 */
export function explainInt8Time(s: Int8Summary): string {
  const budget = (perSec: number, stages: StageMeansMs) => {
    const wallMs = 1000 / perSec;
    const inference = stages.inference ?? Number.NaN;
    const pre = stages.preprocess ?? Number.NaN;
    const post = stages.postprocess ?? Number.NaN;
    return { wallMs, inference, pre, post, rest: wallMs - inference - pre - post };
  };
  const b = budget(s.int8PerSec, s.int8Stages);
  const f = budget(s.fp32PerSec, s.fp32Stages);
  const share = (ms: number, of: number) => `${fmt((ms / of) * 100, 0)}%`;
  const decodeMs = s.int8Own.endToEndP50Ms - s.int8Own.inferP50Ms;
  // CPU ms per image of each server's process tree: where both keep the cores busy, images/s is cores ÷ this.
  const fp32CpuMs = (s.fp32MeanCpuPercent * 10) / s.fp32PerSec;
  const int8CpuMs = (s.int8MeanCpuPercent * 10) / s.int8PerSec;
  return [
    `Per image the int8 server took ${fmt(b.wallMs)} ms of wall time (1000 ÷ images/s; mean Server-Timing per request): model ${fmt(b.inference)} ms (${share(b.inference, b.wallMs)}), waiting for decode + preprocess ${fmt(b.pre)} ms (${share(b.pre, b.wallMs)}), postprocess ${fmt(b.post, 2)} ms, and ${fmt(b.rest)} ms (${share(b.rest, b.wallMs)}) outside the handler (the hand-off between batches: main thread ↔ worker messages, queueing, HTTP); the fp32 server: ${fmt(f.wallMs)} ms, model ${share(f.inference, f.wallMs)}, outside the handler ${fmt(f.rest)} ms.`,
    `The int8 model ran ${fmt(b.inference)} ms per request in the server against ${fmt(s.int8CeilingBatch1P50Ms)} ms alone (ceiling batch 1, p50): ${fmt(b.inference / s.int8CeilingBatch1P50Ms, 2)}x, with JPEG decoding for the next request on libuv's pool beside it (server CPU ${fmt(s.int8MeanCpuPercent, 0)}% of one core on average).`,
    `Server CPU per image (mean CPU ÷ images/s, each server's process tree): fp32 ${fmt(fp32CpuMs)} ms, int8 ${fmt(int8CpuMs)} ms = ${fmt(fp32CpuMs / int8CpuMs, 2)}×, at ${fmt(s.fp32MeanCpuPercent / 100, 2)} and ${fmt(s.int8MeanCpuPercent / 100, 2)} cores busy on average: where both servers keep every core busy, int8 can be at most that much faster.`,
    `The default configuration runs batch 1: the int8 ceiling is ${fmt(s.int8CeilingBatch1PerSec)} img/s at batch 1 against ${fmt(s.int8CeilingPerSec)} at its best batch size.`,
    `Decoding + preprocessing one 640×480 JPEG takes ${fmt(decodeMs)} ms of the int8 model's ${fmt(s.int8Own.endToEndP50Ms)} ms end to end in one process (${share(decodeMs, s.int8Own.endToEndP50Ms)}; the model alone ${fmt(s.int8Own.inferP50Ms)} ms).`,
  ].join(' ');
}
