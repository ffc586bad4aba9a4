import { mkdir, readFile, rm, stat } from 'node:fs/promises';
import os from 'node:os';
import { join } from 'node:path';
import { extractArchive, readManifest, resolveManifestPath } from '@marina/archive';
import { loadModel } from '@marina/quantize';
import * as ort from 'onnxruntime-node';
import { runJsonChild } from '../child-process-json.ts';
import { runLoad } from '../load-generator.ts';
import { describeCpuFlags, getMachineInfo } from '../machine-info.ts';
import { serverTimingDurations } from '../server-timing.ts';
import { startServer, type RunningServer } from '../server-process.ts';
import {
  prepareQuantizeModel,
  quantizeBenchModelNames,
  type QuantizeBenchModel,
  type QuantizeBenchModelName,
} from './quantize-models.ts';

export interface QuantizeBenchOptions {
  models?: readonly QuantizeBenchModelName[];
  /** Where models, samples and archives are kept between runs. */
  cacheDir: string;
  /** Folder for server logs. */
  workDir: string;
  serveBin: string;
  modelArchiverBin: string;
  /** Rounds per server, taken in turns (fp32, int8, fp32, int8 …). Default 3. */
  rounds?: number;
  /** Reuse fp32 and int8 archives an earlier run left in the cache (to measure speed again without quantising again). */
  isReusingArchives?: boolean;
  /** Measured requests per round, one client (batch 1). Default 20. */
  requestsPerRound?: number;
  onProgress?: (message: string) => void;
  /** Called after each model with the results so far (the command rewrites its report, so a long run keeps what it measured). */
  onModelDone?: (partial: QuantizeBenchResult) => Promise<void> | void;
}

/** What the archiver's quantization.json says, in the fields the report uses. */
interface QuantizationJson {
  agreement: { metric: string; value: number };
  initialAgreement: { value: number };
  minAgreement: number;
  isTargetMet: boolean;
  worstFold: number;
  convolutions: { total: number; int8: number };
  quantizedNodes: number;
  keptFp32: Array<{ nodes: string[]; reason: string }>;
  quantizeMs: number;
  search?: { rankedGroups: number; steps: unknown[]; rankMs: number; searchMs: number };
}

/** One model's result. */
export interface QuantizeBenchModelResult {
  model: QuantizeBenchModelName;
  description: string;
  /** Images/s of each server over all its rounds, and each round's. */
  fp32PerSec: number;
  int8PerSec: number;
  fp32RoundsPerSec: number[];
  int8RoundsPerSec: number[];
  /** int8 ÷ fp32 images/s. */
  ratio: number;
  /** int8 ÷ fp32 of each pair of rounds taken back to back, and their median: less moved by a neighbour's load than the pooled ratio. */
  pairedRatios: number[];
  medianPairedRatio: number;
  /** Failed measured requests of both servers (the rates count only answered ones). */
  errors: number;
  /** Mean ms per request of each Server-Timing entry at one client (preprocess, inference, postprocess …): where a request's time goes. */
  stagesMs: { fp32: Record<string, number>; int8: Record<string, number> };
  /**
   * Segmenters only: the same servers at one client asked for the mask as a PNG (`Accept: image/png`)
   * instead of the default per-pixel JSON answer, whose encoding is most of a request's time.
   */
  pngAnswer?: {
    fp32PerSec: number;
    int8PerSec: number;
    ratio: number;
    pairedRatios: number[];
    stagesMs: { fp32: Record<string, number>; int8: Record<string, number> };
  };
  /** onnxruntime alone, ms per image of fp32 and int8 at batch 1, 2, 4 and 8 (same threads, runs taken in turns). */
  sessionRatios: Array<{ batch: number; fp32MsPerImage: number; int8MsPerImage: number }>;
  /**
   * Each server at the batch size where onnxruntime alone ran its model fastest per image (batchSize
   * that size, maxBatchDelay 50 ms, as many clients), rounds taken in turns; absent when both bests are batch 1.
   */
  bestBatch?: {
    fp32Batch: number;
    int8Batch: number;
    fp32PerSec: number;
    int8PerSec: number;
    ratio: number;
    pairedRatios: number[];
  };
  metric: string;
  agreement: number;
  allInt8Agreement: number;
  worstFold: number;
  minAgreement: number;
  isTargetMet: boolean;
  convolutions: { total: number; int8: number };
  /** Depthwise share of the convolutions (group > 1): int8 kernels gain least there. */
  depthwiseShare: number;
  keptFp32: Array<{ count: number; reason: string }>;
  /** Wall time of `model-archiver --quantize int8`, seconds, and the search's share. */
  quantizeSeconds: number;
  searchSeconds: number;
  verdict: string;
}

export interface QuantizeBenchResult {
  startedAt: string;
  cpuModel: string;
  cores: number;
  cpuFlags: string;
  /** Load average before and after, to say how shared the machine was. */
  loadAverage: [number, number];
  rounds: number;
  requestsPerRound: number;
  models: QuantizeBenchModelResult[];
}

async function archiver(bin: string, args: readonly string[]): Promise<number> {
  const start = performance.now();
  await runJsonChild({ scriptPath: bin, args });
  return (performance.now() - start) / 1000;
}

async function exists(path: string): Promise<boolean> {
  return stat(path).then(
    () => true,
    () => false,
  );
}

/** Runs model-archiver for the fp32 and the int8 archive; returns the seconds `--quantize int8` took. */
async function archiveBoth(
  options: QuantizeBenchOptions,
  model: QuantizeBenchModel,
  storeDir: string,
): Promise<number> {
  const common = [
    '--version',
    '1.0',
    '--serialized-file',
    model.modelPath,
    '--handler',
    model.handler,
    ...(model.configPath ? ['-c', model.configPath] : []),
    ...(model.extraFiles.length > 0 ? ['--extra-files', model.extraFiles.join(',')] : []),
    '--export-path',
    storeDir,
    '--force',
  ];
  options.onProgress?.(`${model.name}: fp32 archive`);
  await archiver(options.modelArchiverBin, ['--model-name', `${model.name}-fp32`, ...common]);
  options.onProgress?.(`${model.name}: model-archiver --quantize int8 --calibration (8 samples, k-fold, search)`);
  // --force: a model below its target is still archived, measured and reported as such.
  return archiver(options.modelArchiverBin, [
    '--model-name',
    `${model.name}-int8`,
    ...common,
    ...model.archiverArgs,
    '--quantize',
    'int8',
    '--calibration',
    model.calibrationDir,
  ]);
}

async function makeArchives(
  options: QuantizeBenchOptions,
  model: QuantizeBenchModel,
  storeDir: string,
): Promise<{ quantizeSeconds: number; int8ModelPath: string; quantization: QuantizationJson }> {
  const int8Archive = join(storeDir, `${model.name}-int8.mar`);
  const isReused =
    options.isReusingArchives === true &&
    (await exists(int8Archive)) &&
    (await exists(join(storeDir, `${model.name}-fp32.mar`)));
  const wallSeconds = isReused ? undefined : await archiveBoth(options, model, storeDir);
  const extracted = join(storeDir, `${model.name}-int8-extracted`);
  await rm(extracted, { recursive: true, force: true });
  const { modelDir } = await extractArchive({ archivePath: int8Archive, destDir: extracted });
  const manifest = await readManifest(modelDir);
  const int8ModelPath = await resolveManifestPath(modelDir, manifest!.model.serializedFile!, 'model.serializedFile');
  const quantization = JSON.parse(await readFile(join(modelDir, 'quantization.json'), 'utf8')) as QuantizationJson;
  // Reused archives: the archiver's own quantising time from its report (the wall time of that run was not seen here).
  return { quantizeSeconds: wallSeconds ?? quantization.quantizeMs / 1000, int8ModelPath, quantization };
}

/** What one configuration of the two servers measured: images/s of each round, failures, mean Server-Timing stages. */
interface ServerRounds {
  fp32: number[];
  int8: number[];
  errors: number;
  stagesMs: { fp32: Record<string, number>; int8: Record<string, number> };
}

function meanStages(headers: readonly string[]): Record<string, number> {
  const sums: Record<string, number> = {};
  for (const header of headers)
    for (const [name, ms] of Object.entries(serverTimingDurations(header))) sums[name] = (sums[name] ?? 0) + ms;
  return Object.fromEntries(Object.entries(sums).map(([name, total]) => [name, total / headers.length]));
}

/**
 * Rounds taken in turns by the two servers (fp32, int8, fp32 …): images/s of each round. Each
 * server gets `batch` (batchSize, maxBatchDelay 50 ms, and as many clients, so its batches fill);
 * batch 1 is the defaults at one client.
 */
async function measureServers(
  options: QuantizeBenchOptions,
  model: QuantizeBenchModel,
  storeDir: string,
  batch: { fp32: number; int8: number } = { fp32: 1, int8: 1 },
  requestHeaders: Record<string, string> = {},
): Promise<ServerRounds> {
  const body = await readFile(model.requestPath);
  const servers: RunningServer[] = [];
  const label = (precision: 'fp32' | 'int8') =>
    `${precision}${batch[precision] > 1 ? `, batch ${batch[precision]}` : ''}${requestHeaders.accept ? `, Accept: ${requestHeaders.accept}` : ''}`;
  try {
    for (const precision of ['fp32', 'int8'] as const) {
      const size = batch[precision];
      servers.push(
        await startServer({
          serveBin: options.serveBin,
          modelStoreDir: storeDir,
          archiveFileName: `${model.name}-${precision}.mar`,
          modelName: `${model.name}-${precision}`,
          modelVersion: '1.0',
          workDir: join(options.workDir, `${model.name}-${precision}${size > 1 ? `-batch-${size}` : ''}`),
          tmpDir: join(os.tmpdir(), `marina-bench-quantize-${precision}`),
          ...(size > 1 ? { settings: { batchSize: size, maxBatchDelay: 50 } } : {}),
        }),
      );
    }
    const result: ServerRounds = { fp32: [], int8: [], errors: 0, stagesMs: { fp32: {}, int8: {} } };
    const timings = { fp32: [] as string[], int8: [] as string[] };
    for (let i = 0; i < (options.rounds ?? 3); i++) {
      for (const [index, precision] of (['fp32', 'int8'] as const).entries()) {
        options.onProgress?.(`${model.name}: round ${i + 1}, ${label(precision)} server`);
        const clients = batch[precision];
        const load = await runLoad({
          origin: servers[index]!.origin,
          path: `/predictions/${model.name}-${precision}`,
          body,
          contentType: model.contentType,
          headers: requestHeaders,
          concurrency: clients,
          // At least four full batches per round.
          requests: Math.max(options.requestsPerRound ?? 20, 4 * clients),
          warmupRequests: (i === 0 ? 4 : 1) * clients,
          collectHeader: 'server-timing',
        });
        result[precision].push(load.throughputPerSec);
        result.errors += load.errors;
        timings[precision].push(...load.headerValues);
      }
    }
    result.stagesMs = { fp32: meanStages(timings.fp32), int8: meanStages(timings.int8) };
    return result;
  } finally {
    await Promise.all(servers.map((s) => s.stop()));
  }
}

/** The batch sizes onnxruntime alone is measured at. */
const SESSION_BATCHES = [1, 2, 4, 8] as const;

/** onnxruntime alone, fp32 and int8 sessions taking turns, median ms per image at each batch size. */
async function measureSessions(
  fp32Path: string,
  int8Path: string,
  inputDims: readonly number[],
): Promise<QuantizeBenchModelResult['sessionRatios']> {
  const threads = os.availableParallelism();
  const sessions = await Promise.all(
    [fp32Path, int8Path].map((p) =>
      ort.InferenceSession.create(p, { intraOpNumThreads: threads, graphOptimizationLevel: 'all' }),
    ),
  );
  const results: QuantizeBenchModelResult['sessionRatios'] = [];
  try {
    for (const batch of SESSION_BATCHES) {
      const dims = [batch, ...inputDims.slice(1)];
      const input = new ort.Tensor('float32', new Float32Array(dims.reduce((a, b) => a * b, 1)).fill(0.25), dims);
      const times: [number[], number[]] = [[], []];
      for (let i = 0; i < 12; i++) {
        for (const [s, session] of sessions.entries()) {
          const start = performance.now();
          await session.run({ [session.inputNames[0]!]: input });
          if (i >= 2) times[s]!.push(performance.now() - start);
        }
      }
      results.push({ batch, fp32MsPerImage: median(times[0]) / batch, int8MsPerImage: median(times[1]) / batch });
    }
  } finally {
    await Promise.all(sessions.map((s) => s.release()));
  }
  return results;
}

function median(values: readonly number[]): number {
  return [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;
}

/** The batch size at which onnxruntime alone ran a precision fastest per image. */
function bestSessionBatch(ratios: QuantizeBenchModelResult['sessionRatios'], precision: 'fp32' | 'int8'): number {
  const ms = (r: (typeof ratios)[number]) => (precision === 'fp32' ? r.fp32MsPerImage : r.int8MsPerImage);
  return ratios.reduce((best, r) => (ms(r) < ms(best) ? r : best)).batch;
}

/** The input dims the handler feeds each model (its model-config.yaml size; ResNet's 224 crop). */
function inputDimsOf(model: QuantizeBenchModel): number[] {
  if (model.name === 'ppocr-det') return [1, 3, 320, 320];
  if (model.name === 'ppocr-cls') return [1, 3, 48, 192];
  return [1, 3, 224, 224];
}

async function depthwiseShare(modelPath: string): Promise<number> {
  const { model } = await loadModel(modelPath);
  const convs = (model.graph?.node ?? []).filter((n) => n.opType === 'Conv');
  const depthwise = convs.filter((n) => Number(n.attribute?.find((a) => a.name === 'group')?.i ?? 1) > 1);
  return convs.length === 0 ? 0 : depthwise.length / convs.length;
}

/** One model's verdict in words: whether int8 pays in the server (≥ 1.15x at batch 1 and at the best batch size), and whether it met its accuracy target. */
export function quantizeVerdict(r: Omit<QuantizeBenchModelResult, 'verdict'>): string {
  const accuracy = r.isTargetMet
    ? `meets its target (${r.metric} ${r.agreement.toFixed(3)} ≥ ${r.minAgreement})`
    : `misses its target (${r.metric} ${r.agreement.toFixed(3)} < ${r.minAgreement}): the archiver refuses it without --force`;
  const batched = r.bestBatch ? ` at batch 1, ${r.bestBatch.ratio.toFixed(2)}x at the best batch size` : '';
  const pays = r.ratio >= 1.15 && (r.bestBatch?.ratio ?? r.ratio) >= 1.15;
  const why = [
    r.depthwiseShare >= 0.3
      ? `${Math.round(r.depthwiseShare * 100)}% of its convolutions are depthwise, where int8 kernels gain little`
      : '',
    r.fp32PerSec > 100 ? 'the model is small, so decoding and the server dominate a request' : '',
    outsideModelShare(r) >= 0.3
      ? `${Math.round(outsideModelShare(r) * 100)}% of an int8 request's server time is outside the model's run (decoding, pre- and post-processing, encoding the answer), which int8 does not speed up`
      : '',
    r.pngAnswer ? `with the mask asked for as a PNG: ${r.pngAnswer.ratio.toFixed(2)}x` : '',
  ].filter((reason) => reason !== '');
  const speed = pays
    ? `int8 pays: ${r.ratio.toFixed(2)}x the fp32 server${batched}`
    : `int8 does not pay here: ${r.ratio.toFixed(2)}x the fp32 server${batched}${why.map((reason) => `; ${reason}`).join('')}`;
  return `${speed}; ${accuracy}`;
}

/** Share of an int8 request's server time spent outside the model's run (Server-Timing total vs inference); 0 without the header. */
function outsideModelShare(r: Pick<QuantizeBenchModelResult, 'stagesMs'>): number {
  const { total, inference } = r.stagesMs.int8;
  return total && inference !== undefined ? (total - inference) / total : 0;
}

/** Images/s over all rounds of one server (the same number of images each round): the harmonic mean of the rounds' rates. */
function pooledPerSec(rounds: readonly number[]): number {
  return rounds.length / rounds.reduce((total, perSec) => total + 1 / perSec, 0);
}

function pairedRatios(rounds: { fp32: readonly number[]; int8: readonly number[] }): number[] {
  return rounds.int8.map((perSec, i) => perSec / rounds.fp32[i]!);
}

/**
 * The quantize experiment: for each model, an fp32 archive and an int8 one from
 * `model-archiver --quantize int8` (8 generated samples, k-fold, fall-back search; timed),
 * then both served with the same configuration (defaults, one worker) in rounds taken in
 * turns at one client, and onnxruntime alone at batch 1 and 4. Reports per model what int8
 * buys, its agreement, what stayed fp32 and why, and where int8 does not pay.
 */
export async function runQuantizeBench(options: QuantizeBenchOptions): Promise<QuantizeBenchResult> {
  const startedAt = new Date().toISOString();
  const before = os.loadavg()[0]!;
  const machine = getMachineInfo();
  const results: QuantizeBenchModelResult[] = [];
  const summary = (): QuantizeBenchResult => ({
    startedAt,
    cpuModel: machine.cpuModel,
    cores: machine.cores,
    cpuFlags: describeCpuFlags(machine.cpuFlags),
    loadAverage: [before, os.loadavg()[0]!],
    rounds: options.rounds ?? 3,
    requestsPerRound: options.requestsPerRound ?? 20,
    models: [...results],
  });
  for (const name of options.models ?? quantizeBenchModelNames) {
    const model = await prepareQuantizeModel({ name, cacheDir: options.cacheDir, onStatus: options.onProgress });
    const storeDir = join(options.cacheDir, `quantize-${name}`, 'model-store');
    await mkdir(storeDir, { recursive: true });
    const { quantizeSeconds, int8ModelPath, quantization: q } = await makeArchives(options, model, storeDir);
    const rounds = await measureServers(options, model, storeDir);
    const sessionRatios = await measureSessions(model.modelPath, int8ModelPath, inputDimsOf(model));
    const best = { fp32: bestSessionBatch(sessionRatios, 'fp32'), int8: bestSessionBatch(sessionRatios, 'int8') };
    const batched = best.fp32 > 1 || best.int8 > 1 ? await measureServers(options, model, storeDir, best) : undefined;
    const png =
      model.handler === 'image_segmenter'
        ? await measureServers(options, model, storeDir, undefined, { accept: 'image/png' })
        : undefined;
    const partial = {
      model: name,
      description: model.description,
      fp32PerSec: pooledPerSec(rounds.fp32),
      int8PerSec: pooledPerSec(rounds.int8),
      fp32RoundsPerSec: rounds.fp32,
      int8RoundsPerSec: rounds.int8,
      ratio: pooledPerSec(rounds.int8) / pooledPerSec(rounds.fp32),
      pairedRatios: pairedRatios(rounds),
      medianPairedRatio: median(pairedRatios(rounds)),
      errors: rounds.errors + (batched?.errors ?? 0) + (png?.errors ?? 0),
      stagesMs: rounds.stagesMs,
      sessionRatios,
      ...(png
        ? {
            pngAnswer: {
              fp32PerSec: pooledPerSec(png.fp32),
              int8PerSec: pooledPerSec(png.int8),
              ratio: pooledPerSec(png.int8) / pooledPerSec(png.fp32),
              pairedRatios: pairedRatios(png),
              stagesMs: png.stagesMs,
            },
          }
        : {}),
      ...(batched
        ? {
            bestBatch: {
              fp32Batch: best.fp32,
              int8Batch: best.int8,
              fp32PerSec: pooledPerSec(batched.fp32),
              int8PerSec: pooledPerSec(batched.int8),
              ratio: pooledPerSec(batched.int8) / pooledPerSec(batched.fp32),
              pairedRatios: pairedRatios(batched),
            },
          }
        : {}),
      metric: q.agreement.metric,
      agreement: q.agreement.value,
      allInt8Agreement: q.initialAgreement.value,
      worstFold: q.worstFold,
      minAgreement: q.minAgreement,
      isTargetMet: q.isTargetMet,
      convolutions: q.convolutions,
      depthwiseShare: await depthwiseShare(model.modelPath),
      keptFp32: q.keptFp32.map((k) => ({ count: k.nodes.length, reason: k.reason })),
      quantizeSeconds,
      searchSeconds: q.search ? (q.search.rankMs + q.search.searchMs) / 1000 : 0,
    };
    results.push({ ...partial, verdict: quantizeVerdict(partial) });
    await options.onModelDone?.(summary());
  }
  return summary();
}

/** The result as a Markdown report: one table row per model, then each model's verdict. No single headline. */
export function formatQuantizeReport(result: QuantizeBenchResult): string {
  const f = (x: number, d = 2) => (Number.isFinite(x) ? x.toFixed(d) : 'n/a');
  const lines = [
    `# int8 across models (${result.startedAt})`,
    '',
    `${result.cpuModel}, ${result.cores} cores; CPU flags: ${result.cpuFlags}. Load average ${f(result.loadAverage[0])} before, ${f(result.loadAverage[1])} after. Each server: defaults (one worker), ${result.rounds} rounds of ${result.requestsPerRound} requests at one client, fp32 and int8 taking turns; then each at the batch size where onnxruntime alone ran it fastest (batchSize that size, maxBatchDelay 50 ms, as many clients).`,
    '',
    '| model | fp32 img/s | int8 img/s | int8 ÷ fp32 (median of paired rounds) | best batch fp32 / int8: int8 ÷ fp32 | onnxruntime alone, int8 speed-up at batch 1 / 2 / 4 / 8 | agreement (all int8) | worst fold | target | conv int8 | kept fp32 | quantise s (search) |',
    '|---|---|---|---|---|---|---|---|---|---|---|---|',
  ];
  for (const m of result.models) {
    const sessions = m.sessionRatios.map((s) => f(s.fp32MsPerImage / s.int8MsPerImage)).join(' / ');
    const kept = m.keptFp32.map((k) => `${k.count}: ${k.reason}`).join('; ') || 'none';
    const best = m.bestBatch
      ? `${m.bestBatch.fp32Batch} / ${m.bestBatch.int8Batch}: ${f(m.bestBatch.ratio)} (${f(m.bestBatch.fp32PerSec, 1)} vs ${f(m.bestBatch.int8PerSec, 1)} img/s)`
      : 'batch 1 for both';
    lines.push(
      `| ${m.model} | ${f(m.fp32PerSec, 1)} | ${f(m.int8PerSec, 1)} | ${f(m.ratio)} (${f(m.medianPairedRatio)}) | ${best} | ${sessions} | ${m.metric} ${f(m.agreement, 4)} (${f(m.allInt8Agreement, 4)}) | ${f(m.worstFold, 4)} | ${m.minAgreement} ${m.isTargetMet ? 'met' : 'missed'} | ${m.convolutions.int8}/${m.convolutions.total} | ${kept} | ${f(m.quantizeSeconds, 0)} (${f(m.searchSeconds, 0)}) |`,
    );
  }
  lines.push('');
  for (const m of result.models) lines.push(`- **${m.model}** (${m.description}): ${m.verdict}.`);
  lines.push(
    '',
    "Rounds (img/s, fp32 | int8) and where a request's server time went at one client (Server-Timing means, ms):",
    '',
  );
  for (const m of result.models) {
    const stages = (s: Record<string, number>) =>
      Object.entries(s)
        .map(([name, ms]) => `${name} ${f(ms, 1)}`)
        .join(', ');
    const batchedRounds = m.bestBatch
      ? `; best batch: ${m.bestBatch.pairedRatios.map((r) => f(r)).join(' / ')} paired`
      : '';
    const png = m.pngAnswer
      ? `; mask as PNG: ${f(m.pngAnswer.fp32PerSec, 1)} vs ${f(m.pngAnswer.int8PerSec, 1)} img/s = ${f(m.pngAnswer.ratio)} (paired ${m.pngAnswer.pairedRatios.map((r) => f(r)).join(' / ')}), fp32 ${stages(m.pngAnswer.stagesMs.fp32)}, int8 ${stages(m.pngAnswer.stagesMs.int8)}`
      : '';
    lines.push(
      `- ${m.model}: ${m.fp32RoundsPerSec.map((x) => f(x, 1)).join(' / ')} | ${m.int8RoundsPerSec.map((x) => f(x, 1)).join(' / ')}${batchedRounds}; fp32 ${stages(m.stagesMs.fp32)}; int8 ${stages(m.stagesMs.int8)}${png}${m.errors > 0 ? `; ${m.errors} requests failed` : ''}.`,
    );
  }
  return `${lines.join('\n')}\n`;
}
