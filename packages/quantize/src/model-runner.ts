import * as ort from 'onnxruntime-node';
import type { OutputValues } from './compare-outputs.ts';
import { DataType, type ModelProto } from './onnx-model.ts';

/** One model run's inputs, as a handler feeds them to the session. */
export type Feeds = Record<string, ort.Tensor>;

/** A session on a model file or encoded bytes, `threads` intra-op threads, at optimisation `level`. */
export async function createSession(
  model: Uint8Array | string,
  threads: number,
  level: 'all' | 'basic',
): Promise<ort.InferenceSession> {
  const options = { intraOpNumThreads: threads, graphOptimizationLevel: level } as const;
  return typeof model === 'string'
    ? ort.InferenceSession.create(model, options)
    : ort.InferenceSession.create(model, options);
}

function toValues(tensor: ort.Tensor): OutputValues {
  const data =
    tensor.data instanceof Float32Array
      ? new Float32Array(tensor.data)
      : Float32Array.from(tensor.data as ArrayLike<number>, Number);
  return { dims: [...tensor.dims], data };
}

/** Runs every feed through `session` and keeps `names`; `msPerSample` is the median run time. */
export async function runAll(
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
export function withOutputs(model: ModelProto, names: readonly string[]): ModelProto {
  const existing = new Set((model.graph?.output ?? []).map((o) => o.name));
  const extra = names
    .filter((n) => !existing.has(n))
    .map((name) => ({ name, type: { tensorType: { elemType: DataType.FLOAT } } }));
  return { ...model, graph: { ...model.graph, output: [...(model.graph?.output ?? []), ...extra] } };
}
