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
}

export interface QdqResult {
  model: ModelProto;
  /** Nodes running on int8 (by name), in graph order. */
  quantizedNodes: string[];
  /** Relu/Clip nodes folded into the node before them. */
  fusedNodes: string[];
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

/**
 * Rewrites a float model into onnxruntime's QDQ form: each quantised activation gets one
 * QuantizeLinear → DequantizeLinear pair (uint8, asymmetric) that all its readers share;
 * Conv/ConvTranspose/Gemm/MatMul weights become int8 (symmetric, per channel from opset 13)
 * with a DequantizeLinear; their biases become int32 with scale input_scale × weight_scale.
 * The input model is not modified.
 */
export function quantizeToQdq(model: ModelProto, opset: number, options: QdqOptions): QdqResult {
  const graph = model.graph!;
  const nodes = graph.node ?? [];
  const excludedNodes = options.excludedNodes ?? new Set<string>();
  const excludedOpTypes = options.excludedOpTypes ?? new Set<string>();
  const isReducedRange = options.isReducedRange ?? false;
  const isPerChannel = true;
  // Before opset 13 the standard DequantizeLinear has no `axis`; onnxruntime's com.microsoft one does.
  const axisDomain = opset >= 13 ? '' : 'com.microsoft';
  const types = inferTensorTypes(model);
  const initializers = new Map((graph.initializer ?? []).map((t) => [t.name ?? '', t]));
  const graphOutputs = new Set((graph.output ?? []).map((o) => o.name ?? ''));
  const consumers = new Map<string, NodeProto[]>();
  for (const node of nodes)
    for (const input of node.input ?? []) if (input) consumers.set(input, [...(consumers.get(input) ?? []), node]);
  const isFloat = (name: string): boolean => types.get(name) === DataType.FLOAT;
  const isFloatInitializer = (name: string): boolean =>
    initializers.has(name) && (initializers.get(name)!.dataType ?? DataType.FLOAT) === DataType.FLOAT;
  const hasRange = (name: string): boolean => isFloat(name) && options.ranges.has(name);

  /** The inputs of a node that are float activations to quantise, and those that are weights. */
  const roles = (
    node: NodeProto,
  ):
    | { activations: string[]; weight?: { name: string; axis: number | undefined }; bias?: string; constants: string[] }
    | undefined => {
    const op = node.opType ?? '';
    const inputs = node.input ?? [];
    const x = inputs[0] ?? '';
    switch (op) {
      case 'Conv':
      case 'ConvTranspose': {
        const w = inputs[1] ?? '';
        if (!hasRange(x) || !isFloatInitializer(w)) return undefined;
        const group = attributeInt(node, 'group', 1);
        const axis = !isPerChannel ? undefined : op === 'Conv' ? 0 : group === 1 ? 1 : undefined;
        const b = inputs[2];
        const biasOk = b && isFloatInitializer(b) && op === 'Conv';
        return { activations: [x], weight: { name: w, axis }, ...(biasOk ? { bias: b } : {}), constants: [] };
      }
      case 'Gemm': {
        const w = inputs[1] ?? '';
        if (!hasRange(x) || attributeInt(node, 'transA', 0) !== 0) return undefined;
        const c = inputs[2];
        const unitScales = attributeFloat(node, 'alpha', 1) === 1 && attributeFloat(node, 'beta', 1) === 1;
        if (isFloatInitializer(w)) {
          const transB = attributeInt(node, 'transB', 0);
          const wDims = dimsOf(initializers.get(w)!);
          const n = wDims[transB ? 0 : 1];
          const biasOk =
            c && isFloatInitializer(c) && unitScales && dimsOf(initializers.get(c)!).reduce((a, d) => a * d, 1) === n;
          return {
            activations: [x],
            weight: { name: w, axis: isPerChannel ? (transB ? 0 : 1) : undefined },
            ...(biasOk ? { bias: c } : {}),
            constants: [],
          };
        }
        if (!hasRange(w)) return undefined;
        return { activations: [x, w], constants: [] };
      }
      case 'MatMul': {
        const w = inputs[1] ?? '';
        if (!hasRange(x)) return undefined;
        if (isFloatInitializer(w)) {
          const rank = dimsOf(initializers.get(w)!).length;
          return {
            activations: [x],
            weight: { name: w, axis: isPerChannel && rank === 2 ? 1 : undefined },
            constants: [],
          };
        }
        if (!hasRange(w)) return undefined;
        return { activations: [x, w], constants: [] };
      }
      case 'Add':
      case 'Mul':
      case 'Concat': {
        const activations: string[] = [];
        const constants: string[] = [];
        for (const input of inputs) {
          if (hasRange(input)) activations.push(input);
          else if (isFloatInitializer(input)) constants.push(input);
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
        if ((op === 'MaxPool' && (node.output ?? []).length > 1) || !hasRange(x)) return undefined;
        return { activations: [x], constants: [] };
      default:
        return undefined;
    }
  };

  // Which nodes run quantised.
  const quantized = new Map<NodeProto, NonNullable<ReturnType<typeof roles>>>();
  const fp32Nodes: string[] = [];
  for (const node of nodes) {
    const op = node.opType ?? '';
    if (!QUANTIZABLE_OP_TYPES.includes(op)) continue;
    const r = excludedNodes.has(node.name ?? '') || excludedOpTypes.has(op) ? undefined : roles(node);
    const outputsOk = (node.output ?? []).slice(0, 1).every((o) => hasRange(o));
    if (r && outputsOk) quantized.set(node, r);
    else fp32Nodes.push(node.name ?? '');
  }

  // Relu/Clip folded into a quantised producer whose only reader they are.
  const fused = new Set<NodeProto>();
  const renamed = new Map<string, string>(); // producer output → the activation's output
  for (const [node] of quantized) {
    if (!FUSING_PRODUCERS.has(node.opType ?? '')) continue;
    const out = node.output?.[0] ?? '';
    const readers = consumers.get(out) ?? [];
    const act = readers[0];
    if (readers.length !== 1 || graphOutputs.has(out) || !act || !quantized.has(act)) continue;
    if (act.opType === 'Clip') {
      const minName = act.input?.[1];
      const clipMin =
        opset < 11
          ? attributeFloat(act, 'min', -Infinity)
          : minName
            ? initializers.has(minName)
              ? floatValues(initializers.get(minName)!)[0]!
              : NaN
            : -Infinity;
      if (!(clipMin <= 0)) continue;
    } else if (act.opType !== 'Relu') continue;
    const actOut = act.output?.[0] ?? '';
    if (!hasRange(actOut)) continue;
    fused.add(act);
    renamed.set(out, actOut);
  }

  // Quantisation parameters of every quantised activation, in graph order so shared-parameter outputs find their input's.
  const params = new Map<string, QuantParams>();
  const paramsFor = (name: string): QuantParams => {
    let p = params.get(name);
    if (!p) {
      p = activationParams(options.ranges.get(name)!);
      params.set(name, p);
    }
    return p;
  };
  for (const node of nodes) {
    const r = quantized.get(node);
    if (!r || fused.has(node)) continue;
    for (const a of r.activations) paramsFor(a);
    const out = node.output?.[0] ?? '';
    const finalOut = renamed.get(out) ?? out;
    if (graphOutputs.has(finalOut) && !options.isGraphOutputQuantized) continue;
    if (SHARED_PARAM_OPS.has(node.opType ?? '')) params.set(finalOut, paramsFor(r.activations[0]!));
    else paramsFor(finalOut);
  }

  // Build the new graph.
  const newInitializers: TensorProto[] = [];
  const newNodes: NodeProto[] = [];
  const dequantized = (name: string): string => `${name}_DequantizeLinear_Output`;
  const addQdq = (name: string, source: string): void => {
    const p = params.get(name)!;
    newInitializers.push(
      floatTensor(`${name}_scale`, [], Float32Array.of(p.scale)),
      integerTensor(`${name}_zero_point`, [], DataType.UINT8, Uint8Array.of(p.zeroPoint)),
    );
    newNodes.push(
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
        output: [graphOutputs.has(name) ? name : dequantized(name)],
      },
    );
  };
  // A quantised graph output: its producer writes `<name>_fp32` and the DequantizeLinear writes the output itself.
  const producerOutput = (name: string): string => (graphOutputs.has(name) && params.has(name) ? `${name}_fp32` : name);
  const readName = (name: string): string => (params.has(name) && !graphOutputs.has(name) ? dequantized(name) : name);

  for (const input of graph.input ?? []) if (input.name && params.has(input.name)) addQdq(input.name, input.name);
  const weightCache = new Map<string, { name: string; scales: Float32Array; axis: number | undefined }>();
  for (const node of nodes) {
    if (fused.has(node)) continue;
    const r = quantized.get(node);
    const copy: NodeProto = {
      ...node,
      input: [...(node.input ?? [])],
      output: (node.output ?? []).map((o) => producerOutput(renamed.get(o) ?? o)),
    };
    copy.input = copy.input!.map((i) => readName(i));
    if (r) {
      if (r.weight) {
        const w = r.weight;
        let cached = weightCache.get(w.name);
        if (!cached) {
          const tensor = initializers.get(w.name)!;
          const dims = dimsOf(tensor);
          const { q, scales } = quantizeWeights(floatValues(tensor), dims, w.axis, isReducedRange);
          const qName = `${w.name}_quantized`;
          newInitializers.push(
            integerTensor(qName, dims, DataType.INT8, q),
            floatTensor(`${w.name}_scale`, w.axis === undefined ? [] : [scales.length], scales),
            integerTensor(
              `${w.name}_zero_point`,
              w.axis === undefined ? [] : [scales.length],
              DataType.INT8,
              new Int8Array(scales.length),
            ),
          );
          newNodes.push({
            name: `${w.name}_DequantizeLinear`,
            opType: 'DequantizeLinear',
            domain: w.axis === undefined ? '' : axisDomain,
            input: [qName, `${w.name}_scale`, `${w.name}_zero_point`],
            output: [dequantized(w.name)],
            attribute: w.axis === undefined ? [] : [{ name: 'axis', type: 2, i: w.axis }],
          });
          cached = { name: dequantized(w.name), scales, axis: w.axis };
          weightCache.set(w.name, cached);
        }
        copy.input![1] = cached.name;
        if (r.bias) {
          const bias = initializers.get(r.bias)!;
          const values = floatValues(bias);
          const inputScale = params.get(r.activations[0]!)!.scale;
          const perChannel = cached.axis !== undefined && cached.scales.length === values.length;
          const scales = Float32Array.from(perChannel ? cached.scales : [cached.scales[0]!], (s) => inputScale * s);
          const q = Int32Array.from(values, (v, i) => roundHalfEven(v / scales[perChannel ? i : 0]!));
          const bName = `${r.bias}_${node.name}_quantized`;
          newInitializers.push(
            integerTensor(bName, dimsOf(bias), DataType.INT32, q),
            floatTensor(`${bName}_scale`, perChannel ? [scales.length] : [], scales),
            integerTensor(
              `${bName}_zero_point`,
              perChannel ? [scales.length] : [],
              DataType.INT32,
              new Int32Array(scales.length),
            ),
          );
          newNodes.push({
            name: `${bName}_DequantizeLinear`,
            opType: 'DequantizeLinear',
            domain: perChannel ? axisDomain : '',
            input: [bName, `${bName}_scale`, `${bName}_zero_point`],
            output: [`${bName}_dequantized`],
            attribute: perChannel ? [{ name: 'axis', type: 2, i: 0 }] : [],
          });
          copy.input![2] = `${bName}_dequantized`;
        }
      }
      for (const c of r.constants) {
        const values = floatValues(initializers.get(c)!);
        let min = 0;
        let max = 0;
        for (const v of values) {
          min = Math.min(min, v);
          max = Math.max(max, v);
        }
        const p = activationParams({ min, max });
        const q = Uint8Array.from(values, (v) => Math.max(0, Math.min(255, roundHalfEven(v / p.scale) + p.zeroPoint)));
        const cName = `${c}_${node.name}_quantized`;
        newInitializers.push(
          integerTensor(cName, dimsOf(initializers.get(c)!), DataType.UINT8, q),
          floatTensor(`${cName}_scale`, [], Float32Array.of(p.scale)),
          integerTensor(`${cName}_zero_point`, [], DataType.UINT8, Uint8Array.of(p.zeroPoint)),
        );
        newNodes.push({
          name: `${cName}_DequantizeLinear`,
          opType: 'DequantizeLinear',
          domain: '',
          input: [cName, `${cName}_scale`, `${cName}_zero_point`],
          output: [`${cName}_dequantized`],
        });
        copy.input = copy.input!.map((i) => (i === c ? `${cName}_dequantized` : i));
      }
    }
    newNodes.push(copy);
    for (const o of node.output ?? []) {
      const finalOut = renamed.get(o) ?? o;
      if (params.has(finalOut)) addQdq(finalOut, producerOutput(finalOut));
    }
  }

  const used = new Set(newNodes.flatMap((n) => n.input ?? []));
  const keptInitializers = (graph.initializer ?? []).filter((t) => used.has(t.name ?? ''));
  const usesMsDomain = newNodes.some((n) => n.domain === 'com.microsoft');
  const opsetImport = [...(model.opsetImport ?? [])];
  if (usesMsDomain && !opsetImport.some((o) => o.domain === 'com.microsoft'))
    opsetImport.push({ domain: 'com.microsoft', version: 1 });
  const newModel: ModelProto = {
    ...model,
    opsetImport,
    graph: {
      ...graph,
      node: newNodes,
      initializer: [...keptInitializers, ...newInitializers],
      // Shapes recorded for the fp32 tensors may no longer be right for renamed ones; the runtime infers them again.
      valueInfo: [],
    },
  };
  return {
    model: newModel,
    quantizedNodes: nodes.filter((n) => quantized.has(n) && !fused.has(n)).map((n) => n.name ?? ''),
    fusedNodes: [...fused].map((n) => n.name ?? ''),
    fp32Nodes,
    isPerChannel,
  };
}
