import { mkdtemp, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import { basename, dirname, join, resolve } from 'node:path';
import * as ort from 'onnxruntime-node';
import { sessionSignature, syntheticRequestBody } from '@marina/handlers';
import { benchErrors } from '../errors.ts';
import { getMachineInfo, type MachineInfo } from '../machine-info.ts';
import { openModel, warmupSamplePath } from '../profile/profile-model.ts';
import { defaultServeBin } from '../run-bench.ts';
import { readLoadAverage } from '../stats.ts';
import {
  batchSizes,
  configLines,
  describeConfig,
  rank,
  type SkippedConfig,
  type TuneCurvePoint,
  type TuneInput,
  type TuneMeasurement,
  workerThreadPairs,
} from './tune-plan.ts';
import { TuneSession } from './tune-session.ts';

export interface TuneResult {
  archive: string;
  modelName: string;
  modelVersion: string;
  handler: string;
  cores: number;
  budgetS: number;
  elapsedS: number;
  /** 1-minute load average at the start and the end: other work on the machine skews every number. */
  loadAverage: { start: number; end: number };
  machine: MachineInfo;
  input: { from: string; bytes: number; contentType: string };
  /** Every configuration measured, best first. */
  measured: TuneMeasurement[];
  /** Configurations planned but not measured, and why (budget, a failed start). */
  skipped: SkippedConfig[];
  recommendation: TuneMeasurement & {
    /** The lines to put into config.properties, exactly as the measured server had them. */
    configLines: string[];
  };
  /** The recommended configuration's throughput and latency against concurrent clients. */
  curve: TuneCurvePoint[];
}

export interface TuneOptions {
  /** A model archive (.mar, .tar.gz or folder) in a model store folder. */
  archivePath: string;
  /** Seconds for everything, server starts included. Default 120. */
  budgetS?: number;
  /** A request body; default the archive's `warmup.input`, else synthetic from the signature (built-in handlers only). */
  inputPath?: string;
  contentType?: string;
  /** Largest batch size tried. Default 8. */
  maxBatchSize?: number;
  serveBin?: string;
  /** Cores to plan for. Default os.availableParallelism(). */
  cores?: number;
  onProgress?: (message: string) => void;
}

/** The request body to measure with: --input, else the archive's warmup sample, else one made from the signature. */
async function requestBody(options: TuneOptions, archivePath: string): Promise<TuneInput> {
  const model = await openModel(archivePath);
  try {
    if (model.modelDir === undefined)
      throw benchErrors.create.MARINA_ERR_BENCH_OPTION_INVALID(
        `tune needs a model archive (.mar, .tar.gz or an archive folder), not a bare ONNX file: package it with model-archiver first`,
      );
    const handler = model.handler ?? 'base_handler';
    const defaultType = ['image_classifier', 'image_segmenter', 'object_detector'].includes(handler)
      ? 'image/jpeg'
      : handler === 'tensor' || handler === 'base_handler'
        ? 'application/json'
        : 'application/octet-stream';
    const samplePath = options.inputPath ?? (await warmupSamplePath(model));
    const base = { handler, modelName: model.modelName, modelVersion: model.modelVersion ?? '1.0' };
    if (samplePath)
      return {
        ...base,
        body: await readFile(samplePath),
        contentType: options.contentType ?? defaultType,
        from: basename(samplePath),
      };
    const session = await ort.InferenceSession.create(model.modelFile, { intraOpNumThreads: 1 });
    const signature = sessionSignature(session);
    await session.release();
    const synthetic = await syntheticRequestBody(handler, signature);
    if (!synthetic)
      throw benchErrors.create.MARINA_ERR_BENCH_OPTION_INVALID(
        `the archive's handler '${handler}' is custom, so no request can be made from the model's signature; pass a request body with --input <file> (and --content-type)`,
      );
    return {
      ...base,
      body: synthetic.body,
      contentType: options.contentType ?? synthetic.contentType,
      from: `synthetic from the signature (${handler})`,
    };
  } finally {
    await model.cleanup();
  }
}

/**
 * Finds the configuration that serves an archive fastest on this machine: starts a real server
 * (`serve`, as a user would) for each combination of workers × intra-op threads × batch size (and
 * maxBatchDelay where a batch size above 1 beats batch 1), never with more threads than cores,
 * drives a closed-loop load against it, and measures throughput and p50/p99 latency. Then a
 * concurrency curve of the best. Everything fits in `budgetS`: configurations that would not are
 * listed as skipped. The recommendation is the best measured configuration, as config.properties lines.
 *
 * @throws MARINA_ERR_BENCH_OPTION_INVALID for a bad option or input; MARINA_ERR_BENCH_TUNE_NO_RESULT when nothing could be measured.
 */
export async function tuneArchive(options: TuneOptions): Promise<TuneResult> {
  const startedMs = performance.now();
  const budgetS = options.budgetS ?? 120;
  const cores = options.cores ?? os.availableParallelism();
  const maxBatchSize = options.maxBatchSize ?? 8;
  if (!(budgetS > 0))
    throw benchErrors.create.MARINA_ERR_BENCH_OPTION_INVALID(`--budget-s must be above 0, got ${budgetS}`);
  if (!Number.isInteger(maxBatchSize) || maxBatchSize < 1)
    throw benchErrors.create.MARINA_ERR_BENCH_OPTION_INVALID(
      `--max-batch-size must be a whole number of 1 or more, got ${maxBatchSize}`,
    );
  const archivePath = resolve(options.archivePath);
  const serveBin = resolve(options.serveBin ?? process.env.MARINA_SERVE_BIN ?? defaultServeBin());
  const loadStart = readLoadAverage();
  const input = await requestBody(options, archivePath);
  const archiveFileName = basename(archivePath);
  const workRoot = await mkdtemp(join(os.tmpdir(), 'marina-tune-'));
  try {
    const session = new TuneSession({
      input,
      serveBin,
      modelStoreDir: dirname(archivePath),
      archiveFileName,
      workRoot,
      budgetS,
      startedMs,
      log: (message) => options.onProgress?.(message),
    });
    const extraBatches = batchSizes(maxBatchSize);
    await session.measurePairs({ pairs: workerThreadPairs(cores), phasesAfter: extraBatches.length + 1 });
    await session.measureBatching({ batchSizes: extraBatches });
    const usable = session.measured.filter((m) => m.requests > 0);
    if (usable.length === 0) {
      throw benchErrors.create.MARINA_ERR_BENCH_TUNE_NO_RESULT(
        `no configuration of ${archiveFileName} was measured within ${budgetS} s (${session.skipped.map((s) => `${s.config}: ${s.reason}`).join('; ') || 'none started'}); raise --budget-s`,
      );
    }
    usable.sort(rank);
    const best = usable[0]!;
    const curve = await session.measureCurve(best);
    return {
      archive: archivePath,
      modelName: input.modelName,
      modelVersion: input.modelVersion,
      handler: input.handler,
      cores,
      budgetS,
      elapsedS: (performance.now() - startedMs) / 1000,
      loadAverage: { start: loadStart, end: readLoadAverage() },
      machine: getMachineInfo(),
      input: { from: input.from, bytes: input.body.length, contentType: input.contentType },
      measured: usable,
      skipped: session.skipped,
      recommendation: {
        ...best,
        configLines: configLines({
          modelName: input.modelName,
          modelVersion: input.modelVersion,
          archiveFileName,
          config: best,
        }),
      },
      curve,
    };
  } finally {
    await rm(workRoot, { recursive: true, force: true });
  }
}

/** The tune result as text: the recommended lines, the best few, every measurement, the curve. */
export function formatTuneResult(result: TuneResult): string {
  const f = (v: number, digits = 1) => (Number.isFinite(v) ? v.toFixed(digits) : 'n/a');
  const lines: string[] = [];
  lines.push(
    `${result.modelName} ${result.modelVersion} (${result.handler}) on ${result.machine.cpuModel}, ${result.cores} cores; load average ${f(result.loadAverage.start, 2)} -> ${f(result.loadAverage.end, 2)}`,
  );
  lines.push(
    `input: ${result.input.from}, ${result.input.bytes} bytes, ${result.input.contentType}; ${result.measured.length} configurations in ${f(result.elapsedS)} s of a ${result.budgetS} s budget`,
  );
  lines.push('');
  lines.push(
    `recommended (${describeConfig(result.recommendation)}): ${f(result.recommendation.throughputPerSec)}/s, p50 ${f(result.recommendation.p50Ms)} ms, p99 ${f(result.recommendation.p99Ms)} ms at ${result.recommendation.concurrency} clients`,
  );
  lines.push('# config.properties');
  lines.push(...result.recommendation.configLines);
  lines.push('');
  const header = [
    '#',
    'workers',
    'threads',
    'batch',
    'delay ms',
    'clients',
    'req/s',
    'p50 ms',
    'p99 ms',
    'requests',
    'errors',
    'start s',
  ];
  const rows = result.measured.map((m, i) => [
    String(i + 1),
    String(m.workers),
    String(m.threads),
    String(m.batchSize),
    String(m.maxBatchDelay),
    String(m.concurrency),
    f(m.throughputPerSec),
    f(m.p50Ms),
    f(m.p99Ms),
    String(m.requests),
    String(m.errors),
    f(m.startMs / 1000),
  ]);
  const widths = header.map((h, c) => Math.max(h.length, ...rows.map((r) => r[c]!.length)));
  const line = (cells: string[]) => cells.map((cell, c) => cell.padStart(widths[c]!)).join('  ');
  lines.push('measured, best first:', line(header), ...rows.map(line));
  if (result.curve.length > 0) {
    lines.push('', `curve of the recommendation (clients: req/s, p50 / p99 ms):`);
    for (const p of result.curve)
      lines.push(
        `  ${String(p.concurrency).padStart(3)}: ${f(p.throughputPerSec).padStart(8)}/s  ${f(p.p50Ms)} / ${f(p.p99Ms)}${p.errors > 0 ? `  (${p.errors} errors)` : ''}`,
      );
  }
  for (const s of result.skipped) lines.push(`skipped ${s.config}: ${s.reason}`);
  return lines.join('\n');
}
