/**
 * Tensors as the Open Inference Protocol (KServe v2) carries them, and the conversions every
 * protocol needs: v2 datatype ↔ onnxruntime type, JSON values ↔ raw little-endian bytes,
 * raw bytes ↔ ORT tensors, and the binary tensor data extension's body layout (a JSON header
 * of `Inference-Header-Content-Length` bytes followed by the tensors' bytes, in order).
 * Raw bytes are the one internal form: REST binary, gRPC raw_*_contents and the worker
 * hand-off all use them, so no protocol converts through JSON numbers.
 */
import * as ort from 'onnxruntime-node';
import { createHandlerError } from './errors.ts';

export type V2Datatype =
  | 'BOOL'
  | 'UINT8'
  | 'UINT16'
  | 'UINT32'
  | 'UINT64'
  | 'INT8'
  | 'INT16'
  | 'INT32'
  | 'INT64'
  | 'FP16'
  | 'FP32'
  | 'FP64'
  | 'BYTES';

interface DatatypeInfo {
  ort: string;
  /** Bytes per element; 0 for BYTES (length-prefixed). */
  bytes: number;
}

/** v2 datatype → onnxruntime-node tensor type and element size. */
export const V2_DATATYPES: Readonly<Record<V2Datatype, DatatypeInfo>> = {
  BOOL: { ort: 'bool', bytes: 1 },
  UINT8: { ort: 'uint8', bytes: 1 },
  UINT16: { ort: 'uint16', bytes: 2 },
  UINT32: { ort: 'uint32', bytes: 4 },
  UINT64: { ort: 'uint64', bytes: 8 },
  INT8: { ort: 'int8', bytes: 1 },
  INT16: { ort: 'int16', bytes: 2 },
  INT32: { ort: 'int32', bytes: 4 },
  INT64: { ort: 'int64', bytes: 8 },
  FP16: { ort: 'float16', bytes: 2 },
  FP32: { ort: 'float32', bytes: 4 },
  FP64: { ort: 'float64', bytes: 8 },
  BYTES: { ort: 'string', bytes: 0 },
};

const ortToV2: Record<string, V2Datatype> = Object.fromEntries(
  Object.entries(V2_DATATYPES).map(([k, v]) => [v.ort, k as V2Datatype]),
);

export function isV2Datatype(value: unknown): value is V2Datatype {
  return typeof value === 'string' && Object.hasOwn(V2_DATATYPES, value);
}

/** The v2 datatype of an onnxruntime type name ('float32' → 'FP32'); undefined for types v2 cannot carry. */
export function v2DatatypeOf(ortType: string): V2Datatype | undefined {
  return ortToV2[ortType];
}

/** One tensor in the internal form: v2 datatype, shape, and raw little-endian bytes (BYTES: 4-byte length + bytes per element). */
export interface RawTensor {
  name: string;
  datatype: V2Datatype;
  shape: number[];
  raw: Buffer;
}

function invalid(message: string) {
  return createHandlerError.MARINA_ERR_TENSOR_INPUT_INVALID(message);
}

export function elementCount(shape: readonly number[]): number {
  let n = 1;
  for (const d of shape) n *= d;
  return n;
}

// IEEE 754 half precision, round-to-nearest-even.
const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);
export function float32ToFloat16Bits(value: number): number {
  f32[0] = value;
  const x = u32[0]!;
  const sign = (x >>> 16) & 0x8000;
  const exp = (x >>> 23) & 0xff;
  let mant = x & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant ? 0x200 : 0);
  const e = exp - 127 + 15;
  if (e >= 0x1f) return sign | 0x7c00;
  if (e <= 0) {
    if (e < -10) return sign;
    mant |= 0x800000;
    const shift = 14 - e;
    let half = mant >>> shift;
    const rem = mant & ((1 << shift) - 1);
    const mid = 1 << (shift - 1);
    if (rem > mid || (rem === mid && half & 1)) half++;
    return sign | half;
  }
  let half = (e << 10) | (mant >>> 13);
  const rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem === 0x1000 && half & 1)) half++;
  return sign | half;
}

export function float16BitsToFloat32(bits: number): number {
  const sign = bits & 0x8000 ? -1 : 1;
  const exp = (bits >>> 10) & 0x1f;
  const mant = bits & 0x3ff;
  if (exp === 0) return sign * mant * 2 ** -24;
  if (exp === 0x1f) return mant ? NaN : sign * Infinity;
  return sign * (1 + mant / 1024) * 2 ** (exp - 15);
}

/** Flattens nested JSON data (v2 allows flat or nested, row-major). */
function flatten(data: unknown): unknown[] {
  if (!Array.isArray(data)) return [data];
  for (let i = 0; i < data.length; i++) if (Array.isArray(data[i])) return flattenInto(data, []);
  return data;
}

/** `data.flat(Infinity)` without its generic per-level arrays (this runs on the HTTP thread for every JSON tensor request). */
function flattenInto(data: readonly unknown[], out: unknown[]): unknown[] {
  for (let i = 0; i < data.length; i++) {
    const v = data[i];
    if (Array.isArray(v)) flattenInto(v, out);
    else out.push(v);
  }
  return out;
}

/** Largest finite FP32 value. */
export const FP32_MAX = 3.4028234663852886e38;
/** Largest finite FP16 value. */
export const FP16_MAX = 65504;

/** The largest magnitude each float datatype holds. */
const FLOAT_MAX: Partial<Record<V2Datatype, number>> = { FP16: FP16_MAX, FP32: FP32_MAX, FP64: Number.MAX_VALUE };

function notOfDatatype(where: string, datatype: V2Datatype, v: unknown, what: string) {
  return invalid(`${where}: ${JSON.stringify(v)} is not ${what} (datatype ${datatype})`);
}

/**
 * JSON values → raw bytes, checking every value fits the datatype (integers in range, booleans
 * for BOOL, strings for BYTES).
 * @throws MARINA_ERR_TENSOR_INPUT_INVALID naming `where`, the value and what was expected.
 */
export function jsonToRaw(datatype: V2Datatype, data: unknown, shape: readonly number[], where: string): Buffer {
  const values = flatten(data);
  const count = elementCount(shape);
  if (values.length !== count)
    throw invalid(`${where}: shape [${shape.join(', ')}] needs ${count} values, 'data' has ${values.length}`);
  if (datatype === 'BYTES') {
    const parts = values.map((v) => {
      if (typeof v !== 'string') throw invalid(`${where}: BYTES data must be strings, got ${JSON.stringify(v)}`);
      return Buffer.from(v, 'utf8');
    });
    return encodeBytesElements(parts);
  }
  const info = V2_DATATYPES[datatype];
  const out = Buffer.allocUnsafe(count * info.bytes);
  for (let i = 0; i < count; i++) {
    const v = values[i];
    if (datatype === 'BOOL') {
      if (typeof v !== 'boolean') throw notOfDatatype(where, datatype, v, 'a boolean');
      out[i] = v ? 1 : 0;
      continue;
    }
    if (typeof v !== 'number') throw notOfDatatype(where, datatype, v, 'a number');
    // JSON has no Infinity, but 1e39 parses to it; a float type that cannot hold a value refuses it
    // rather than storing ±Infinity (FP32 past ±3.4e38, FP16 past ±65504).
    if (FLOAT_MAX[datatype] !== undefined && !(Math.abs(v) <= FLOAT_MAX[datatype]!))
      throw notOfDatatype(where, datatype, v, `a finite number within ±${FLOAT_MAX[datatype]!.toPrecision(5)}`);
    switch (datatype) {
      case 'FP32':
        out.writeFloatLE(v, i * 4);
        break;
      case 'FP64':
        out.writeDoubleLE(v, i * 8);
        break;
      case 'FP16':
        out.writeUInt16LE(float32ToFloat16Bits(v), i * 2);
        break;
      default: {
        if (!Number.isInteger(v)) throw notOfDatatype(where, datatype, v, 'an integer');
        try {
          switch (datatype) {
            case 'UINT8':
              out.writeUInt8(v, i);
              break;
            case 'UINT16':
              out.writeUInt16LE(v, i * 2);
              break;
            case 'UINT32':
              out.writeUInt32LE(v, i * 4);
              break;
            case 'INT8':
              out.writeInt8(v, i);
              break;
            case 'INT16':
              out.writeInt16LE(v, i * 2);
              break;
            case 'INT32':
              out.writeInt32LE(v, i * 4);
              break;
            case 'INT64':
              out.writeBigInt64LE(BigInt(v), i * 8);
              break;
            case 'UINT64':
              out.writeBigUInt64LE(BigInt(v), i * 8);
              break;
          }
        } catch {
          throw notOfDatatype(where, datatype, v, `in the range of ${datatype}`);
        }
      }
    }
  }
  return out;
}

/** Raw bytes → JSON values (64-bit integers as numbers; exact up to 2^53). */
export function rawToJson(datatype: V2Datatype, raw: Buffer): number[] | boolean[] | string[] {
  if (datatype === 'BYTES') return decodeBytesElements(raw).map((b) => b.toString('utf8'));
  const info = V2_DATATYPES[datatype];
  const n = raw.length / info.bytes;
  const out = new Array(n);
  for (let i = 0; i < n; i++) {
    switch (datatype) {
      case 'BOOL':
        out[i] = raw[i] !== 0;
        break;
      case 'UINT8':
        out[i] = raw[i];
        break;
      case 'INT8':
        out[i] = raw.readInt8(i);
        break;
      case 'UINT16':
        out[i] = raw.readUInt16LE(i * 2);
        break;
      case 'INT16':
        out[i] = raw.readInt16LE(i * 2);
        break;
      case 'UINT32':
        out[i] = raw.readUInt32LE(i * 4);
        break;
      case 'INT32':
        out[i] = raw.readInt32LE(i * 4);
        break;
      case 'UINT64':
        out[i] = Number(raw.readBigUInt64LE(i * 8));
        break;
      case 'INT64':
        out[i] = Number(raw.readBigInt64LE(i * 8));
        break;
      case 'FP16':
        out[i] = float16BitsToFloat32(raw.readUInt16LE(i * 2));
        break;
      case 'FP32':
        out[i] = raw.readFloatLE(i * 4);
        break;
      case 'FP64':
        out[i] = raw.readDoubleLE(i * 8);
        break;
    }
  }
  return out;
}

export function encodeBytesElements(parts: Buffer[]): Buffer {
  const out = Buffer.allocUnsafe(parts.reduce((n, p) => n + 4 + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.writeUInt32LE(p.length, at);
    p.copy(out, at + 4);
    at += 4 + p.length;
  }
  return out;
}

export function decodeBytesElements(raw: Buffer, where = 'BYTES tensor'): Buffer[] {
  const parts: Buffer[] = [];
  let at = 0;
  while (at < raw.length) {
    if (at + 4 > raw.length) throw invalid(`${where}: truncated element length at byte ${at}`);
    const n = raw.readUInt32LE(at);
    if (at + 4 + n > raw.length)
      throw invalid(`${where}: element of ${n} bytes at byte ${at} runs past the end (${raw.length} bytes)`);
    parts.push(raw.subarray(at + 4, at + 4 + n));
    at += 4 + n;
  }
  return parts;
}

/** Bytes a tensor of this datatype and shape must have (undefined for BYTES, whose size varies). */
export function expectedByteLength(datatype: V2Datatype, shape: readonly number[]): number | undefined {
  const size = V2_DATATYPES[datatype].bytes;
  return size === 0 ? undefined : elementCount(shape) * size;
}

/** Checks raw bytes fit the datatype and shape, and that float values are finite. @throws MARINA_ERR_TENSOR_INPUT_INVALID */
export function checkRawSize(t: RawTensor, where: string): void {
  const expected = expectedByteLength(t.datatype, t.shape);
  if (expected !== undefined && t.raw.length !== expected) {
    throw invalid(`${where}: ${t.datatype} shape [${t.shape.join(', ')}] needs ${expected} bytes, got ${t.raw.length}`);
  }
  if (expected === undefined) {
    const n = decodeBytesElements(t.raw, where).length;
    if (n !== elementCount(t.shape))
      throw invalid(`${where}: BYTES shape [${t.shape.join(', ')}] needs ${elementCount(t.shape)} elements, got ${n}`);
  }
  const nonFinite = firstNonFinite(t.datatype, t.raw);
  if (nonFinite !== -1)
    throw invalid(
      `${where}: element ${nonFinite} is not a finite number (Infinity or NaN); ${t.datatype} inputs must be finite`,
    );
}

/**
 * Index of the first Infinity or NaN in raw little-endian floats, -1 when every value is finite
 * (or the type is not a float). Reads only the exponent bits, one or two bytes per element.
 */
function firstNonFinite(datatype: V2Datatype, raw: Buffer): number {
  if (datatype === 'FP32') {
    for (let i = 0, at = 3; at < raw.length; i++, at += 4)
      if ((raw[at]! & 0x7f) === 0x7f && (raw[at - 1]! & 0x80) === 0x80) return i;
  } else if (datatype === 'FP16') {
    for (let i = 0, at = 1; at < raw.length; i++, at += 2) if ((raw[at]! & 0x7c) === 0x7c) return i;
  } else if (datatype === 'FP64') {
    for (let i = 0, at = 7; at < raw.length; i++, at += 8)
      if ((raw[at]! & 0x7f) === 0x7f && (raw[at - 1]! & 0xf0) === 0xf0) return i;
  }
  return -1;
}

type TypedArrayCtor = {
  new (buffer: ArrayBufferLike, byteOffset: number, length: number): ArrayBufferView;
  BYTES_PER_ELEMENT: number;
};
const arrayOf: Record<string, TypedArrayCtor> = {
  bool: Uint8Array,
  uint8: Uint8Array,
  int8: Int8Array,
  uint16: Uint16Array,
  int16: Int16Array,
  float16: Uint16Array,
  uint32: Uint32Array,
  int32: Int32Array,
  float32: Float32Array,
  float64: Float64Array,
  int64: BigInt64Array,
  uint64: BigUint64Array,
};

/** A typed array over the bytes (copied once when they are not aligned for the element size). */
function typedView(ortType: string, raw: Buffer): ArrayBufferView {
  const Ctor = arrayOf[ortType]!;
  const size = Ctor.BYTES_PER_ELEMENT;
  const bytes = raw.byteOffset % size === 0 ? raw : Buffer.from(raw);
  return new Ctor(bytes.buffer, bytes.byteOffset, bytes.length / size);
}

/** Raw tensors (same datatype, shapes equal but for dimension 0) → one ORT tensor, stacked along dimension 0 when there are several. */
export function rawToOrt(parts: RawTensor[]): ort.Tensor {
  const first = parts[0]!;
  const type = V2_DATATYPES[first.datatype].ort;
  const shape =
    parts.length === 1 ? first.shape : [parts.reduce((n, p) => n + p.shape[0]!, 0), ...first.shape.slice(1)];
  if (first.datatype === 'BYTES') {
    const strings = parts.flatMap((p) => decodeBytesElements(p.raw).map((b) => b.toString('utf8')));
    return new ort.Tensor('string', strings, shape);
  }
  const raw = parts.length === 1 ? first.raw : Buffer.concat(parts.map((p) => p.raw));
  return new ort.Tensor(type as 'float32', typedView(type, raw) as Float32Array, shape);
}

/** Rows [start, end) of an ORT output (all of it for a rank-0 tensor) as a raw tensor. */
export function ortToRaw(name: string, tensor: ort.Tensor, rows?: { start: number; end: number }): RawTensor {
  const datatype = v2DatatypeOf(tensor.type);
  if (!datatype)
    throw createHandlerError.MARINA_ERR_MODEL_OUTPUT_UNEXPECTED(
      `output '${name}' has type ${tensor.type}, which the Open Inference Protocol cannot carry`,
    );
  const dims = [...tensor.dims];
  const per = dims.slice(1).reduce((a, b) => a * b, 1);
  const start = rows && dims.length > 0 ? rows.start : 0;
  const end = rows && dims.length > 0 ? rows.end : dims.length === 0 ? 1 : dims[0]!;
  const shape = dims.length === 0 ? [] : [end - start, ...dims.slice(1)];
  if (datatype === 'BYTES') {
    const strings = (tensor.data as string[]).slice(start * per, end * per);
    return { name, datatype, shape, raw: encodeBytesElements(strings.map((s) => Buffer.from(s, 'utf8'))) };
  }
  const data = tensor.data as unknown as ArrayBufferView & { BYTES_PER_ELEMENT: number };
  const size = data.BYTES_PER_ELEMENT;
  const raw = Buffer.from(data.buffer, data.byteOffset + start * per * size, (end - start) * per * size);
  return { name, datatype, shape, raw };
}

/** The header of a v2 body (request or response), as JSON. */
export interface V2BinaryHeader {
  [key: string]: unknown;
}

/**
 * Splits a body in the binary tensor data extension's layout: the first `headerLength` bytes
 * are JSON, the rest are tensors' bytes in the order of the header's `inputs` (or `outputs`)
 * entries that carry `parameters.binary_data_size`. Returns the header and each entry's bytes.
 * @throws MARINA_ERR_TENSOR_INPUT_INVALID for a bad header length, JSON, or sizes that do not add up.
 */
export function splitBinaryBody(
  body: Buffer,
  headerLength: number,
  listKey: 'inputs' | 'outputs',
): { header: V2BinaryHeader; binaries: Map<number, Buffer> } {
  if (!Number.isInteger(headerLength) || headerLength < 0 || headerLength > body.length) {
    throw invalid(
      `Inference-Header-Content-Length is ${headerLength}, but the body has ${body.length} bytes; it must be the byte length of the JSON header at the start of the body`,
    );
  }
  let header: V2BinaryHeader;
  try {
    header = JSON.parse(body.subarray(0, headerLength).toString('utf8')) as V2BinaryHeader;
  } catch (error) {
    throw invalid(
      `the JSON header (the first ${headerLength} bytes, Inference-Header-Content-Length) is not valid JSON: ${(error as Error).message}`,
    );
  }
  if (!header || typeof header !== 'object' || Array.isArray(header))
    throw invalid('the JSON header must be an object');
  const list = header[listKey];
  const binaries = new Map<number, Buffer>();
  let at = headerLength;
  if (Array.isArray(list)) {
    list.forEach((entry, i) => {
      const size = (entry as { parameters?: { binary_data_size?: unknown } } | null)?.parameters?.binary_data_size;
      if (size === undefined) return;
      if (!Number.isInteger(size) || (size as number) < 0)
        throw invalid(
          `${listKey}[${i}].parameters.binary_data_size must be a non-negative integer, got ${JSON.stringify(size)}`,
        );
      if (at + (size as number) > body.length)
        throw invalid(
          `${listKey}[${i}] declares binary_data_size ${String(size)} but only ${body.length - at} bytes are left in the body`,
        );
      binaries.set(i, body.subarray(at, at + (size as number)));
      at += size as number;
    });
  }
  if (at !== body.length)
    throw invalid(
      `the body has ${body.length - at} bytes after the last tensor; binary_data_size values must add up to the body length minus Inference-Header-Content-Length`,
    );
  return { header, binaries };
}

/** Joins a JSON header and tensors' bytes in the binary extension's layout; returns the body and the header's length. */
export function joinBinaryBody(header: unknown, binaries: Buffer[]): { body: Buffer; headerLength: number } {
  const json = Buffer.from(JSON.stringify(header), 'utf8');
  return { body: Buffer.concat([json, ...binaries]), headerLength: json.length };
}

/**
 * The fewest bytes an answer with these outputs can take, computed without building it: a binary
 * output's own bytes, and for an output sent as JSON `jsonBytesPerElement` per element (compact
 * JSON: one character and one separator, 2; the server's pretty-printed TorchServe answer puts each
 * value of `{"outputs": {name: {"data": [...]}}}` on its own line indented by 8 spaces, so at least
 * 10). Used to refuse, before any JSON is built, an answer that cannot fit max_response_size.
 */
export function answerBytesAtLeast(
  outputs: ReadonlyArray<{ shape: readonly number[]; raw: Buffer; isBinary: boolean }>,
  jsonBytesPerElement = 2,
): number {
  let bytes = 0;
  for (const t of outputs) {
    if (t.isBinary) bytes += t.raw.length;
    else bytes += Math.max(0, jsonBytesPerElement * elementCount(t.shape) - 1);
  }
  return bytes;
}

/**
 * @param bytes the answer's size, or (`isLowerBound`) the fewest bytes it can take.
 * @throws MARINA_ERR_RESPONSE_TOO_LARGE when `bytes` exceeds `maxResponseBytes` (max_response_size).
 */
export function assertResponseSize(bytes: number, maxResponseBytes: number | undefined, isLowerBound = false): void {
  if (maxResponseBytes === undefined || bytes <= maxResponseBytes) return;
  throw createHandlerError.MARINA_ERR_RESPONSE_TOO_LARGE(
    `the answer ${isLowerBound ? 'would take at least' : 'is'} ${bytes} bytes, larger than max_response_size (${maxResponseBytes} bytes); ask for fewer outputs ("outputs"), use binary tensors (4 bytes per FP32 value instead of 10–20 in JSON), send fewer rows, or raise max_response_size`,
    { details: { bytes, maxResponseBytes } },
  );
}
