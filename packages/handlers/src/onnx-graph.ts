import { open, stat, type FileHandle } from 'node:fs/promises';
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
/** How much of an initializer is read to find its name (TensorProto writes its name before its data). */
const NAME_WINDOW_BYTES = 1024;

/**
 * Protobuf fields of one message held in memory, read synchronously: the graph's nodes and value
 * infos are small, and parsing them byte by byte through awaits cost a fresh worker thread (code
 * not yet compiled) about 25 ms for a ResNet-50 graph, on a model load's path.
 */
class BufferReader {
  pos = 0;

  constructor(private readonly buffer: Buffer) {}

  get end(): number {
    return this.buffer.length;
  }

  varint(): number {
    let result = 0;
    let multiplier = 1;
    for (let i = 0; i < 10; i++) {
      if (this.pos >= this.buffer.length) throw new RangeError('the file ends inside a protobuf field');
      const b = this.buffer[this.pos++]!;
      result += (b & 0x7f) * multiplier;
      if (b < 0x80) return result;
      multiplier *= 128;
    }
    throw new RangeError('a protobuf varint is longer than 10 bytes');
  }

  /** Reads a length prefix and returns where the value it announces ends. */
  lengthEnd(): number {
    const length = this.varint();
    return this.pos + length;
  }

  text(length: number): string {
    if (this.pos + length > this.buffer.length) throw new RangeError('a protobuf string overruns its message');
    const value = this.buffer.toString('utf8', this.pos, this.pos + length);
    this.pos += length;
    return value;
  }

  /** Skips the value of a field of `wireType` (the tag was read). */
  skip(wireType: number): void {
    if (wireType === 0) this.varint();
    else if (wireType === 1) this.pos += 8;
    else if (wireType === 2) this.pos = this.lengthEnd();
    else if (wireType === 5) this.pos += 4;
    else throw new RangeError(`unsupported protobuf wire type ${wireType}`);
  }

  /** Calls `onField` for each field up to `end`; `onField` reads the value or returns false to have it skipped. */
  fields(end: number, onField: (field: number, wireType: number) => boolean): void {
    while (this.pos < end) {
      const tag = this.varint();
      if (!onField(Math.floor(tag / 8), tag & 7)) this.skip(tag & 7);
    }
    if (this.pos !== end) throw new RangeError('a protobuf message overruns its length');
  }
}

/** Positional reads through a small cache: the graph's framing is read, its weights are skipped with a seek. */
class FileReader {
  pos = 0;
  private block = Buffer.alloc(0);
  private blockAt = 0;

  constructor(
    private readonly file: FileHandle,
    readonly size: number,
  ) {}

  /** Makes the cache hold [pos, pos + length) when the file has it (a read of at least `length`, from pos). */
  private async fill(length: number): Promise<void> {
    if (this.pos >= this.blockAt && this.pos + length <= this.blockAt + this.block.length) return;
    const buffer = Buffer.allocUnsafe(Math.max(BLOCK_BYTES, length));
    const { bytesRead } = await this.file.read(buffer, 0, buffer.length, this.pos);
    if (bytesRead === 0) throw new RangeError('the file ends inside a protobuf field');
    this.block = buffer.subarray(0, bytesRead);
    this.blockAt = this.pos;
  }

  /** The next `length` bytes (fewer where the file ends), pos moved past them. */
  async take(length: number): Promise<Buffer> {
    await this.fill(length);
    const from = this.pos - this.blockAt;
    const bytes = this.block.subarray(from, Math.min(from + length, this.block.length));
    this.pos += length;
    return bytes;
  }

  /** Runs `read` on the cached bytes from pos (a field's tag or length, 10 bytes at most), then moves pos as far as it read. */
  private async inBlock<T>(read: (reader: BufferReader) => T): Promise<T> {
    await this.fill(10);
    const reader = new BufferReader(this.block.subarray(this.pos - this.blockAt));
    const value = read(reader);
    this.pos += reader.pos;
    return value;
  }

  varint(): Promise<number> {
    return this.inBlock((reader) => reader.varint());
  }

  /** Reads a length prefix and returns where the value it announces ends. */
  async lengthEnd(): Promise<number> {
    const length = await this.varint();
    return this.pos + length;
  }

  /** Skips the value of a field of `wireType` (the tag was read): BufferReader's skip, which may move past the cached bytes. */
  skip(wireType: number): Promise<void> {
    return this.inBlock((reader) => reader.skip(wireType));
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

function readNode(reader: BufferReader): OnnxNode {
  const node: OnnxNode = { opType: '', inputs: [], outputs: [] };
  reader.fields(reader.end, (field, wireType) => {
    if (wireType !== 2 || (field !== 1 && field !== 2 && field !== 4)) return false;
    const text = reader.text(reader.varint());
    if (field === 1) node.inputs.push(text);
    else if (field === 2) node.outputs.push(text);
    else node.opType = text;
    return true;
  });
  return node;
}

function readValueInfo(reader: BufferReader): TensorSignature {
  const info: TensorSignature & { shape: Array<number | string> } = { name: '', type: 'non-tensor', shape: [] };
  reader.fields(reader.end, (field, wireType) => {
    if (wireType !== 2) return false;
    const length = reader.varint();
    if (field === 1) {
      info.name = reader.text(length);
      return true;
    }
    if (field !== 2) {
      reader.pos += length;
      return true;
    }
    // TypeProto → tensor_type (1) → elem_type (1), shape (2) → dim (1) → dim_value (1) | dim_param (2)
    reader.fields(reader.pos + length, (typeField, typeWire) => {
      if (typeField !== 1 || typeWire !== 2) return false;
      reader.fields(reader.lengthEnd(), (tensorField, tensorWire) => {
        if (tensorField === 1 && tensorWire === 0) {
          const elem = reader.varint();
          info.type = ELEM_TYPES[elem] ?? `onnx-type-${elem}`;
          return true;
        }
        if (tensorField !== 2 || tensorWire !== 2) return false;
        reader.fields(reader.lengthEnd(), (shapeField, shapeWire) => {
          if (shapeField !== 1 || shapeWire !== 2) return false;
          let dim: number | string = -1;
          reader.fields(reader.lengthEnd(), (dimField, dimWire) => {
            if (dimField === 1 && dimWire === 0) dim = reader.varint();
            else if (dimField === 2 && dimWire === 2) dim = reader.text(reader.varint());
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

/**
 * An initializer's name (field 8 of TensorProto) without reading its data: its fields are read a
 * window at a time, and one that runs past the window (raw data written before the name) is
 * skipped with a seek. Empty when it has none.
 */
async function readInitializerName(file: FileReader, end: number): Promise<string> {
  let windowBytes = NAME_WINDOW_BYTES;
  while (file.pos < end) {
    const windowAt = file.pos;
    const window = new BufferReader(await file.take(Math.min(end - windowAt, windowBytes)));
    const isLast = windowAt + window.end >= end;
    let fieldAt = 0;
    try {
      while (window.pos < window.end) {
        fieldAt = window.pos;
        const tag = window.varint();
        if (tag >>> 3 === 8 && (tag & 7) === 2) {
          const name = window.text(window.varint());
          file.pos = end;
          return name;
        }
        window.skip(tag & 7);
      }
      fieldAt = window.pos;
    } catch (error) {
      // A field cut by the window's end: read again from its start (a larger window when it is the first).
      if (!(error instanceof RangeError) || isLast) throw error;
      if (fieldAt === 0) windowBytes *= 4;
    }
    file.pos = windowAt + fieldAt;
  }
  file.pos = end;
  return '';
}

/** A graph with the identity of the file it was read from: the file is read again only when its size or time changed. */
export interface OnnxGraphFile {
  path: string;
  size: number;
  mtimeMs: number;
  graph: OnnxGraph;
}

/**
 * Graphs this thread was given (rememberOnnxGraph), by path. A server reads each model's graph
 * once, when it registers the model, and gives it to each worker thread that loads the model:
 * reading it again cost a ResNet-50 load 6–8 ms of a cold request's wait (a fresh thread skips
 * each initializer with a read of its own).
 */
const remembered = new Map<string, OnnxGraphFile>();

/** Lets readOnnxGraph answer from `file` while the file at its path keeps its size and modification time. */
export function rememberOnnxGraph(file: OnnxGraphFile): void {
  remembered.set(file.path, file);
}

/** Forgets every graph given to rememberOnnxGraph (a worker thread that leaves its model for another). */
export function forgetOnnxGraphs(): void {
  remembered.clear();
}

/**
 * Reads an ONNX model's main graph (nodes, inputs, outputs) without loading its weights:
 * initializers are skipped with a seek, so a 230 MB model costs a few small reads. Inputs
 * that are initializers (older exporters list them) are left out, as onnxruntime does.
 * A graph given to rememberOnnxGraph for the same file (same size and time) is answered as it is.
 * @throws RangeError or a file-system error when the file is not a readable ONNX model.
 */
export async function readOnnxGraph(modelPath: string): Promise<OnnxGraph> {
  const known = remembered.get(modelPath);
  if (known) {
    const now = await stat(modelPath);
    if (now.size === known.size && now.mtimeMs === known.mtimeMs) return known.graph;
  }
  return (await readOnnxGraphFile(modelPath)).graph;
}

/** readOnnxGraph, read from the file, with the file's identity (for rememberOnnxGraph in another thread). */
export async function readOnnxGraphFile(modelPath: string): Promise<OnnxGraphFile> {
  const file = await open(modelPath, 'r');
  try {
    const stats = await file.stat();
    const reader = new FileReader(file, stats.size);
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
        if (graphField === 5) initializers.add(await readInitializerName(reader, end));
        else if (graphField === 1 || graphField === 11 || graphField === 12) {
          const message = new BufferReader(await reader.take(end - reader.pos));
          if (graphField === 1) graph.nodes.push(readNode(message));
          else (graphField === 11 ? graph.inputs : graph.outputs).push(readValueInfo(message));
        } else reader.pos = end;
        return true;
      });
      return true;
    });
    if (!hasGraph) throw new RangeError('the file has no ONNX graph');
    graph.inputs = graph.inputs.filter((i) => !initializers.has(i.name));
    return { path: modelPath, size: stats.size, mtimeMs: stats.mtimeMs, graph };
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
