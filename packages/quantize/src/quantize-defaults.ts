import type { ModelProto } from './onnx-model.ts';
import type { Measurement } from './sensitivity.ts';

/** Nodes left in fp32, and why; `measured` holds the search samples' agreement without and with them in fp32. */
export interface KeptFp32 {
  nodes: string[];
  reason: string;
  measured?: { int8: number; fp32: number };
}

/** A default fp32 candidate as measured on the search samples: agreement with it in int8 and in fp32. */
export interface DefaultTried {
  nodes: string[];
  reason: string;
  int8: number;
  fp32: number;
  isKept: boolean;
}

/** Nodes that only move or reshape data: a probability output may pass through them. */
const SHAPE_ONLY = new Set(['Reshape', 'Transpose', 'Squeeze', 'Unsqueeze', 'Flatten', 'Identity']);
const PROBABILITY_OPS = new Set(['Sigmoid', 'Softmax', 'LogSoftmax']);

/** The Sigmoid/Softmax nodes whose output is a graph output (directly or through shape-only nodes), with the node feeding each. */
export function probabilityOutputs(model: ModelProto): Array<{ node: string; opType: string; feeder?: string }> {
  const nodes = model.graph?.node ?? [];
  const producer = new Map(nodes.flatMap((n) => (n.output ?? []).map((o) => [o, n] as const)));
  const found: Array<{ node: string; opType: string; feeder?: string }> = [];
  for (const output of model.graph?.output ?? []) {
    let node = producer.get(output.name ?? '');
    while (node && SHAPE_ONLY.has(node.opType ?? '')) node = producer.get(node.input?.[0] ?? '');
    if (!node || !PROBABILITY_OPS.has(node.opType ?? '')) continue;
    const feeder = producer.get(node.input?.[0] ?? '')?.name;
    found.push({ node: node.name ?? '', opType: node.opType ?? '', ...(feeder ? { feeder } : {}) });
  }
  return found;
}

/** The probability outputs, as kept in fp32 (they are never quantised: Sigmoid/Softmax are not int8 operators here). */
export function probabilityKept(model: ModelProto): KeptFp32[] {
  return probabilityOutputs(model).map((p) => ({
    nodes: [p.node],
    reason: `${p.opType} producing a probability output: fp32, reading a dequantised input`,
  }));
}

/** Convolutions reading a graph input directly: they see the raw input's whole range. */
export function firstConvolutions(model: ModelProto): string[] {
  const inputs = new Set((model.graph?.input ?? []).map((i) => i.name ?? ''));
  return (model.graph?.node ?? [])
    .filter((n) => (n.opType === 'Conv' || n.opType === 'ConvTranspose') && inputs.has(n.input?.[0] ?? ''))
    .map((n) => n.name ?? '');
}

/** A measurement better than `base` by more than noise: a higher headline, or the same headline and a higher cosine by 1e-4. */
export function isMeasurablyBetter(candidate: Measurement, base: Measurement): boolean {
  return candidate.value > base.value || (candidate.value === base.value && candidate.tieBreak > base.tieBreak + 1e-4);
}

/**
 * The defaults that keep nodes in fp32 when all int8 misses the target: probability outputs
 * (Sigmoid/Softmax) always stay fp32 and read a dequantised input; the node feeding them and
 * the first convolutions on raw inputs are kept in fp32 only when that measurably helps on the
 * search samples (measured one after the other, each on top of what was kept before).
 */
export async function measuredDefaults(options: {
  model: ModelProto;
  quantized: ReadonlySet<string>;
  start: Measurement;
  measure: (kept: ReadonlySet<string>) => Promise<Measurement>;
}): Promise<{ kept: KeptFp32[]; tried: DefaultTried[]; nodes: Set<string>; measurement: Measurement }> {
  const kept: KeptFp32[] = [];
  const tried: DefaultTried[] = [];
  const nodes = new Set<string>();
  let current = options.start;
  const probabilities = probabilityOutputs(options.model);
  kept.push(...probabilityKept(options.model));
  const candidates: Array<{ nodes: string[]; reason: string }> = [];
  const feeders = probabilities.flatMap((p) => (p.feeder && options.quantized.has(p.feeder) ? [p.feeder] : []));
  if (feeders.length > 0) candidates.push({ nodes: feeders, reason: 'feeds a probability output' });
  const first = firstConvolutions(options.model).filter((n) => options.quantized.has(n));
  if (first.length > 0) candidates.push({ nodes: first, reason: 'first convolution on the raw input' });
  for (const candidate of candidates) {
    const measurement = await options.measure(new Set([...nodes, ...candidate.nodes]));
    const isKept = isMeasurablyBetter(measurement, current);
    tried.push({ ...candidate, int8: current.value, fp32: measurement.value, isKept });
    if (!isKept) continue;
    for (const n of candidate.nodes) nodes.add(n);
    kept.push({
      nodes: candidate.nodes,
      reason: `${candidate.reason}: fp32 measurably helped`,
      measured: { int8: current.value, fp32: measurement.value },
    });
    current = measurement;
  }
  return { kept, tried, nodes, measurement: current };
}
