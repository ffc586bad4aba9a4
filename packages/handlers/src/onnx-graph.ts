import { open, type FileHandle } from 'node:fs/promises';
import type { ModelSignature, TensorSignature } from './types.ts';

/** One node of an ONNX graph: what the handlers need to know about it (attributes are not read). */
export interface OnnxNode {
  opType: string;
  inputs: string[];
  outputs: string[];
}

/** The structure of an ONNX model's main graph, without its weights. */
export interface OnnxGraph extends ModelSignature {
  nodes: OnnxNode[];
}

// TensorProto.DataType → onnxruntime-node's type names.
const ELEM_TYPES: Record<number, string> = {
  1: 'float32',
  2: 'uint8',
  3: 'int8',
  4: 'uint16',
  5: 'int16',
  6: 'int32',
  7: 'int64',
  8: 'string',
  9: 'bool',
  10: 'float16',
  11: 'float64',
  12: 'uint32',
  13: 'uint64',
  16: 'bfloat16',
};
const BLOCK_BYTES = 64 * 1024;

/** Positional reads through a small cache: the graph's framing is read, its weights are skipped with a seek. */
class FileReader {
  pos = 0;
  private block = Buffer.alloc(0);
  private blockAt = 0;

  constructor(
    private readonly file: FileHandle,
    readonly size: number,
  ) {}

  private async byte(): Promise<number> {
    if (this.pos < this.blockAt || this.pos >= this.blockAt + this.block.length) {
      const buffer = Buffer.alloc(BLOCK_BYTES);
      const { bytesRead } = await this.file.read(buffer, 0, BLOCK_BYTES, this.pos);
      if (bytesRead === 0) throw new RangeError('the file ends inside a protobuf field');
      this.block = buffer.subarray(0, bytesRead);
      this.blockAt = this.pos;
    }
    return this.block[this.pos++ - this.blockAt]!;
  }

  async varint(): Promise<number> {
    let result = 0;
    let multiplier = 1;
    for (let i = 0; i < 10; i++) {
      const b = await this.byte();
      result += (b & 0x7f) * multiplier;
      if (b < 0x80) return result;
      multiplier *= 128;
    }
    throw new RangeError('a protobuf varint is longer than 10 bytes');
  }

  /** Reads a length prefix and returns where the value it announces ends. */
  async lengthEnd(): Promise<number> {
    const length = await this.varint();
    return this.pos + length;
  }

  async bytes(length: number): Promise<Buffer> {
    const out = Buffer.alloc(length);
    for (let i = 0; i < length; i++) out[i] = await this.byte();
    return out;
  }

  /** Skips the value of a field of `wireType` (the tag was read). */
  async skip(wireType: number): Promise<void> {
    if (wireType === 0) await this.varint();
    else if (wireType === 1) this.pos += 8;
    else if (wireType === 2) {
      // Read the length before touching pos: `pos += await ...` would add to the old pos.
      const length = await this.varint();
      this.pos += length;
    } else if (wireType === 5) this.pos += 4;
    else throw new RangeError(`unsupported protobuf wire type ${wireType}`);
  }

  /** Calls `onField` for each field up to `end`; `onField` reads the value or returns false to have it skipped. */
  async fields(end: number, onField: (field: number, wireType: number) => Promise<boolean>): Promise<void> {
    while (this.pos < end) {
      const tag = await this.varint();
      const field = Math.floor(tag / 8);
      const wireType = tag & 7;
      if (!(await onField(field, wireType))) await this.skip(wireType);
    }
    if (this.pos !== end) throw new RangeError('a protobuf message overruns its length');
  }
}

async function readNode(reader: FileReader, end: number): Promise<OnnxNode> {
  const node: OnnxNode = { opType: '', inputs: [], outputs: [] };
  await reader.fields(end, async (field, wireType) => {
    if (wireType !== 2 || (field !== 1 && field !== 2 && field !== 4)) return false;
    const text = (await reader.bytes(await reader.varint())).toString('utf8');
    if (field === 1) node.inputs.push(text);
    else if (field === 2) node.outputs.push(text);
    else node.opType = text;
    return true;
  });
  return node;
}

async function readValueInfo(reader: FileReader, end: number): Promise<TensorSignature> {
  const info: TensorSignature & { shape: Array<number | string> } = { name: '', type: 'non-tensor', shape: [] };
  await reader.fields(end, async (field, wireType) => {
    if (wireType !== 2) return false;
    const length = await reader.varint();
    if (field === 1) {
      info.name = (await reader.bytes(length)).toString('utf8');
      return true;
    }
    if (field !== 2) {
      reader.pos += length;
      return true;
    }
    // TypeProto → tensor_type (1) → elem_type (1), shape (2) → dim (1) → dim_value (1) | dim_param (2)
    await reader.fields(reader.pos + length, async (typeField, typeWire) => {
      if (typeField !== 1 || typeWire !== 2) return false;
      const tensorEnd = await reader.lengthEnd();
      await reader.fields(tensorEnd, async (tensorField, tensorWire) => {
        if (tensorField === 1 && tensorWire === 0) {
          const elem = await reader.varint();
          info.type = ELEM_TYPES[elem] ?? `onnx-type-${elem}`;
          return true;
        }
        if (tensorField !== 2 || tensorWire !== 2) return false;
        const shapeEnd = await reader.lengthEnd();
        await reader.fields(shapeEnd, async (shapeField, shapeWire) => {
          if (shapeField !== 1 || shapeWire !== 2) return false;
          const dimEnd = await reader.lengthEnd();
          let dim: number | string = -1;
          await reader.fields(dimEnd, async (dimField, dimWire) => {
            if (dimField === 1 && dimWire === 0) dim = await reader.varint();
            else if (dimField === 2 && dimWire === 2)
              dim = (await reader.bytes(await reader.varint())).toString('utf8');
            else return false;
            return true;
          });
          info.shape.push(dim);
          return true;
        });
        return true;
      });
      return true;
    });
    return true;
  });
  return info;
}

async function readInitializerName(reader: FileReader, end: number): Promise<string> {
  let name = '';
  await reader.fields(end, async (field, wireType) => {
    if (field !== 8 || wireType !== 2) return false;
    name = (await reader.bytes(await reader.varint())).toString('utf8');
    return true;
  });
  return name;
}

/**
 * Reads an ONNX model's main graph (nodes, inputs, outputs) without loading its weights:
 * initializers are skipped with a seek, so a 230 MB model costs a few small reads. Inputs
 * that are initializers (older exporters list them) are left out, as onnxruntime does.
 * @throws RangeError or a file-system error when the file is not a readable ONNX model.
 */
export async function readOnnxGraph(modelPath: string): Promise<OnnxGraph> {
  const file = await open(modelPath, 'r');
  try {
    const reader = new FileReader(file, (await file.stat()).size);
    const graph: OnnxGraph = { inputs: [], outputs: [], nodes: [] };
    const initializers = new Set<string>();
    let hasGraph = false;
    await reader.fields(reader.size, async (field, wireType) => {
      if (field !== 7 || wireType !== 2) return false;
      hasGraph = true;
      const graphEnd = await reader.lengthEnd();
      await reader.fields(graphEnd, async (graphField, graphWire) => {
        if (graphWire !== 2) return false;
        const end = await reader.lengthEnd();
        if (graphField === 1) graph.nodes.push(await readNode(reader, end));
        else if (graphField === 5) initializers.add(await readInitializerName(reader, end));
        else if (graphField === 11) graph.inputs.push(await readValueInfo(reader, end));
        else if (graphField === 12) graph.outputs.push(await readValueInfo(reader, end));
        else reader.pos = end;
        return true;
      });
      return true;
    });
    if (!hasGraph) throw new RangeError('the file has no ONNX graph');
    graph.inputs = graph.inputs.filter((i) => !initializers.has(i.name));
    return graph;
  } finally {
    await file.close();
  }
}

/** Ops that pass values through unchanged (or only reshape them): a Softmax before one still makes the output a distribution. */
const PASS_THROUGH = new Set([
  'Identity',
  'Reshape',
  'Flatten',
  'Squeeze',
  'Unsqueeze',
  'Transpose',
  'Cast',
  'Dropout',
]);

/**
 * What the graph computes last for `outputName`, looking through reshapes: 'softmax' for
 * Softmax, 'log-softmax' for LogSoftmax, 'sigmoid' for Sigmoid, otherwise undefined (the
 * output is not known to be probabilities from the graph alone).
 */
export function finalActivation(
  graph: OnnxGraph,
  outputName: string,
): 'softmax' | 'log-softmax' | 'sigmoid' | undefined {
  const producers = new Map<string, OnnxNode>();
  for (const node of graph.nodes) for (const output of node.outputs) producers.set(output, node);
  let name = outputName;
  for (let hops = 0; hops < 32; hops++) {
    const node = producers.get(name);
    if (!node) return undefined;
    if (node.opType === 'Softmax') return 'softmax';
    if (node.opType === 'LogSoftmax') return 'log-softmax';
    if (node.opType === 'Sigmoid') return 'sigmoid';
    if (!PASS_THROUGH.has(node.opType) || node.inputs[0] === undefined) return undefined;
    name = node.inputs[0];
  }
  return undefined;
}

/** `finalActivation` of a model file; undefined when the file cannot be read as plain ONNX. */
export async function readFinalActivation(
  modelPath: string | undefined,
  outputName: string,
): Promise<ReturnType<typeof finalActivation>> {
  if (modelPath === undefined) return undefined;
  try {
    return finalActivation(await readOnnxGraph(modelPath), outputName);
  } catch {
    // The session loaded the file, so this is rare (an unusual layout): the caller decides from the values.
    return undefined;
  }
}
