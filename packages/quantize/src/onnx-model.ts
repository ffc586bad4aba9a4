import { readFile, writeFile } from 'node:fs/promises';
import { dirname } from 'node:path';
import onnxProto from 'onnx-proto';
import { createError } from './errors.ts';

const { onnx } = onnxProto;

export type ModelProto = onnxProto.onnx.IModelProto;
export type NodeProto = onnxProto.onnx.INodeProto;
export type TensorProto = onnxProto.onnx.ITensorProto;

/** TensorProto.DataType values used here. */
export const DataType = { FLOAT: 1, UINT8: 2, INT8: 3, INT32: 6, INT64: 7, BOOL: 9, FLOAT16: 10, DOUBLE: 11 } as const;

/** ONNX models over this size are written with their weights in a `.data` file (protobuf's 2 GiB limit). */
const INLINE_LIMIT_BYTES = 1.5 * 2 ** 30;

/** A decoded model whose initializers all carry their bytes inline (external data already read in). */
export interface LoadedModel {
  model: ModelProto;
  /** The default-domain opset the model imports. */
  opset: number;
}

function rawBytes(tensor: TensorProto): Uint8Array | undefined {
  return tensor.rawData && tensor.rawData.length > 0 ? tensor.rawData : undefined;
}

/**
 * Reads an ONNX model, pulling external-data initializers into memory (paths resolved
 * beside the model), and names every unnamed node `<opType>_<index>` so nodes can be
 * addressed by name (`--exclude-nodes`, the report).
 *
 * @throws MARINA_ERR_QUANTIZE_MODEL_INVALID when the file is not ONNX, its opset is below 9,
 *   or an external data file is missing.
 */
export async function loadModel(modelPath: string): Promise<LoadedModel> {
  let model: ModelProto;
  try {
    model = onnx.ModelProto.decode(await readFile(modelPath));
  } catch (error) {
    throw createError.MARINA_ERR_QUANTIZE_MODEL_INVALID(
      `could not read '${modelPath}' as an ONNX model: ${(error as Error).message}`,
      { cause: error },
    );
  }
  const graph = model.graph;
  if (!graph) throw createError.MARINA_ERR_QUANTIZE_MODEL_INVALID(`'${modelPath}' has no graph`);
  const opset = Number(
    (model.opsetImport ?? []).find((o) => (o.domain ?? '') === '' || o.domain === 'ai.onnx')?.version ?? 0,
  );
  if (opset < 9) {
    throw createError.MARINA_ERR_QUANTIZE_MODEL_INVALID(
      `'${modelPath}' imports opset ${opset}; int8 QDQ needs opset 9 or later (opset 9 models are moved to opset 10, which has QuantizeLinear/DequantizeLinear); convert the model to a newer opset first`,
    );
  }
  const files = new Map<string, Buffer>();
  for (const tensor of graph.initializer ?? []) {
    if (tensor.dataLocation !== onnx.TensorProto.DataLocation.EXTERNAL) continue;
    const entries = new Map((tensor.externalData ?? []).map((e) => [e.key ?? '', e.value ?? '']));
    const location = entries.get('location');
    if (!location || location.includes('..') || location.startsWith('/')) {
      throw createError.MARINA_ERR_QUANTIZE_MODEL_INVALID(
        `initializer '${tensor.name}' of '${modelPath}' has external data at '${location}', which is not a file beside the model`,
      );
    }
    let file = files.get(location);
    if (!file) {
      try {
        file = await readFile(`${dirname(modelPath)}/${location}`);
      } catch (error) {
        throw createError.MARINA_ERR_QUANTIZE_MODEL_INVALID(
          `initializer '${tensor.name}' of '${modelPath}' keeps its weights in '${location}', which could not be read: ${(error as Error).message}; keep the data file beside the model`,
          { cause: error },
        );
      }
      files.set(location, file);
    }
    const offset = Number(entries.get('offset') ?? 0);
    const length = entries.has('length') ? Number(entries.get('length')) : file.length - offset;
    tensor.rawData = file.subarray(offset, offset + length);
    tensor.dataLocation = onnx.TensorProto.DataLocation.DEFAULT;
    tensor.externalData = [];
  }
  // Weights held in Constant nodes (as Paddle2ONNX and some exporters write them) become initializers, so they can be quantised.
  const constants = (graph.node ?? []).filter(
    (n) =>
      n.opType === 'Constant' &&
      (n.domain ?? '') === '' &&
      n.output?.length === 1 &&
      (n.attribute ?? []).length === 1 &&
      n.attribute![0]!.name === 'value' &&
      n.attribute![0]!.t,
  );
  if (constants.length > 0) {
    const moved = new Set(constants);
    graph.initializer = [
      ...(graph.initializer ?? []),
      ...constants.map((n) => ({ ...n.attribute![0]!.t!, name: n.output![0]! })),
    ];
    graph.node = (graph.node ?? []).filter((n) => !moved.has(n));
  }
  (graph.node ?? []).forEach((node, i) => {
    if (!node.name) node.name = `${node.opType}_${i}`;
  });
  return { model, opset: Number(opset) };
}

/**
 * Writes a model. Models whose initializers pass 1.5 GiB keep their large tensors in
 * `<path>.data` (page-aligned), as onnxruntime can load them; smaller ones are one file.
 */
export async function saveModel(model: ModelProto, outputPath: string): Promise<{ bytes: number; dataPath?: string }> {
  const initializers = model.graph?.initializer ?? [];
  const total = initializers.reduce((n, t) => n + (rawBytes(t)?.length ?? 0), 0);
  if (total < INLINE_LIMIT_BYTES) {
    const bytes = onnx.ModelProto.encode(model).finish();
    await writeFile(outputPath, bytes);
    return { bytes: bytes.length };
  }
  const dataPath = `${outputPath}.data`;
  const location = dataPath.split('/').pop()!;
  const chunks: Uint8Array[] = [];
  let offset = 0;
  const copy: ModelProto = {
    ...model,
    graph: {
      ...model.graph,
      initializer: initializers.map((t) => {
        const raw = rawBytes(t);
        if (!raw || raw.length < 1024) return t;
        const padding = (4096 - (offset % 4096)) % 4096;
        if (padding) chunks.push(new Uint8Array(padding));
        offset += padding;
        chunks.push(raw);
        const entry = {
          ...t,
          rawData: new Uint8Array(0),
          dataLocation: onnx.TensorProto.DataLocation.EXTERNAL,
          externalData: [
            { key: 'location', value: location },
            { key: 'offset', value: String(offset) },
            { key: 'length', value: String(raw.length) },
          ],
        };
        offset += raw.length;
        return entry;
      }),
    },
  };
  await writeFile(dataPath, chunks);
  const bytes = onnx.ModelProto.encode(copy).finish();
  await writeFile(outputPath, bytes);
  return { bytes: bytes.length + offset, dataPath };
}

/** A model as bytes (for onnxruntime sessions created from a buffer). */
export function encodeModel(model: ModelProto): Uint8Array {
  return onnx.ModelProto.encode(model).finish();
}

/** The float32 values of an initializer (raw_data or float_data). */
export function floatValues(tensor: TensorProto): Float32Array {
  const raw = rawBytes(tensor);
  if (raw) {
    const copy = new Uint8Array(raw); // aligned copy
    return new Float32Array(copy.buffer, 0, copy.length / 4);
  }
  return Float32Array.from(tensor.floatData ?? []);
}

export function attributeInt(node: NodeProto, name: string, fallback: number): number {
  const a = (node.attribute ?? []).find((x) => x.name === name);
  return a?.i === undefined || a.i === null ? fallback : Number(a.i);
}

export function attributeFloat(node: NodeProto, name: string, fallback: number): number {
  const a = (node.attribute ?? []).find((x) => x.name === name);
  return a?.f === undefined || a.f === null ? fallback : Number(a.f);
}

/** A float32 initializer from values. */
export function floatTensor(name: string, dims: readonly number[], values: Float32Array): TensorProto {
  return {
    name,
    dims: [...dims],
    dataType: DataType.FLOAT,
    rawData: new Uint8Array(values.buffer, values.byteOffset, values.byteLength),
  };
}

/** An int8/uint8/int32 initializer from values. */
export function integerTensor(
  name: string,
  dims: readonly number[],
  dataType: typeof DataType.INT8 | typeof DataType.UINT8 | typeof DataType.INT32,
  values: Int8Array | Uint8Array | Int32Array,
): TensorProto {
  return {
    name,
    dims: [...dims],
    dataType,
    rawData: new Uint8Array(values.buffer, values.byteOffset, values.byteLength),
  };
}

/** Opset-9 operators whose meaning changed in opset 10 in a way `upgradeOpset9To10` does not rewrite. */
const CHANGED_IN_OPSET_10 = new Set(['Upsample', 'TopK', 'Dropout']);

/**
 * Moves an opset-9 model (as Paddle2ONNX writes them) to opset 10, the first with
 * QuantizeLinear/DequantizeLinear and the integer kernels onnxruntime fuses QDQ into: Slice
 * takes its starts/ends/axes as inputs instead of attributes; nothing else the quantiser meets
 * changed. Models at opset 10 or later are returned as they are.
 *
 * @throws MARINA_ERR_QUANTIZE_MODEL_INVALID when the model uses an operator whose opset-10 form differs otherwise.
 */
export function upgradeOpset9To10(loaded: LoadedModel, modelPath: string): LoadedModel {
  if (loaded.opset >= 10) return loaded;
  const graph = loaded.model.graph!;
  const changed = (graph.node ?? []).find((n) => (n.domain ?? '') === '' && CHANGED_IN_OPSET_10.has(n.opType ?? ''));
  if (changed)
    throw createError.MARINA_ERR_QUANTIZE_MODEL_INVALID(
      `'${modelPath}' imports opset 9 and uses ${changed.opType}, whose form changed in opset 10; convert the model to opset 10 or later first`,
    );
  const initializers = [...(graph.initializer ?? [])];
  const nodes = (graph.node ?? []).map((node) => {
    if (node.opType !== 'Slice' || (node.domain ?? '') !== '') return node;
    const ints = (name: string): number[] | undefined =>
      node.attribute?.find((a) => a.name === name)?.ints?.map(Number);
    const inputs = [node.input?.[0] ?? ''];
    for (const key of ['starts', 'ends', 'axes']) {
      const values = ints(key);
      if (!values) break;
      const name = `${node.name}_${key}`;
      initializers.push({ name, dims: [values.length], dataType: DataType.INT64, int64Data: values });
      inputs.push(name);
    }
    return { ...node, input: inputs, attribute: [] };
  });
  const opsetImport = (loaded.model.opsetImport ?? []).map((o) =>
    (o.domain ?? '') === '' || o.domain === 'ai.onnx' ? { ...o, version: 10 } : o,
  );
  return {
    model: { ...loaded.model, opsetImport, graph: { ...graph, node: nodes, initializer: initializers } },
    opset: 10,
  };
}
