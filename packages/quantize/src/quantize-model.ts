import { readFileSync } from 'node:fs';
import * as ort from 'onnxruntime-node';
import {
  chooseRange,
  HistogramCollector,
  MinMaxCollector,
  type CalibrationMethod,
  type TensorRange,
} from './calibration.ts';
import { compareOutputs, DEFAULT_MIN_AGREEMENT, type Agreement, type OutputValues } from './compare-outputs.ts';
import { createError } from './errors.ts';
import { DataType, encodeModel, loadModel, type LoadedModel, type ModelProto } from './onnx-model.ts';
import { QUANTIZABLE_OP_TYPES, quantizeToQdq, type QdqResult } from './qdq-transform.ts';
import { inferTensorTypes } from './tensor-types.ts';

/** One model run's inputs, as a handler feeds them to the session. */
export type Feeds = Record<string, ort.Tensor>;

export interface QuantizeModelOptions {
  modelPath: string;
  /** Inputs to calibrate activation ranges on. */
  calibrationFeeds: readonly Feeds[];
  /** Inputs to measure int8 against fp32 on (kept apart from calibration). */
  evalFeeds: readonly Feeds[];
  /** Output names to compare (default: the model's outputs). */
  outputNames?: readonly string[];
  /** Default 'minmax'. */
  method?: CalibrationMethod;
  percentile?: number;
  /** Target for the headline agreement metric; default from DEFAULT_MIN_AGREEMENT. */
  minAgreement?: number;
  excludedNodes?: readonly string[];
  excludedOpTypes?: readonly string[];
  /** Keep the most sensitive nodes in fp32 until `minAgreement` is met. Default true. */
  isAutoFallback?: boolean;
  /** Most of the quantisable nodes the automatic fall-back may keep in fp32 (0..1). Default 0.5. */
  maxFp32Share?: number;
  /** 7-bit weights for CPUs without VNNI. Default: from the CPU flags (`hasVnni()`). */
  isReducedRange?: boolean;
  /** Threads for the sessions. Default 1. */
  intraOpNumThreads?: number;
  onProgress?: (message: string) => void;
}

export interface FallbackStep {
  keptFp32: string[];
  agreement: number;
}

/** What `quantizeModel` did, as written to quantization.json. */
export interface QuantizationReport {
  precision: 'int8';
  format: 'QDQ';
  method: CalibrationMethod;
  percentile?: number;
  weights: string;
  activations: string;
  isReducedRange: boolean;
  reducedRangeReason: string;
  calibrationSamples: number;
  evalSamples: number;
  minAgreement: number;
  isTargetMet: boolean;
  agreement: Agreement;
  /** Agreement with every quantisable node in int8 (before any automatic fp32 fall-back). */
  initialAgreement: Agreement;
  quantizedNodes: number;
  /** Nodes kept in fp32 automatically (most sensitive first), by name. */
  autoKeptFp32: string[];
  /** Nodes kept in fp32 by --exclude-nodes / --exclude-op-types. */
  excludedNodes: string[];
  excludedOpTypes: string[];
  /** Quantisable-type nodes that stayed fp32 for any reason. */
  fp32Nodes: string[];
  fallbackSteps: FallbackStep[];
  /** Median milliseconds per eval sample, one thread, fp32 / final int8 / all-int8 (what the kept nodes cost). */
  msPerSample: { fp32: number; int8: number; allInt8: number };
  modelBytes: { fp32: number; int8: number };
}

export interface QuantizeModelResult {
  model: ModelProto;
  report: QuantizationReport;
}

/** Whether this CPU has VNNI (avx512_vnni or avx_vnni in /proc/cpuinfo); false when unknown. */
export function hasVnni(): boolean {
  try {
    return /\b(avx512_vnni|avx_vnni)\b/.test(readFileSync('/proc/cpuinfo', 'utf8'));
  } catch {
    return false;
  }
}

async function createSession(
  model: Uint8Array | string,
  threads: number,
  level: 'all' | 'basic',
): Promise<ort.InferenceSession> {
  return typeof model === 'string'
    ? ort.InferenceSession.create(model, { intraOpNumThreads: threads, graphOptimizationLevel: level })
    : ort.InferenceSession.create(model, { intraOpNumThreads: threads, graphOptimizationLevel: level });
}

function toValues(tensor: ort.Tensor): OutputValues {
  const data =
    tensor.data instanceof Float32Array
      ? new Float32Array(tensor.data)
      : Float32Array.from(tensor.data as ArrayLike<number>, Number);
  return { dims: [...tensor.dims], data };
}

async function runAll(
  session: ort.InferenceSession,
  feeds: readonly Feeds[],
  names: readonly string[],
): Promise<{ outputs: Array<Record<string, OutputValues>>; msPerSample: number }> {
  const outputs: Array<Record<string, OutputValues>> = [];
  const times: number[] = [];
  for (const feed of feeds) {
    const start = performance.now();
    const result = await session.run(feed, [...names]);
    times.push(performance.now() - start);
    outputs.push(Object.fromEntries(names.map((n) => [n, toValues(result[n]!)])));
  }
  times.sort((a, b) => a - b);
  return { outputs, msPerSample: times[Math.floor(times.length / 2)] ?? 0 };
}

/** The model with extra graph outputs for `names` (float tensors), so a run returns them. */
function withOutputs(model: ModelProto, names: readonly string[]): ModelProto {
  const existing = new Set((model.graph?.output ?? []).map((o) => o.name));
  const extra = names
    .filter((n) => !existing.has(n))
    .map((name) => ({ name, type: { tensorType: { elemType: DataType.FLOAT } } }));
  return { ...model, graph: { ...model.graph, output: [...(model.graph?.output ?? []), ...extra] } };
}

/** Float tensors read or written by quantisable nodes (not initializers), in graph order. */
function calibrationTensors(loaded: LoadedModel): string[] {
  const graph = loaded.model.graph!;
  const types = inferTensorTypes(loaded.model);
  const initializers = new Set((graph.initializer ?? []).map((t) => t.name));
  const names = new Set<string>();
  for (const node of graph.node ?? []) {
    if (!QUANTIZABLE_OP_TYPES.includes(node.opType ?? '')) continue;
    for (const t of [...(node.input ?? []), ...(node.output ?? [])]) {
      if (t && !initializers.has(t) && types.get(t) === DataType.FLOAT) names.add(t);
    }
  }
  return [...names];
}

/**
 * Quantises an ONNX model to int8 QDQ: calibrates activation ranges on `calibrationFeeds`
 * with `method`, measures agreement with fp32 on `evalFeeds`, and, while the agreement is
 * below `minAgreement`, keeps the nodes whose quantisation hurts most in fp32 (ranked by the
 * error each adds to its own output, in a run with intermediate outputs exposed), doubling
 * how many are kept each round, up to `maxFp32Share` of them; the round with the best
 * agreement is kept. Returns the model and its report; it does not refuse:
 * the caller decides what a report below target means.
 *
 * @throws MARINA_ERR_QUANTIZE_MODEL_INVALID, MARINA_ERR_QUANTIZE_OPTION_INVALID,
 *   MARINA_ERR_QUANTIZE_CALIBRATION_EMPTY.
 */
export async function quantizeModel(options: QuantizeModelOptions): Promise<QuantizeModelResult> {
  const method = options.method ?? 'minmax';
  const threads = options.intraOpNumThreads ?? 1;
  const progress = options.onProgress ?? (() => undefined);
  if (options.calibrationFeeds.length === 0)
    throw createError.MARINA_ERR_QUANTIZE_CALIBRATION_EMPTY(
      'no calibration samples: give at least one request body in the calibration folder',
    );
  if (options.evalFeeds.length === 0)
    throw createError.MARINA_ERR_QUANTIZE_CALIBRATION_EMPTY(
      'no evaluation samples: give at least two calibration samples (a quarter are held back) or an --eval folder',
    );
  if (options.minAgreement !== undefined && !(options.minAgreement >= 0 && options.minAgreement <= 1)) {
    throw createError.MARINA_ERR_QUANTIZE_OPTION_INVALID(
      `min agreement is ${options.minAgreement}; it must be between 0 and 1`,
    );
  }
  const loaded = await loadModel(options.modelPath);
  const nodeNames = new Set((loaded.model.graph?.node ?? []).map((n) => n.name ?? ''));
  for (const name of options.excludedNodes ?? []) {
    if (!nodeNames.has(name))
      throw createError.MARINA_ERR_QUANTIZE_OPTION_INVALID(
        `--exclude-nodes names '${name}', which is not a node of the model (nodes are named as in the ONNX file, e.g. ${[...nodeNames].slice(0, 3).join(', ')})`,
      );
  }
  const vnni = hasVnni();
  const isReducedRange = options.isReducedRange ?? !vnni;
  const reducedRangeReason =
    options.isReducedRange !== undefined
      ? 'chosen by the caller'
      : vnni
        ? 'this CPU has VNNI: full 8-bit weights'
        : 'this CPU has no VNNI (avx512_vnni/avx_vnni): 7-bit weights avoid u8s8 saturation, as onnxruntime advises';

  // Calibration: every quantisable tensor is a graph output of a calibration copy of the model.
  const tensors = calibrationTensors(loaded);
  const inputNames = new Set((loaded.model.graph?.input ?? []).map((i) => i.name ?? ''));
  const fetched = tensors.filter((t) => !inputNames.has(t));
  progress(`calibrating ${tensors.length} tensors on ${options.calibrationFeeds.length} samples (${method})`);
  const calibrationSession = await createSession(encodeModel(withOutputs(loaded.model, fetched)), threads, 'basic');
  const minMax = new MinMaxCollector();
  const pass = async (add: (name: string, values: ArrayLike<number>) => void): Promise<void> => {
    for (const feed of options.calibrationFeeds) {
      const result = await calibrationSession.run(feed, fetched);
      for (const name of fetched) add(name, result[name]!.data as Float32Array);
      for (const name of tensors) if (inputNames.has(name) && feed[name]) add(name, feed[name].data as Float32Array);
    }
  };
  await pass((n, v) => minMax.add(n, v));
  const ranges = new Map<string, TensorRange>();
  if (method === 'minmax') for (const [n, r] of minMax.ranges) ranges.set(n, r);
  else {
    const histograms = new HistogramCollector(minMax.ranges);
    await pass((n, v) => histograms.add(n, v));
    for (const [n, r] of minMax.ranges)
      ranges.set(
        n,
        chooseRange(
          method,
          r,
          histograms.histograms.get(n),
          options.percentile === undefined ? {} : { percentile: options.percentile },
        ),
      );
  }

  // fp32 reference on the evaluation samples.
  const outputNames = options.outputNames ?? (loaded.model.graph?.output ?? []).map((o) => o.name ?? '');
  const fp32Session = await createSession(options.modelPath, threads, 'all');
  const fp32 = await runAll(fp32Session, options.evalFeeds, outputNames);
  await fp32Session.release();

  const excludedOpTypes = new Set(options.excludedOpTypes ?? []);
  const manual = new Set(options.excludedNodes ?? []);
  const build = (autoKept: readonly string[]): QdqResult =>
    quantizeToQdq(loaded.model, loaded.opset, {
      ranges,
      excludedNodes: new Set([...manual, ...autoKept]),
      excludedOpTypes,
      isReducedRange,
    });
  const evaluate = async (result: QdqResult): Promise<{ agreement: Agreement; msPerSample: number }> => {
    const session = await createSession(encodeModel(result.model), threads, 'all');
    const run = await runAll(session, options.evalFeeds, outputNames);
    await session.release();
    return { agreement: compareOutputs(fp32.outputs, run.outputs), msPerSample: run.msPerSample };
  };

  let current = build([]);
  const first = await evaluate(current);
  const minAgreement = options.minAgreement ?? DEFAULT_MIN_AGREEMENT[first.agreement.metric];
  progress(`int8 agreement ${first.agreement.metric} ${first.agreement.value.toFixed(4)} (target ${minAgreement})`);
  let last = first;
  let autoKept: string[] = [];
  const steps: FallbackStep[] = [];
  if (first.agreement.value < minAgreement && (options.isAutoFallback ?? true)) {
    const ranking = await rankSensitivity(loaded, current, options.evalFeeds, fetched, threads);
    progress(`ranked ${ranking.length} quantised nodes by the error they add`);
    // Past half of the nodes in fp32 the archive would no longer be an int8 model worth serving.
    const maxKept = Math.floor(ranking.length * (options.maxFp32Share ?? 0.5));
    let best = { kept: [] as string[], result: current, evaluation: first };
    for (let count = 1; count <= maxKept; count = count * 2 > maxKept && count < maxKept ? maxKept : count * 2) {
      const kept = ranking.slice(0, count);
      const result = build(kept);
      const evaluation = await evaluate(result);
      steps.push({ keptFp32: kept, agreement: evaluation.agreement.value });
      progress(`kept ${kept.length} node(s) in fp32: agreement ${evaluation.agreement.value.toFixed(4)}`);
      if (evaluation.agreement.value > best.evaluation.agreement.value) best = { kept, result, evaluation };
      if (evaluation.agreement.value >= minAgreement) break;
    }
    // The best step wins (more fp32 nodes do not always agree better).
    autoKept = best.kept;
    current = best.result;
    last = best.evaluation;
  }
  const int8Bytes = encodeModel(current.model).length;
  const fp32Bytes = (loaded.model.graph?.initializer ?? []).reduce(
    (n, t) => n + (t.rawData?.length || (t.floatData?.length ?? 0) * 4),
    0,
  );
  const report: QuantizationReport = {
    precision: 'int8',
    format: 'QDQ',
    method,
    ...(method === 'percentile' ? { percentile: options.percentile ?? 99.999 } : {}),
    weights: `int8 symmetric per channel${loaded.opset < 13 ? ' (com.microsoft DequantizeLinear, opset < 13)' : ''}${isReducedRange ? ', 7-bit range' : ''}; biases int32`,
    activations: 'uint8 asymmetric per tensor',
    isReducedRange,
    reducedRangeReason,
    calibrationSamples: options.calibrationFeeds.length,
    evalSamples: options.evalFeeds.length,
    minAgreement,
    isTargetMet: last.agreement.value >= minAgreement,
    agreement: last.agreement,
    initialAgreement: first.agreement,
    quantizedNodes: current.quantizedNodes.length,
    autoKeptFp32: autoKept,
    excludedNodes: [...manual],
    excludedOpTypes: [...excludedOpTypes],
    fp32Nodes: current.fp32Nodes,
    fallbackSteps: steps,
    msPerSample: { fp32: round(fp32.msPerSample), int8: round(last.msPerSample), allInt8: round(first.msPerSample) },
    modelBytes: { fp32: fp32Bytes, int8: int8Bytes },
  };
  await calibrationSession.release();
  return { model: current.model, report };
}

function round(x: number): number {
  return Math.round(x * 100) / 100;
}

function relativeError(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let num = 0;
  let den = 0;
  for (let i = 0; i < a.length; i++) {
    num += (a[i]! - b[i]!) ** 2;
    den += b[i]! ** 2;
  }
  return den === 0 ? Math.sqrt(num) : Math.sqrt(num / den);
}

/**
 * Ranks the quantised nodes by the error they add: each node's output is compared between the
 * int8 model and fp32 (both run with the tensors exposed), and the node's score is its output's
 * relative error minus the largest error among its inputs.
 */
async function rankSensitivity(
  loaded: LoadedModel,
  qdq: QdqResult,
  feeds: readonly Feeds[],
  fetched: readonly string[],
  threads: number,
): Promise<string[]> {
  const nodesByName = new Map((loaded.model.graph?.node ?? []).map((n) => [n.name ?? '', n]));
  const produced = new Set((qdq.model.graph?.node ?? []).flatMap((n) => n.output ?? []));
  const names = fetched.filter((t) => produced.has(t));
  const fpSession = await createSession(encodeModel(withOutputs(loaded.model, names)), threads, 'basic');
  const qSession = await createSession(encodeModel(withOutputs(qdq.model, names)), threads, 'basic');
  const error = new Map<string, number>();
  for (const feed of feeds) {
    const a = await fpSession.run(feed, [...names]);
    const b = await qSession.run(feed, [...names]);
    for (const n of names)
      error.set(n, Math.max(error.get(n) ?? 0, relativeError(b[n]!.data as Float32Array, a[n]!.data as Float32Array)));
  }
  await fpSession.release();
  await qSession.release();
  // A Relu/Clip folded into its producer: the producer's output is the activation's.
  const foldedInto = new Map(
    qdq.fusedNodes.map((n) => [nodesByName.get(n)?.input?.[0] ?? '', nodesByName.get(n)?.output?.[0] ?? '']),
  );
  const scored = qdq.quantizedNodes.map((name) => {
    const node = nodesByName.get(name)!;
    const output = node.output?.[0] ?? '';
    const out = error.get(foldedInto.get(output) ?? output) ?? 0;
    const inputs = Math.max(0, ...(node.input ?? []).map((i) => error.get(i) ?? 0));
    return { name, score: out - inputs };
  });
  scored.sort((x, y) => y.score - x.score);
  return scored.map((s) => s.name);
}
