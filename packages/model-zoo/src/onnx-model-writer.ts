import { open, rename, rm, type FileHandle } from 'node:fs/promises';
import { endianness } from 'node:os';
import { basename } from 'node:path';
import onnxProto from 'onnx-proto';
import { createError } from './errors.ts';

const { onnx } = onnxProto;

/** ONNX IR version written into every model (ONNX 1.10's schema, which onnx-proto 8 carries). */
export const IR_VERSION = 8;
/** The default-domain opset every model imports. */
export const OPSET_VERSION = 17;
/** Alignment of every tensor's offset inside an external data file: one page, so runtimes can mmap it. */
export const EXTERNAL_DATA_ALIGNMENT_BYTES = 4096;

/** A float32 initializer whose values are produced only when it is written, so a whole model never sits in memory. */
export interface TensorSource {
  name: string;
  dims: readonly number[];
  /**
   * Writes the tensor's values into `out` (length = product of `dims`). Called exactly once
   * per write, in initializer order, so sources may share one seeded generator.
   */
  fill(out: Float32Array): void;
}

/** A graph input or output: float32 (unless `elemType`) with the given shape; a string dimension is symbolic (dynamic). */
export interface ValueInfoSpec {
  name: string;
  dims: readonly (number | string)[];
  /** TensorProto.DataType (1 float, 2 uint8, 7 int64, 9 bool, 10 float16, …); float32 when omitted. */
  elemType?: number;
}

export interface GraphSpec {
  name: string;
  nodes: onnxProto.onnx.INodeProto[];
  inputs: readonly ValueInfoSpec[];
  outputs: readonly ValueInfoSpec[];
  initializers: readonly TensorSource[];
}

export interface WriteOnnxModelOptions {
  outputPath: string;
  graph: GraphSpec;
  /** Put weights in `<outputPath>.data`, each tensor at a 4096-byte-aligned offset. Default false. */
  isExternalData?: boolean;
  /** Written into the model's `metadata_props`, before the graph, so `readModelMetadata` reads it cheaply. */
  metadata?: Record<string, string>;
  docString?: string;
}

/** What a model writer produced. */
export interface WriteModelResult {
  /** Path of the `.onnx` file. */
  modelPath: string;
  /** Path of the external data file, when the weights were written outside the model. */
  dataPath?: string;
  /** Number of float32 values in the model's initializers (its trainable parameters, batch-norm folded). */
  parameterCount: number;
  /** Bytes written in total: the model file plus the data file, if any. */
  bytes: number;
}

const FLOAT = onnx.TensorProto.DataType.FLOAT;
const WRITE_CHUNK_BYTES = 1 << 20;
// Tags of the length-delimited fields written by hand (field number << 3 | wire type 2).
const TAG_MODEL_GRAPH = (7 << 3) | 2;
const TAG_GRAPH_INITIALIZER = (5 << 3) | 2;
const TAG_TENSOR_RAW_DATA = (9 << 3) | 2;

function varint(value: number): Uint8Array {
  const bytes: number[] = [];
  let v = value;
  while (v >= 0x80) {
    bytes.push((v % 0x80) | 0x80);
    v = Math.floor(v / 0x80);
  }
  bytes.push(v);
  return Uint8Array.from(bytes);
}

function elementCount(dims: readonly number[]): number {
  return dims.reduce((n, d) => n * d, 1);
}

function valueInfo(spec: ValueInfoSpec): onnxProto.onnx.IValueInfoProto {
  return {
    name: spec.name,
    type: {
      tensorType: {
        elemType: spec.elemType ?? FLOAT,
        shape: { dim: spec.dims.map((d) => (typeof d === 'string' ? { dimParam: d } : { dimValue: d })) },
      },
    },
  };
}

/** Buffers small writes into 1 MiB chunks and tracks the byte position. */
class ChunkedFileWriter {
  position = 0;
  private readonly chunk = Buffer.allocUnsafe(WRITE_CHUNK_BYTES);
  private used = 0;

  constructor(private readonly file: FileHandle) {}

  async write(bytes: Uint8Array): Promise<void> {
    if (bytes.length >= WRITE_CHUNK_BYTES) {
      await this.flush();
      await this.file.write(bytes, 0, bytes.length);
    } else {
      if (this.used + bytes.length > WRITE_CHUNK_BYTES) await this.flush();
      this.chunk.set(bytes, this.used);
      this.used += bytes.length;
    }
    this.position += bytes.length;
  }

  async padTo(alignment: number): Promise<void> {
    const padding = (alignment - (this.position % alignment)) % alignment;
    if (padding > 0) await this.write(new Uint8Array(padding));
  }

  async flush(): Promise<void> {
    if (this.used === 0) return;
    await this.file.write(this.chunk, 0, this.used);
    this.used = 0;
  }
}

async function withTempFile(finalPath: string, body: (writer: ChunkedFileWriter) => Promise<void>): Promise<string> {
  const tempPath = `${finalPath}.tmp-${process.pid}-${Date.now()}`;
  let file: FileHandle | undefined;
  try {
    file = await open(tempPath, 'w');
    const writer = new ChunkedFileWriter(file);
    await body(writer);
    await writer.flush();
    await file.close();
    file = undefined;
    return tempPath;
  } catch (error) {
    await file?.close().catch(() => undefined);
    await rm(tempPath, { force: true });
    throw createError.MARINA_ERR_MODEL_ZOO_WRITE_FAILED(
      `could not write '${finalPath}': ${(error as Error).message}; check the directory exists, is writable and has free space`,
      { cause: error },
    );
  }
}

/**
 * Writes an ONNX model (IR 8, opset 17) without ever holding all of its weights in memory:
 * the protobuf framing is computed first, then each initializer is generated into one reused
 * scratch buffer and streamed to disk. Files are written under a temporary name and renamed
 * when complete, so a model file that exists is whole. With `isExternalData` the weights go
 * to `<outputPath>.data` (page-aligned offsets, `location` relative to the model).
 *
 * @throws MARINA_ERR_MODEL_ZOO_WRITE_FAILED when a file cannot be written.
 * @throws MARINA_ERR_MODEL_ZOO_INVALID_OPTION when an inline model would exceed protobuf's 2 GiB limit.
 * @throws MARINA_ERR_MODEL_ZOO_UNSUPPORTED_PLATFORM on big-endian machines.
 */
export async function writeOnnxModel(options: WriteOnnxModelOptions): Promise<WriteModelResult> {
  if (endianness() !== 'LE') {
    throw createError.MARINA_ERR_MODEL_ZOO_UNSUPPORTED_PLATFORM(
      'this machine is big-endian; ONNX raw_data must be little-endian',
    );
  }
  const { outputPath, graph } = options;
  const isExternalData = options.isExternalData ?? false;
  const dataPath = `${outputPath}.data`;
  const location = basename(dataPath);

  // Plan: each tensor's header (and, for external data, its offset) before anything is generated.
  let dataBytes = 0;
  let parameterCount = 0;
  let maxElements = 0;
  const tensors = graph.initializers.map((source) => {
    const count = elementCount(source.dims);
    parameterCount += count;
    maxElements = Math.max(maxElements, count);
    const rawBytes = count * 4;
    let header: Uint8Array;
    let offset = 0;
    if (isExternalData) {
      offset = Math.ceil(dataBytes / EXTERNAL_DATA_ALIGNMENT_BYTES) * EXTERNAL_DATA_ALIGNMENT_BYTES;
      dataBytes = offset + rawBytes;
      header = onnx.TensorProto.encode({
        name: source.name,
        dims: [...source.dims],
        dataType: FLOAT,
        dataLocation: onnx.TensorProto.DataLocation.EXTERNAL,
        externalData: [
          { key: 'location', value: location },
          { key: 'offset', value: String(offset) },
          { key: 'length', value: String(rawBytes) },
        ],
      }).finish();
    } else {
      header = onnx.TensorProto.encode({ name: source.name, dims: [...source.dims], dataType: FLOAT }).finish();
    }
    const inlineBytes = isExternalData ? 0 : 1 + varint(rawBytes).length + rawBytes;
    const tensorBytes = header.length + inlineBytes;
    return { source, count, rawBytes, header, offset, tensorBytes };
  });

  const modelHeader = onnx.ModelProto.encode({
    irVersion: IR_VERSION,
    producerName: 'marina-model-zoo',
    producerVersion: '0.1.0',
    docString: options.docString ?? '',
    metadataProps: Object.entries(options.metadata ?? {}).map(([key, value]) => ({ key, value })),
    opsetImport: [{ domain: '', version: OPSET_VERSION }],
  }).finish();
  const graphWithoutInitializers = onnx.GraphProto.encode({
    name: graph.name,
    node: graph.nodes,
    input: graph.inputs.map(valueInfo),
    output: graph.outputs.map(valueInfo),
  }).finish();
  const graphBytes = tensors.reduce(
    (n, t) => n + 1 + varint(t.tensorBytes).length + t.tensorBytes,
    graphWithoutInitializers.length,
  );

  // protobuf (and so onnxruntime) cannot parse a message of 2 GiB or more.
  if (graphBytes >= 2 ** 31 - modelHeader.length - 16) {
    throw createError.MARINA_ERR_MODEL_ZOO_INVALID_OPTION(
      `model '${outputPath}' would be ${graphBytes} bytes, over protobuf's 2 GiB limit; write it with isExternalData: true`,
      { details: { option: 'isExternalData', value: isExternalData } },
    );
  }
  const scratch = new Float32Array(maxElements);
  const valuesOf = (t: (typeof tensors)[number]): Uint8Array => {
    const values = scratch.subarray(0, t.count);
    t.source.fill(values);
    return new Uint8Array(values.buffer, values.byteOffset, t.rawBytes);
  };

  let tempDataPath: string | undefined;
  if (isExternalData) {
    tempDataPath = await withTempFile(dataPath, async (writer) => {
      for (const t of tensors) {
        await writer.padTo(EXTERNAL_DATA_ALIGNMENT_BYTES);
        await writer.write(valuesOf(t));
      }
    });
  }
  let tempModelPath: string;
  let modelBytes = 0;
  try {
    tempModelPath = await withTempFile(outputPath, async (writer) => {
      await writer.write(modelHeader);
      await writer.write(Uint8Array.of(TAG_MODEL_GRAPH));
      await writer.write(varint(graphBytes));
      await writer.write(graphWithoutInitializers);
      for (const t of tensors) {
        await writer.write(Uint8Array.of(TAG_GRAPH_INITIALIZER));
        await writer.write(varint(t.tensorBytes));
        await writer.write(t.header);
        if (!isExternalData) {
          await writer.write(Uint8Array.of(TAG_TENSOR_RAW_DATA));
          await writer.write(varint(t.rawBytes));
          await writer.write(valuesOf(t));
        }
      }
      modelBytes = writer.position;
    });
  } catch (error) {
    if (tempDataPath) await rm(tempDataPath, { force: true });
    throw error;
  }
  try {
    // Data first: a model file that exists always has its data beside it.
    if (tempDataPath) await rename(tempDataPath, dataPath);
    await rename(tempModelPath, outputPath);
    // An inline model must not leave a stale data file from an earlier external write.
    if (!isExternalData) await rm(dataPath, { force: true });
  } catch (error) {
    await Promise.all([tempModelPath, tempDataPath].map((p) => (p ? rm(p, { force: true }) : undefined)));
    throw createError.MARINA_ERR_MODEL_ZOO_WRITE_FAILED(
      `could not move the finished model into place at '${outputPath}': ${(error as Error).message}; check the path is not a directory and is writable`,
      { cause: error },
    );
  }
  return {
    modelPath: outputPath,
    ...(isExternalData ? { dataPath } : {}),
    parameterCount,
    bytes: modelBytes + (isExternalData ? dataBytes : 0),
  };
}

/**
 * Reads a model's `metadata_props` from the start of the file only (the writer puts them
 * before the graph), so checking a 230 MB model costs one small read. Returns an empty
 * object for models whose metadata is not in the first 64 KiB or that cannot be read.
 */
export async function readModelMetadata(modelPath: string): Promise<Record<string, string>> {
  let file: FileHandle | undefined;
  try {
    file = await open(modelPath, 'r');
    const buffer = Buffer.alloc(64 * 1024);
    const { bytesRead } = await file.read(buffer, 0, buffer.length, 0);
    const metadata: Record<string, string> = {};
    const bytes = buffer.subarray(0, bytesRead);
    let pos = 0;
    const readVarint = (): number => {
      let result = 0;
      let multiplier = 1;
      for (;;) {
        if (pos >= bytes.length) throw new RangeError('truncated varint');
        const b = bytes[pos++]!;
        result += (b & 0x7f) * multiplier;
        if (b < 0x80) return result;
        multiplier *= 128;
      }
    };
    while (pos < bytes.length) {
      const tag = readVarint();
      const field = Math.floor(tag / 8);
      const wireType = tag & 7;
      if (wireType === 0) {
        readVarint();
        continue;
      }
      if (wireType !== 2) break;
      const length = readVarint();
      if (field === 7) break; // the graph: metadata always comes before it
      if (pos + length > bytes.length) break;
      if (field === 14) {
        const entry = onnx.StringStringEntryProto.decode(bytes.subarray(pos, pos + length));
        if (entry.key) metadata[entry.key] = entry.value ?? '';
      }
      pos += length;
    }
    return metadata;
  } catch {
    return {};
  } finally {
    await file?.close().catch(() => undefined);
  }
}
