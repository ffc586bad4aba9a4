import { readFileSync } from 'node:fs';
import { CalibrationStats, type CalibrationChoice, type CalibrationMethod, type TensorRange } from './calibration.ts';
import { compareOutputs, DEFAULT_MIN_AGREEMENT, type Agreement, type OutputValues } from './compare-outputs.ts';
import { createError } from './errors.ts';
import { createFolds, heldOutFold, type Fold } from './k-fold.ts';
import { createSession, runAll, withOutputs, type Feeds } from './model-runner.ts';
import {
  DataType,
  encodeModel,
  loadModel,
  upgradeOpset9To10,
  type LoadedModel,
  type ModelProto,
} from './onnx-model.ts';
import { QUANTIZABLE_OP_TYPES, quantizeToQdq, type QdqResult } from './qdq-transform.ts';
import { measuredDefaults, probabilityKept, type DefaultTried, type KeptFp32 } from './quantize-defaults.ts';
import {
  rankBySensitivity,
  searchFp32Set,
  type Measurement,
  type RankedGroup,
  type SearchStep,
} from './sensitivity.ts';
import { inferTensorTypes } from './tensor-types.ts';

export type { Feeds } from './model-runner.ts';

/** Below this many samples the report warns that the agreement estimate is weak. */
export const MIN_SAMPLES_FOR_ESTIMATE = 8;
/** Folds of the k-fold evaluation (fewer when there are fewer samples). */
export const DEFAULT_FOLDS = 4;
/** Default most groups the fall-back search tries (each try is one measured run over the search samples). */
export const DEFAULT_MAX_SEARCH_STEPS = 64;

export interface QuantizeModelOptions {
  modelPath: string;
  /** The samples: calibration and, without `evalFeeds`, k-fold evaluation (each evaluated once, calibrated on the others). */
  calibrationFeeds: readonly Feeds[];
  /** Samples to evaluate on instead of k-fold (calibration then uses every `calibrationFeeds`). */
  evalFeeds?: readonly Feeds[];
  /** k of the k-fold evaluation. Default DEFAULT_FOLDS (at most one fold per sample). */
  folds?: number;
  /** Output names to compare (default: the model's outputs). */
  outputNames?: readonly string[];
  /** Default 'auto': per tensor, the method with the least quantisation error on the calibration data. */
  method?: CalibrationChoice;
  percentile?: number;
  /** Target for the headline agreement metric; default from DEFAULT_MIN_AGREEMENT. */
  minAgreement?: number;
  excludedNodes?: readonly string[];
  excludedOpTypes?: readonly string[];
  /** Search for nodes to keep in fp32 when the target is not met. Default true. */
  isAutoFallback?: boolean;
  /** Most of the quantised groups the fall-back may keep in fp32 (0..1). Default 0.5. */
  maxFp32Share?: number;
  /** Most groups the fall-back search tries. Default DEFAULT_MAX_SEARCH_STEPS. */
  maxSearchSteps?: number;
  /** 7-bit weights for CPUs without VNNI. Default: from the CPU flags (`hasVnni()`). */
  isReducedRange?: boolean;
  /** Threads for the sessions. Default 1. */
  intraOpNumThreads?: number;
  onProgress?: (message: string) => void;
}

/** How one evaluation fold did. */
export interface FoldResult {
  calibrationSamples: number;
  evalSamples: number;
  value: number;
}

/** The fall-back search, as measured. */
export interface SearchReport {
  /** Groups ranked by the agreement each gives alone in int8 (worst first; the first 20 are listed). */
  ranked: RankedGroup[];
  rankedGroups: number;
  /** Agreement on the search samples before the first step (with the fp32 defaults). */
  start: number;
  steps: SearchStep[];
  /** Milliseconds the ranking and the search took. */
  rankMs: number;
  searchMs: number;
}

/** What `quantizeModel` did, as written to quantization.json. */
export interface QuantizationReport {
  precision: 'int8';
  format: 'QDQ';
  method: CalibrationChoice;
  /** How many tensors each method calibrated (with 'auto', the method of least error per tensor). */
  methodsChosen: Record<CalibrationMethod, number>;
  percentile?: number;
  weights: string;
  activations: string;
  isReducedRange: boolean;
  reducedRangeReason: string;
  /** Samples given; with k-fold every one is evaluated once, by a model calibrated on the others. */
  samples: number;
  evaluation: 'k-fold' | 'held-out';
  /** Calibration samples per fold (the smallest). */
  calibrationSamples: number;
  /** Samples evaluated in all. */
  evalSamples: number;
  folds: FoldResult[];
  worstFold: number;
  meanFold: number;
  warnings: string[];
  minAgreement: number;
  isTargetMet: boolean;
  /** Agreement over every evaluated sample (each by a model not calibrated on it). */
  agreement: Agreement;
  /** The same with every quantisable node in int8 (no fp32 defaults, no fall-back). */
  initialAgreement: Agreement;
  quantizedNodes: number;
  convolutions: { total: number; int8: number };
  /** Nodes kept in fp32 and why (defaults that measurably helped, the fall-back search, requests). */
  keptFp32: KeptFp32[];
  /** The fp32 defaults measured on the search samples (feeders of probability outputs, first convolutions), kept or not. */
  defaultsTried: DefaultTried[];
  /** Nodes kept in fp32 by the fall-back search, by name (most sensitive first). */
  autoKeptFp32: string[];
  excludedNodes: string[];
  excludedOpTypes: string[];
  /** Quantisable-type nodes that stayed fp32 for any reason. */
  fp32Nodes: string[];
  search?: SearchReport;
  /** Median milliseconds per evaluated sample, one thread, fp32 / final int8 / all-int8. Not a benchmark. */
  msPerSample: { fp32: number; int8: number; allInt8: number };
  modelBytes: { fp32: number; int8: number };
  /** Milliseconds the whole quantisation took. */
  quantizeMs: number;
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

/** Runs every sample through the model with its quantisable tensors exposed: per-sample ranges, then histograms. */
async function calibrate(
  loaded: LoadedModel,
  samples: readonly Feeds[],
  method: CalibrationChoice,
  threads: number,
): Promise<CalibrationStats> {
  const tensors = calibrationTensors(loaded);
  const inputNames = new Set((loaded.model.graph?.input ?? []).map((i) => i.name ?? ''));
  const fetched = tensors.filter((t) => !inputNames.has(t));
  const session = await createSession(encodeModel(withOutputs(loaded.model, fetched)), threads, 'basic');
  const stats = new CalibrationStats();
  const pass = async (add: (sample: number, name: string, values: ArrayLike<number>) => void): Promise<void> => {
    for (const [s, feed] of samples.entries()) {
      const result = await session.run(feed, fetched);
      for (const name of fetched) add(s, name, result[name]!.data as Float32Array);
      for (const name of tensors) if (inputNames.has(name) && feed[name]) add(s, name, feed[name].data as Float32Array);
    }
  };
  try {
    await pass((s, n, v) => stats.addRange(s, n, v));
    if (method !== 'minmax') await pass((s, n, v) => stats.addHistogram(s, n, v));
  } finally {
    await session.release();
  }
  return stats;
}

function checkOptions(options: QuantizeModelOptions): void {
  if (options.calibrationFeeds.length === 0)
    throw createError.MARINA_ERR_QUANTIZE_CALIBRATION_EMPTY(
      'no calibration samples: give at least one request body in the calibration folder',
    );
  if (!options.evalFeeds && options.calibrationFeeds.length < 2)
    throw createError.MARINA_ERR_QUANTIZE_CALIBRATION_EMPTY(
      'one sample cannot be both calibrated on and evaluated: give at least two samples (eight or more for a fair estimate) or an --eval folder',
    );
  if (options.evalFeeds?.length === 0)
    throw createError.MARINA_ERR_QUANTIZE_CALIBRATION_EMPTY('the evaluation folder has no samples');
  if (options.minAgreement !== undefined && !(options.minAgreement >= 0 && options.minAgreement <= 1))
    throw createError.MARINA_ERR_QUANTIZE_OPTION_INVALID(
      `min agreement is ${options.minAgreement}; it must be between 0 and 1`,
    );
  if (options.folds !== undefined && !(Number.isInteger(options.folds) && options.folds >= 2))
    throw createError.MARINA_ERR_QUANTIZE_OPTION_INVALID(
      `folds is ${options.folds}; give a whole number of at least 2`,
    );
}

function checkExcludedNodes(loaded: LoadedModel, excluded: readonly string[]): void {
  const nodeNames = new Set((loaded.model.graph?.node ?? []).map((n) => n.name ?? ''));
  for (const name of excluded) {
    if (!nodeNames.has(name))
      throw createError.MARINA_ERR_QUANTIZE_OPTION_INVALID(
        `--exclude-nodes names '${name.slice(0, 200)}', which is not a node of the model (nodes are named as in the ONNX file, e.g. ${[...nodeNames].slice(0, 3).join(', ')})`,
      );
  }
}

interface MeasurerOptions {
  loaded: LoadedModel;
  build: (ranges: Map<string, TensorRange>, kept: ReadonlySet<string>) => QdqResult;
  stats: CalibrationStats;
  samples: readonly Feeds[];
  /** fp32 outputs of every sample. */
  fp32: ReadonlyArray<Record<string, OutputValues>>;
  folds: readonly Fold[];
  /** Samples the search calibrates and measures on (and the shipped model is calibrated on). */
  searchSamples: readonly number[];
  outputNames: readonly string[];
  method: CalibrationChoice;
  percentile?: number;
  threads: number;
}

interface Evaluation {
  agreement: Agreement;
  folds: FoldResult[];
  msPerSample: number;
}

/** The measurements a quantisation makes: out-of-sample agreement (k-fold or held out), and agreement on the search samples. */
class Measurer {
  private readonly foldRanges = new Map<Fold, Map<string, TensorRange>>();
  readonly searchRanges: Map<string, TensorRange>;
  readonly methodsChosen: Record<CalibrationMethod, number>;

  constructor(private readonly o: MeasurerOptions) {
    const all = o.stats.ranges(o.searchSamples, o.method, this.percentileOption());
    this.searchRanges = all.ranges;
    this.methodsChosen = all.methods;
  }

  private percentileOption(): { percentile?: number } {
    return this.o.percentile === undefined ? {} : { percentile: this.o.percentile };
  }

  private rangesOf(fold: Fold): Map<string, TensorRange> {
    let ranges = this.foldRanges.get(fold);
    if (!ranges) {
      ranges = this.o.stats.ranges(fold.calibration, this.o.method, this.percentileOption()).ranges;
      this.foldRanges.set(fold, ranges);
    }
    return ranges;
  }

  private async run(model: ModelProto, indices: readonly number[], level: 'all' | 'basic') {
    const session = await createSession(encodeModel(model), this.o.threads, level);
    try {
      return await runAll(
        session,
        indices.map((i) => this.o.samples[i]!),
        this.o.outputNames,
      );
    } finally {
      await session.release();
    }
  }

  private agreementOn(indices: readonly number[], outputs: ReadonlyArray<Record<string, OutputValues>>): Agreement {
    return compareOutputs(
      indices.map((i) => this.o.fp32[i]!),
      outputs,
    );
  }

  /** Out of sample: each fold's samples through a model calibrated on that fold's calibration samples (real int8 kernels). */
  async evaluate(kept: ReadonlySet<string>): Promise<Evaluation> {
    const indices: number[] = [];
    const outputs: Array<Record<string, OutputValues>> = [];
    const folds: FoldResult[] = [];
    const times: number[] = [];
    for (const fold of this.o.folds) {
      const run = await this.run(this.o.build(this.rangesOf(fold), kept).model, fold.evaluation, 'all');
      times.push(run.msPerSample);
      indices.push(...fold.evaluation);
      outputs.push(...run.outputs);
      folds.push({
        calibrationSamples: fold.calibration.length,
        evalSamples: fold.evaluation.length,
        value: this.agreementOn(fold.evaluation, run.outputs).value,
      });
    }
    times.sort((a, b) => a - b);
    return { agreement: this.agreementOn(indices, outputs), folds, msPerSample: times[Math.floor(times.length / 2)]! };
  }

  /**
   * On the search samples, calibrated on them: with `kept` in fp32, or with only `onlyInt8` in
   * int8. QDQ emulated in float ('basic' optimisation: cheaper to create, and the same ranking).
   */
  async measure(kept: ReadonlySet<string>, onlyInt8?: ReadonlySet<string>): Promise<Measurement> {
    const qdq = this.o.build(this.searchRanges, onlyInt8 ? this.allBut(onlyInt8) : kept);
    const run = await this.run(qdq.model, this.o.searchSamples, 'basic');
    const agreement = this.agreementOn(this.o.searchSamples, run.outputs);
    return { value: agreement.value, tieBreak: agreement.outputs[0]?.meanCosine ?? 0 };
  }

  private allBut(nodes: ReadonlySet<string>): Set<string> {
    return new Set((this.o.loaded.model.graph?.node ?? []).map((n) => n.name ?? '').filter((n) => !nodes.has(n)));
  }

  /** The model quantised with ranges from every search sample: what the archive ships. */
  final(kept: ReadonlySet<string>): QdqResult {
    return this.o.build(this.searchRanges, kept);
  }
}

/** Operators whose int8 kernels are where int8 gains its speed. */
const COMPUTE_OPS = new Set(['Conv', 'ConvTranspose', 'Gemm', 'MatMul']);

/**
 * Groups that quantise together: each quantised node with the Relu/Clip folded into it. Each
 * also says what reverting it reverts: the node, and the other quantised nodes that share an
 * activation tensor with it unless they are convolutions or matrix products. A tensor keeps
 * its Q/DQ pair while any node beside it is int8, so reverting a node alone would leave the
 * tensors whose quantisation hurt still quantised; the elementwise neighbours cost little
 * speed in fp32, the convolutions keep their int8 kernels.
 */
function quantizedGroups(
  model: ModelProto,
  qdq: QdqResult,
  skip: ReadonlySet<string>,
): Array<{ nodes: string[]; revert: string[] }> {
  const folded = new Map<string, string[]>();
  for (const [act, producer] of Object.entries(qdq.fusedInto))
    folded.set(producer, [...(folded.get(producer) ?? []), act]);
  const quantized = new Set(qdq.quantizedNodes);
  const nodes = model.graph?.node ?? [];
  const byName = new Map(nodes.map((n) => [n.name ?? '', n]));
  const touching = new Map<string, string[]>(); // tensor → quantised nodes (by group name) reading or writing it
  const groupOf = (name: string): string => qdq.fusedInto[name] ?? name;
  for (const node of nodes) {
    const name = node.name ?? '';
    if (!quantized.has(groupOf(name))) continue;
    for (const t of [...(node.input ?? []), ...(node.output ?? [])])
      if (t) touching.set(t, [...(touching.get(t) ?? []), groupOf(name)]);
  }
  const withFolded = (name: string): string[] => [name, ...(folded.get(name) ?? [])];
  return qdq.quantizedNodes
    .filter((n) => !skip.has(n))
    .map((name) => {
      const tensors = withFolded(name).flatMap((n) => [
        ...(byName.get(n)?.input ?? []),
        ...(byName.get(n)?.output ?? []),
      ]);
      const neighbours = new Set(
        tensors
          .flatMap((t) => touching.get(t) ?? [])
          .filter((n) => n !== name && !COMPUTE_OPS.has(byName.get(n)?.opType ?? '')),
      );
      return { nodes: withFolded(name), revert: [...withFolded(name), ...[...neighbours].flatMap(withFolded)] };
    });
}

/** Ranks the groups by measurement, then searches for the fp32 set; returns the set and the evaluation that verified it. */
async function fallBack(options: {
  measurer: Measurer;
  groups: Array<{ nodes: string[]; revert: string[] }>;
  defaults: ReadonlySet<string>;
  start: Measurement;
  minAgreement: number;
  maxFp32Share: number;
  maxSearchSteps: number;
  progress: (message: string) => void;
}): Promise<{ kept: Set<string>; autoKept: string[]; search: SearchReport; evaluation?: Evaluation }> {
  const { measurer, progress } = options;
  const rankStart = performance.now();
  const ranked = await rankBySensitivity({
    groups: options.groups,
    measureAloneInt8: (group) => measurer.measure(new Set(), new Set(group)),
    onProgress: (done, total) => {
      if (done % 20 === 0 || done === total) progress(`measured ${done} of ${total} groups alone in int8`);
    },
  });
  const rankMs = performance.now() - rankStart;
  const searchStart = performance.now();
  const withDefaults = (kept: readonly string[][]): Set<string> => new Set([...options.defaults, ...kept.flat()]);
  let evaluation: Evaluation | undefined;
  const result = await searchFp32Set({
    ranked,
    start: options.start,
    target: options.minAgreement,
    measure: (kept) => measurer.measure(withDefaults(kept)),
    verify: async (kept) => {
      evaluation = await measurer.evaluate(withDefaults(kept));
      return evaluation.agreement.value;
    },
    maxKept: Math.floor(options.groups.length * options.maxFp32Share),
    maxSteps: options.maxSearchSteps,
    onStep: (step) =>
      progress(
        `${step.isKept ? 'kept' : 'tried'} ${step.nodes.join('+')} in fp32: ${step.value.toFixed(4)}${step.verifiedValue === undefined ? '' : ` (out of sample ${step.verifiedValue.toFixed(4)})`}`,
      ),
  });
  const search: SearchReport = {
    ranked: ranked.slice(0, 20),
    rankedGroups: ranked.length,
    start: options.start.value,
    steps: result.steps,
    rankMs: Math.round(rankMs),
    searchMs: Math.round(performance.now() - searchStart),
  };
  const autoKept = [...new Set(result.kept.flat())];
  // Without a verified success, the last verification may be of another set: evaluate the one kept.
  if (!result.isTargetMet) evaluation = undefined;
  return { kept: withDefaults(result.kept), autoKept, search, evaluation };
}

function reducedRangeOf(options: QuantizeModelOptions): { isReducedRange: boolean; reducedRangeReason: string } {
  if (options.isReducedRange !== undefined)
    return { isReducedRange: options.isReducedRange, reducedRangeReason: 'chosen by the caller' };
  return hasVnni()
    ? { isReducedRange: false, reducedRangeReason: 'this CPU has VNNI: full 8-bit weights' }
    : {
        isReducedRange: true,
        reducedRangeReason:
          'this CPU has no VNNI (avx512_vnni/avx_vnni): 7-bit weights avoid u8s8 saturation, as onnxruntime advises',
      };
}

function round(x: number): number {
  return Math.round(x * 100) / 100;
}

function mean(values: readonly number[]): number {
  return values.reduce((a, b) => a + b, 0) / Math.max(1, values.length);
}

/**
 * Quantises an ONNX model to int8 QDQ and measures it honestly:
 * - calibration per tensor (`method` 'auto': min/max, percentile or entropy, whichever
 *   quantises that tensor's calibration values with the least squared error);
 * - agreement with fp32 by k-fold over `calibrationFeeds` (each sample evaluated once by a
 *   model calibrated on the others; worst fold and mean reported), or on `evalFeeds`;
 * - defaults: probability outputs stay fp32; the node feeding them and the first
 *   convolutions on raw inputs stay fp32 when that measurably helps;
 * - below `minAgreement`, a fall-back search: every quantised group is measured alone in
 *   int8, the worst are reverted to fp32 one by one (kept only when agreement rises), and
 *   the first set that meets the target out of sample is taken.
 * The shipped model is calibrated on every calibration sample. It does not refuse: the
 * caller decides what a report below target means.
 *
 * @throws MARINA_ERR_QUANTIZE_MODEL_INVALID, MARINA_ERR_QUANTIZE_OPTION_INVALID,
 *   MARINA_ERR_QUANTIZE_CALIBRATION_EMPTY.
 */
export async function quantizeModel(options: QuantizeModelOptions): Promise<QuantizeModelResult> {
  const started = performance.now();
  checkOptions(options);
  const method = options.method ?? 'auto';
  const threads = options.intraOpNumThreads ?? 1;
  const progress = options.onProgress ?? (() => undefined);
  const loaded = upgradeOpset9To10(await loadModel(options.modelPath), options.modelPath);
  checkExcludedNodes(loaded, options.excludedNodes ?? []);
  const { isReducedRange, reducedRangeReason } = reducedRangeOf(options);
  const calibrationCount = options.calibrationFeeds.length;
  const samples = [...options.calibrationFeeds, ...(options.evalFeeds ?? [])];
  const folds = options.evalFeeds
    ? heldOutFold({ calibration: calibrationCount, evaluation: options.evalFeeds.length })
    : createFolds({ samples: calibrationCount, folds: options.folds ?? DEFAULT_FOLDS });
  const searchSamples = Array.from({ length: calibrationCount }, (_, i) => i);
  progress(
    `calibrating on ${samples.length} samples (${method}); ${options.evalFeeds ? `evaluating on ${options.evalFeeds.length} held-out samples` : `${folds.length}-fold evaluation`}`,
  );
  const stats = await calibrate(loaded, samples, method, threads);
  const outputNames = options.outputNames ?? (loaded.model.graph?.output ?? []).map((o) => o.name ?? '');
  const fp32Session = await createSession(options.modelPath, threads, 'all');
  const fp32 = await runAll(fp32Session, samples, outputNames).finally(() => fp32Session.release());
  const manual = new Set(options.excludedNodes ?? []);
  const excludedOpTypes = new Set(options.excludedOpTypes ?? []);
  const weightCache = new Map<string, { q: Int8Array; scales: Float32Array }>();
  const measurer = new Measurer({
    loaded,
    build: (ranges, kept) =>
      quantizeToQdq(loaded.model, loaded.opset, {
        ranges,
        excludedNodes: new Set([...manual, ...kept]),
        excludedOpTypes,
        isReducedRange,
        weightCache,
      }),
    stats,
    samples,
    fp32: fp32.outputs,
    folds,
    searchSamples,
    outputNames,
    method,
    ...(options.percentile === undefined ? {} : { percentile: options.percentile }),
    threads,
  });
  const first = await measurer.evaluate(new Set());
  const minAgreement = options.minAgreement ?? DEFAULT_MIN_AGREEMENT[first.agreement.metric];
  progress(
    `all int8: ${first.agreement.metric} ${first.agreement.value.toFixed(4)} out of sample (target ${minAgreement})`,
  );
  const allInt8 = measurer.final(new Set());
  let kept = new Set<string>();
  let defaults: Awaited<ReturnType<typeof measuredDefaults>> = {
    kept: probabilityKept(loaded.model),
    tried: [],
    nodes: kept,
    measurement: { value: first.agreement.value, tieBreak: 0 },
  };
  let last = first;
  let autoKept: string[] = [];
  let search: SearchReport | undefined;
  // All int8 already meets the target: nothing more is kept in fp32 (each fp32 node costs speed).
  if (first.agreement.value < minAgreement && (options.isAutoFallback ?? true)) {
    defaults = await measuredDefaults({
      model: loaded.model,
      quantized: new Set(allInt8.quantizedNodes),
      start: await measurer.measure(new Set()),
      measure: (nodes) => measurer.measure(nodes),
    });
    kept = defaults.nodes;
    if (kept.size > 0) last = await measurer.evaluate(kept);
  }
  if (last.agreement.value < minAgreement && (options.isAutoFallback ?? true)) {
    const groups = quantizedGroups(loaded.model, allInt8, kept);
    progress(`below target: measuring ${groups.length} quantised groups alone in int8 to rank them`);
    const fallback = await fallBack({
      measurer,
      groups,
      defaults: kept,
      start: defaults.measurement,
      minAgreement,
      maxFp32Share: options.maxFp32Share ?? 0.5,
      maxSearchSteps: options.maxSearchSteps ?? DEFAULT_MAX_SEARCH_STEPS,
      progress,
    });
    ({ kept, autoKept, search } = fallback);
    last = fallback.evaluation ?? (autoKept.length > 0 ? await measurer.evaluate(kept) : last);
  }
  const current = measurer.final(kept);
  const report = buildReport({
    loaded,
    options,
    method,
    measurer,
    current,
    first,
    last,
    minAgreement,
    defaults,
    autoKept,
    search,
    fp32MsPerSample: fp32.msPerSample,
    isReducedRange,
    reducedRangeReason,
    started,
  });
  return { model: current.model, report };
}

function buildReport(o: {
  loaded: LoadedModel;
  options: QuantizeModelOptions;
  method: CalibrationChoice;
  measurer: Measurer;
  current: QdqResult;
  first: Evaluation;
  last: Evaluation;
  minAgreement: number;
  defaults: Awaited<ReturnType<typeof measuredDefaults>>;
  autoKept: string[];
  search: SearchReport | undefined;
  fp32MsPerSample: number;
  isReducedRange: boolean;
  reducedRangeReason: string;
  started: number;
}): QuantizationReport {
  const { loaded, options, current, last } = o;
  const nodes = loaded.model.graph?.node ?? [];
  const convolutions = new Set(
    nodes.filter((n) => n.opType === 'Conv' || n.opType === 'ConvTranspose').map((n) => n.name ?? ''),
  );
  const fp32Bytes = (loaded.model.graph?.initializer ?? []).reduce(
    (n, t) => n + (t.rawData?.length || (t.floatData?.length ?? 0) * 4),
    0,
  );
  const samples = options.calibrationFeeds.length + (options.evalFeeds?.length ?? 0);
  const evaluated = last.folds.reduce((n, f) => n + f.evalSamples, 0);
  const warnings =
    evaluated < MIN_SAMPLES_FOR_ESTIMATE
      ? [
          `only ${evaluated} sample(s) evaluated: the agreement estimate is weak; give at least ${MIN_SAMPLES_FOR_ESTIMATE} samples like your requests`,
        ]
      : [];
  const keptFp32: KeptFp32[] = [...o.defaults.kept];
  if (o.autoKept.length > 0)
    keptFp32.push({ nodes: o.autoKept, reason: 'the fall-back search: reverting them measurably raised agreement' });
  if (options.excludedNodes?.length)
    keptFp32.push({ nodes: [...options.excludedNodes], reason: 'requested (--exclude-nodes)' });
  return {
    precision: 'int8',
    format: 'QDQ',
    method: o.method,
    methodsChosen: o.measurer.methodsChosen,
    ...(o.method === 'percentile' || o.method === 'auto' ? { percentile: options.percentile ?? 99.999 } : {}),
    weights: `int8 symmetric per channel${loaded.opset < 13 ? ' (com.microsoft DequantizeLinear, opset < 13)' : ''}${o.isReducedRange ? ', 7-bit range' : ''}; biases int32`,
    activations: 'uint8 asymmetric per tensor',
    isReducedRange: o.isReducedRange,
    reducedRangeReason: o.reducedRangeReason,
    samples,
    evaluation: options.evalFeeds ? 'held-out' : 'k-fold',
    calibrationSamples: Math.min(...last.folds.map((f) => f.calibrationSamples)),
    evalSamples: evaluated,
    folds: last.folds,
    worstFold: Math.min(...last.folds.map((f) => f.value)),
    meanFold: mean(last.folds.map((f) => f.value)),
    warnings,
    minAgreement: o.minAgreement,
    isTargetMet: last.agreement.value >= o.minAgreement,
    agreement: last.agreement,
    initialAgreement: o.first.agreement,
    quantizedNodes: current.quantizedNodes.length,
    convolutions: { total: convolutions.size, int8: current.quantizedNodes.filter((n) => convolutions.has(n)).length },
    keptFp32,
    defaultsTried: o.defaults.tried,
    autoKeptFp32: o.autoKept,
    excludedNodes: [...(options.excludedNodes ?? [])],
    excludedOpTypes: [...(options.excludedOpTypes ?? [])],
    fp32Nodes: current.fp32Nodes,
    ...(o.search ? { search: o.search } : {}),
    msPerSample: { fp32: round(o.fp32MsPerSample), int8: round(last.msPerSample), allInt8: round(o.first.msPerSample) },
    modelBytes: { fp32: fp32Bytes, int8: encodeModel(current.model).length },
    quantizeMs: Math.round(performance.now() - o.started),
  };
}
