import type { TensorRange } from './calibration.ts';
import {
  attributeFloat,
  attributeInt,
  DataType,
  floatTensor,
  floatValues,
  integerTensor,
  type ModelProto,
  type NodeProto,
  type TensorProto,
} from './onnx-model.ts';
import { inferTensorTypes } from './tensor-types.ts';

/** Operators the quantiser turns into integer kernels (QDQ around them); everything else stays fp32. */
export const QUANTIZABLE_OP_TYPES: readonly string[] = [
  'Conv',
  'ConvTranspose',
  'Gemm',
  'MatMul',
  'Add',
  'Mul',
  'Concat',
  'MaxPool',
  'AveragePool',
  'GlobalAveragePool',
  'GlobalMaxPool',
  'Resize',
  'Relu',
  'Clip',
];
/** Operators whose output keeps its input's scale and zero point (onnxruntime then runs them on uint8 directly). */
const SHARED_PARAM_OPS = new Set(['MaxPool', 'GlobalMaxPool', 'Resize']);
/** Producers into which a following Relu/Clip is folded (the uint8 range starting at 0 does the clipping). */
const FUSING_PRODUCERS = new Set(['Conv', 'ConvTranspose', 'Gemm', 'MatMul', 'Add']);

export interface QdqOptions {
  /** Calibrated ranges of the float activations, by tensor name. */
  ranges: ReadonlyMap<string, TensorRange>;
  /** Node names kept in fp32. */
  excludedNodes?: ReadonlySet<string>;
  /** Operator types kept in fp32. */
  excludedOpTypes?: ReadonlySet<string>;
  /** Weights on 7 bits ([-63, 63]) instead of 8: onnxruntime's advice for x86 CPUs without VNNI (saturation in u8s8 kernels). */
  isReducedRange?: boolean;
  /** Also quantise graph outputs produced by quantised nodes. Default false: outputs stay fp32, as users read them. */
  isGraphOutputQuantized?: boolean;
  /**
   * Quantised weights by initializer name, filled and reused across calls on one model (weights do not depend on
   * the activation ranges): a search that builds the model many times quantises each weight once.
   */
  weightCache?: Map<string, { q: Int8Array; scales: Float32Array }>;
}

export interface QdqResult {
  model: ModelProto;
  /** Nodes running on int8 (by name), in graph order. */
  quantizedNodes: string[];
  /** Relu/Clip nodes folded into the node before them. */
  fusedNodes: string[];
  /** Each folded Relu/Clip (by name) → the node it was folded into: the two revert to fp32 together. */
  fusedInto: Record<string, string>;
  /** Nodes of quantisable types left in fp32 (excluded, or an input without a float range), by name. */
  fp32Nodes: string[];
  /** Whether weights are quantised per output channel (always: before opset 13 through onnxruntime's com.microsoft DequantizeLinear, which has `axis`). */
  isPerChannel: boolean;
}

export interface QuantParams {
  scale: number;
  zeroPoint: number;
}

/** Rounds half to even, as QuantizeLinear does. */
export function roundHalfEven(x: number): number {
  const r = Math.round(x);
  return Math.abs(x % 1) === 0.5 && r % 2 !== 0 ? r - 1 : r;
}

/** uint8 asymmetric parameters for a range (widened to include 0, as ONNX requires 0 to be exact). */
export function activationParams(range: TensorRange): QuantParams {
  const min = Math.min(range.min, 0);
  const max = Math.max(range.max, 0);
  if (max === min) return { scale: 1, zeroPoint: 0 };
  const scale = Math.fround((max - min) / 255);
  const zeroPoint = Math.max(0, Math.min(255, roundHalfEven(-min / scale)));
  return { scale, zeroPoint };
}

/** Symmetric int8 weights, per channel along `axis` (or per tensor when `axis` is undefined). */
export function quantizeWeights(
  values: Float32Array,
  dims: readonly number[],
  axis: number | undefined,
  isReducedRange: boolean,
): { q: Int8Array; scales: Float32Array } {
  const qmax = isReducedRange ? 63 : 127;
  const channels = axis === undefined ? 1 : dims[axis]!;
  const inner = axis === undefined ? values.length : dims.slice(axis + 1).reduce((n, d) => n * d, 1);
  const absMax = new Float64Array(channels);
  const channelOf = (i: number): number => (axis === undefined ? 0 : Math.floor(i / inner) % channels);
  for (let i = 0; i < values.length; i++) {
    const c = channelOf(i);
    absMax[c] = Math.max(absMax[c]!, Math.abs(values[i]!));
  }
  const scales = new Float32Array(channels);
  for (let c = 0; c < channels; c++) scales[c] = absMax[c]! === 0 ? 1 : absMax[c]! / qmax;
  const q = new Int8Array(values.length);
  for (let i = 0; i < values.length; i++) {
    q[i] = Math.max(-qmax, Math.min(qmax, roundHalfEven(values[i]! / scales[channelOf(i)]!)));
  }
  return { q, scales };
}

function dimsOf(t: TensorProto): number[] {
  return (t.dims ?? []).map(Number);
}

/** Where a quantised node's inputs come from: activations to quantise, a weight, a bias, constants. */
interface NodeRoles {
  activations: string[];
  weight?: { name: string; axis: number | undefined };
  bias?: string;
  constants: string[];
}

/** What every step of the transform reads about the float graph. */
interface GraphFacts {
  model: ModelProto;
  opset: number;
  nodes: NodeProto[];
  initializers: Map<string, TensorProto>;
  graphOutputs: Set<string>;
  consumers: Map<string, NodeProto[]>;
  isFloatInitializer(name: string): boolean;
  hasRange(name: string): boolean;
  options: QdqOptions;
}

function graphFacts(model: ModelProto, opset: number, options: QdqOptions): GraphFacts {
  const graph = model.graph!;
  const nodes = graph.node ?? [];
  const types = inferTensorTypes(model);
  const initializers = new Map((graph.initializer ?? []).map((t) => [t.name ?? '', t]));
  const consumers = new Map<string, NodeProto[]>();
  for (const node of nodes)
    for (const input of node.input ?? []) if (input) consumers.set(input, [...(consumers.get(input) ?? []), node]);
  return {
    model,
    opset,
    nodes,
    initializers,
    graphOutputs: new Set((graph.output ?? []).map((o) => o.name ?? '')),
    consumers,
    isFloatInitializer: (name) =>
      initializers.has(name) && (initializers.get(name)!.dataType ?? DataType.FLOAT) === DataType.FLOAT,
    hasRange: (name) => types.get(name) === DataType.FLOAT && options.ranges.has(name),
    options,
  };
}

/** Roles of a Conv/ConvTranspose/Gemm/MatMul's inputs (weights per output channel), or undefined when it cannot run int8. */
function matrixRoles(facts: GraphFacts, node: NodeProto): NodeRoles | undefined {
  const op = node.opType ?? '';
  const inputs = node.input ?? [];
  const x = inputs[0] ?? '';
  const w = inputs[1] ?? '';
  if (!facts.hasRange(x)) return undefined;
  if (op === 'Conv' || op === 'ConvTranspose') {
    if (!facts.isFloatInitializer(w)) return undefined;
    const group = attributeInt(node, 'group', 1);
    const axis = op === 'Conv' ? 0 : group === 1 ? 1 : undefined;
    const b = inputs[2];
    const biasOk = b && facts.isFloatInitializer(b) && op === 'Conv';
    return { activations: [x], weight: { name: w, axis }, ...(biasOk ? { bias: b } : {}), constants: [] };
  }
  if (op === 'Gemm' && attributeInt(node, 'transA', 0) !== 0) return undefined;
  if (!facts.isFloatInitializer(w)) return facts.hasRange(w) ? { activations: [x, w], constants: [] } : undefined;
  const wDims = dimsOf(facts.initializers.get(w)!);
  if (op === 'MatMul')
    return { activations: [x], weight: { name: w, axis: wDims.length === 2 ? 1 : undefined }, constants: [] };
  const transB = attributeInt(node, 'transB', 0);
  const c = inputs[2];
  const unitScales = attributeFloat(node, 'alpha', 1) === 1 && attributeFloat(node, 'beta', 1) === 1;
  const biasOk =
    c &&
    facts.isFloatInitializer(c) &&
    unitScales &&
    dimsOf(facts.initializers.get(c)!).reduce((a, d) => a * d, 1) === wDims[transB ? 0 : 1];
  return { activations: [x], weight: { name: w, axis: transB ? 0 : 1 }, ...(biasOk ? { bias: c } : {}), constants: [] };
}

/** The inputs of a node that are float activations to quantise, and those that are weights; undefined when it stays fp32. */
function nodeRoles(facts: GraphFacts, node: NodeProto): NodeRoles | undefined {
  const op = node.opType ?? '';
  const inputs = node.input ?? [];
  switch (op) {
    case 'Conv':
    case 'ConvTranspose':
    case 'Gemm':
    case 'MatMul':
      return matrixRoles(facts, node);
    case 'Add':
    case 'Mul':
    case 'Concat': {
      const activations: string[] = [];
      const constants: string[] = [];
      for (const input of inputs) {
        if (facts.hasRange(input)) activations.push(input);
        else if (facts.isFloatInitializer(input)) constants.push(input);
        else return undefined;
      }
      return activations.length > 0 ? { activations, constants } : undefined;
    }
    case 'MaxPool':
    case 'AveragePool':
    case 'GlobalAveragePool':
    case 'GlobalMaxPool':
    case 'Resize':
    case 'Relu':
    case 'Clip':
      if ((op === 'MaxPool' && (node.output ?? []).length > 1) || !facts.hasRange(inputs[0] ?? '')) return undefined;
      return { activations: [inputs[0]!], constants: [] };
    default:
      return undefined;
  }
}

/** Which nodes run quantised, and the quantisable-type nodes that stay fp32. */
function chooseQuantizedNodes(facts: GraphFacts): { quantized: Map<NodeProto, NodeRoles>; fp32Nodes: string[] } {
  const excludedNodes = facts.options.excludedNodes ?? new Set<string>();
  const excludedOpTypes = facts.options.excludedOpTypes ?? new Set<string>();
  const quantized = new Map<NodeProto, NodeRoles>();
  const fp32Nodes: string[] = [];
  for (const node of facts.nodes) {
    const op = node.opType ?? '';
    if (!QUANTIZABLE_OP_TYPES.includes(op)) continue;
    const r = excludedNodes.has(node.name ?? '') || excludedOpTypes.has(op) ? undefined : nodeRoles(facts, node);
    const outputsOk = (node.output ?? []).slice(0, 1).every((o) => facts.hasRange(o));
    if (r && outputsOk) quantized.set(node, r);
    else fp32Nodes.push(node.name ?? '');
  }
  return { quantized, fp32Nodes };
}

/** Relu/Clip folded into a quantised producer whose only reader they are: the uint8 range starting at 0 clips. */
function fuseActivations(
  facts: GraphFacts,
  quantized: ReadonlyMap<NodeProto, NodeRoles>,
): { fused: Map<NodeProto, NodeProto>; renamed: Map<string, string> } {
  const fused = new Map<NodeProto, NodeProto>(); // activation → producer
  const renamed = new Map<string, string>(); // producer output → the activation's output
  for (const [node] of quantized) {
    if (!FUSING_PRODUCERS.has(node.opType ?? '')) continue;
    const out = node.output?.[0] ?? '';
    const readers = facts.consumers.get(out) ?? [];
    const act = readers[0];
    if (readers.length !== 1 || facts.graphOutputs.has(out) || !act || !quantized.has(act)) continue;
    if (act.opType === 'Clip') {
      const minName = act.input?.[1];
      const clipMin =
        facts.opset < 11
          ? attributeFloat(act, 'min', -Infinity)
          : minName
            ? facts.initializers.has(minName)
              ? floatValues(facts.initializers.get(minName)!)[0]!
              : NaN
            : -Infinity;
      if (!(clipMin <= 0)) continue;
    } else if (act.opType !== 'Relu') continue;
    const actOut = act.output?.[0] ?? '';
    if (!facts.hasRange(actOut)) continue;
    fused.set(act, node);
    renamed.set(out, actOut);
  }
  return { fused, renamed };
}

/** Quantisation parameters of every quantised activation, in graph order so shared-parameter outputs find their input's. */
function assignParams(
  facts: GraphFacts,
  quantized: ReadonlyMap<NodeProto, NodeRoles>,
  fused: ReadonlyMap<NodeProto, NodeProto>,
  renamed: ReadonlyMap<string, string>,
): Map<string, QuantParams> {
  const params = new Map<string, QuantParams>();
  const paramsFor = (name: string): QuantParams => {
    let p = params.get(name);
    if (!p) {
      p = activationParams(facts.options.ranges.get(name)!);
      params.set(name, p);
    }
    return p;
  };
  for (const node of facts.nodes) {
    const r = quantized.get(node);
    if (!r || fused.has(node)) continue;
    for (const a of r.activations) paramsFor(a);
    const out = node.output?.[0] ?? '';
    const finalOut = renamed.get(out) ?? out;
    if (facts.graphOutputs.has(finalOut) && !facts.options.isGraphOutputQuantized) continue;
    if (SHARED_PARAM_OPS.has(node.opType ?? '')) params.set(finalOut, paramsFor(r.activations[0]!));
    else paramsFor(finalOut);
  }
  return params;
}

/** Writes the QDQ graph: new initializers and nodes, in the float graph's order. */
class QdqWriter {
  readonly initializers: TensorProto[] = [];
  readonly nodes: NodeProto[] = [];
  private readonly weights = new Map<string, { name: string; scales: Float32Array; axis: number | undefined }>();
  /** Before opset 13 the standard DequantizeLinear has no `axis`; onnxruntime's com.microsoft one does. */
  private readonly axisDomain: string;

  constructor(
    private readonly facts: GraphFacts,
    private readonly params: ReadonlyMap<string, QuantParams>,
  ) {
    this.axisDomain = facts.opset >= 13 ? '' : 'com.microsoft';
  }

  static dequantized(name: string): string {
    return `${name}_DequantizeLinear_Output`;
  }

  /** The name a node reads `name` by: its dequantised copy where it is quantised (graph outputs keep their name). */
  readName(name: string): string {
    return this.params.has(name) && !this.facts.graphOutputs.has(name) ? QdqWriter.dequantized(name) : name;
  }

  /** A quantised graph output: its producer writes `<name>_fp32` and the DequantizeLinear writes the output itself. */
  producerOutput(name: string): string {
    return this.facts.graphOutputs.has(name) && this.params.has(name) ? `${name}_fp32` : name;
  }

  /** One QuantizeLinear → DequantizeLinear pair for an activation, shared by all its readers. */
  addQdq(name: string, source: string): void {
    const p = this.params.get(name)!;
    this.initializers.push(
      floatTensor(`${name}_scale`, [], Float32Array.of(p.scale)),
      integerTensor(`${name}_zero_point`, [], DataType.UINT8, Uint8Array.of(p.zeroPoint)),
    );
    this.nodes.push(
      {
        name: `${name}_QuantizeLinear`,
        opType: 'QuantizeLinear',
        domain: '',
        input: [source, `${name}_scale`, `${name}_zero_point`],
        output: [`${name}_QuantizeLinear_Output`],
      },
      {
        name: `${name}_DequantizeLinear`,
        opType: 'DequantizeLinear',
        domain: '',
        input: [`${name}_QuantizeLinear_Output`, `${name}_scale`, `${name}_zero_point`],
        output: [this.facts.graphOutputs.has(name) ? name : QdqWriter.dequantized(name)],
      },
    );
  }

  /**
   * A stored integer tensor `stored` with `<prefix>_scale` and `<prefix>_zero_point`, and the
   * DequantizeLinear `<prefix>_DequantizeLinear` writing `output` (per channel along `axis` when given).
   */
  private addDequantize(
    prefix: string,
    stored: TensorProto,
    scales: Float32Array,
    zeroPoint: TensorProto,
    output: string,
    axis: number | undefined,
  ): void {
    this.initializers.push(
      stored,
      floatTensor(`${prefix}_scale`, axis === undefined ? [] : [scales.length], scales),
      zeroPoint,
    );
    this.nodes.push({
      name: `${prefix}_DequantizeLinear`,
      opType: 'DequantizeLinear',
      domain: axis === undefined ? '' : this.axisDomain,
      input: [stored.name ?? '', `${prefix}_scale`, zeroPoint.name ?? ''],
      output: [output],
      attribute: axis === undefined ? [] : [{ name: 'axis', type: 2, i: axis }],
    });
  }

  /** int8 symmetric weights (once per initializer, shared by its readers); returns the dequantised name and scales. */
  weight(w: { name: string; axis: number | undefined }): {
    name: string;
    scales: Float32Array;
    axis: number | undefined;
  } {
    const cached = this.weights.get(w.name);
    if (cached) return cached;
    const tensor = this.facts.initializers.get(w.name)!;
    const dims = dimsOf(tensor);
    const cache = this.facts.options.weightCache;
    let quantized = cache?.get(w.name);
    if (!quantized) {
      quantized = quantizeWeights(floatValues(tensor), dims, w.axis, this.facts.options.isReducedRange ?? false);
      cache?.set(w.name, quantized);
    }
    const { q, scales } = quantized;
    const shape = w.axis === undefined ? [] : [scales.length];
    this.addDequantize(
      w.name,
      integerTensor(`${w.name}_quantized`, dims, DataType.INT8, q),
      scales,
      integerTensor(`${w.name}_zero_point`, shape, DataType.INT8, new Int8Array(scales.length)),
      QdqWriter.dequantized(w.name),
      w.axis,
    );
    const entry = { name: QdqWriter.dequantized(w.name), scales, axis: w.axis };
    this.weights.set(w.name, entry);
    return entry;
  }

  /** int32 bias with scale input_scale × weight_scale; returns the dequantised name. */
  bias(
    biasName: string,
    nodeName: string,
    inputScale: number,
    weight: { scales: Float32Array; axis: number | undefined },
  ): string {
    const values = floatValues(this.facts.initializers.get(biasName)!);
    const perChannel = weight.axis !== undefined && weight.scales.length === values.length;
    const scales = Float32Array.from(perChannel ? weight.scales : [weight.scales[0]!], (s) => inputScale * s);
    const q = Int32Array.from(values, (v, i) => roundHalfEven(v / scales[perChannel ? i : 0]!));
    const bName = `${biasName}_${nodeName}_quantized`;
    const axis = perChannel ? 0 : undefined;
    this.addDequantize(
      bName,
      integerTensor(bName, dimsOf(this.facts.initializers.get(biasName)!), DataType.INT32, q),
      scales,
      integerTensor(
        `${bName}_zero_point`,
        perChannel ? [scales.length] : [],
        DataType.INT32,
        new Int32Array(scales.length),
      ),
      `${bName}_dequantized`,
      axis,
    );
    return `${bName}_dequantized`;
  }

  /** A float constant input of Add/Mul/Concat as uint8 over its own range; returns the dequantised name. */
  constant(c: string, nodeName: string): string {
    const tensor = this.facts.initializers.get(c)!;
    const values = floatValues(tensor);
    let min = 0;
    let max = 0;
    for (const v of values) {
      min = Math.min(min, v);
      max = Math.max(max, v);
    }
    const p = activationParams({ min, max });
    const q = Uint8Array.from(values, (v) => Math.max(0, Math.min(255, roundHalfEven(v / p.scale) + p.zeroPoint)));
    const cName = `${c}_${nodeName}_quantized`;
    this.addDequantize(
      cName,
      integerTensor(cName, dimsOf(tensor), DataType.UINT8, q),
      Float32Array.of(p.scale),
      integerTensor(`${cName}_zero_point`, [], DataType.UINT8, Uint8Array.of(p.zeroPoint)),
      `${cName}_dequantized`,
      undefined,
    );
    return `${cName}_dequantized`;
  }
}

/** The copy of one float node, reading dequantised inputs and, when quantised, int8 weights, int32 bias and uint8 constants. */
function writeNode(
  writer: QdqWriter,
  node: NodeProto,
  r: NodeRoles | undefined,
  renamed: ReadonlyMap<string, string>,
  params: ReadonlyMap<string, QuantParams>,
): NodeProto {
  const copy: NodeProto = {
    ...node,
    input: (node.input ?? []).map((i) => writer.readName(i)),
    output: (node.output ?? []).map((o) => writer.producerOutput(renamed.get(o) ?? o)),
  };
  if (!r) return copy;
  if (r.weight) {
    const weight = writer.weight(r.weight);
    copy.input![1] = weight.name;
    if (r.bias) copy.input![2] = writer.bias(r.bias, node.name ?? '', params.get(r.activations[0]!)!.scale, weight);
  }
  for (const c of r.constants) {
    const name = writer.constant(c, node.name ?? '');
    copy.input = copy.input!.map((i) => (i === c ? name : i));
  }
  return copy;
}

/**
 * Rewrites a float model into onnxruntime's QDQ form: each quantised activation gets one
 * QuantizeLinear → DequantizeLinear pair (uint8, asymmetric) that all its readers share;
 * Conv/ConvTranspose/Gemm/MatMul weights become int8 (symmetric, per channel; before opset 13
 * through onnxruntime's com.microsoft DequantizeLinear, which has `axis`) with a
 * DequantizeLinear; their biases become int32 with scale input_scale × weight_scale.
 * The input model is not modified.
 */
export function quantizeToQdq(model: ModelProto, opset: number, options: QdqOptions): QdqResult {
  const facts = graphFacts(model, opset, options);
  const { quantized, fp32Nodes } = chooseQuantizedNodes(facts);
  const { fused, renamed } = fuseActivations(facts, quantized);
  const params = assignParams(facts, quantized, fused, renamed);
  const writer = new QdqWriter(facts, params);
  const graph = model.graph!;
  for (const input of graph.input ?? [])
    if (input.name && params.has(input.name)) writer.addQdq(input.name, input.name);
  for (const node of facts.nodes) {
    if (fused.has(node)) continue;
    writer.nodes.push(writeNode(writer, node, quantized.get(node), renamed, params));
    for (const o of node.output ?? []) {
      const finalOut = renamed.get(o) ?? o;
      if (params.has(finalOut)) writer.addQdq(finalOut, writer.producerOutput(finalOut));
    }
  }
  const used = new Set(writer.nodes.flatMap((n) => n.input ?? []));
  const keptInitializers = (graph.initializer ?? []).filter((t) => used.has(t.name ?? ''));
  const opsetImport = [...(model.opsetImport ?? [])];
  if (writer.nodes.some((n) => n.domain === 'com.microsoft') && !opsetImport.some((o) => o.domain === 'com.microsoft'))
    opsetImport.push({ domain: 'com.microsoft', version: 1 });
  const newModel: ModelProto = {
    ...model,
    opsetImport,
    graph: {
      ...graph,
      node: writer.nodes,
      initializer: [...keptInitializers, ...writer.initializers],
      // Shapes recorded for the fp32 tensors may no longer be right for renamed ones; the runtime infers them again.
      valueInfo: [],
    },
  };
  return {
    model: newModel,
    quantizedNodes: facts.nodes.filter((n) => quantized.has(n) && !fused.has(n)).map((n) => n.name ?? ''),
    fusedNodes: [...fused.keys()].map((n) => n.name ?? ''),
    fusedInto: Object.fromEntries([...fused].map(([act, producer]) => [act.name ?? '', producer.name ?? ''])),
    fp32Nodes,
    isPerChannel: true,
  };
}
