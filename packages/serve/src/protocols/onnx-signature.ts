/**
 * Reads an ONNX file's graph inputs and outputs (name, element type, shape) on the main thread,
 * without loading the model: a protobuf walk with positional reads that skips nodes and weights,
 * so a 230 MB ResNet-152 costs a few thousand small reads, not a copy of the file.
 */
import { closeSync, openSync, readSync, statSync } from 'node:fs';
import type { ModelSignature, TensorSignature } from '@marina/handlers';
import { createServeError } from '../errors.ts';

/** TensorProto.DataType → onnxruntime-node type name. */
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

class FileReader {
  readonly #fd: number;
  readonly #scratch = Buffer.alloc(10);
  constructor(path: string) {
    this.#fd = openSync(path, 'r');
  }
  close(): void {
    closeSync(this.#fd);
  }
  bytes(position: number, length: number): Buffer {
    const out = Buffer.alloc(length);
    let done = 0;
    while (done < length) {
      const n = readSync(this.#fd, out, done, length - done, position + done);
      if (n === 0) throw new Error(`unexpected end of file at byte ${position + done}`);
      done += n;
    }
    return out;
  }
  /** A varint at `position`: its value and the position after it. */
  varint(position: number, end: number): { value: number; next: number } {
    const n = readSync(this.#fd, this.#scratch, 0, Math.min(10, end - position), position);
    const r = readVarint(this.#scratch.subarray(0, n), 0);
    return { value: r.value, next: position + r.next };
  }
}

function readVarint(buf: Buffer, at: number): { value: number; next: number } {
  let value = 0;
  let scale = 1;
  for (let i = at; i < buf.length; i++) {
    const b = buf[i]!;
    value += (b & 0x7f) * scale;
    scale *= 128;
    if ((b & 0x80) === 0) return { value, next: i + 1 };
  }
  throw new Error('truncated varint');
}

interface Field {
  field: number;
  wire: number;
  /** Start of the value (after tag and, for length-delimited fields, the length). */
  start: number;
  /** End of the field. */
  end: number;
  /** The varint's value for wire type 0. */
  value: number;
}

function* fieldsInBuffer(buf: Buffer, from = 0, to = buf.length): Generator<Field> {
  let at = from;
  while (at < to) {
    const tag = readVarint(buf, at);
    const field = Math.floor(tag.value / 8);
    const wire = tag.value & 7;
    at = tag.next;
    if (wire === 0) {
      const v = readVarint(buf, at);
      yield { field, wire, start: at, end: v.next, value: v.value };
      at = v.next;
    } else if (wire === 2) {
      const len = readVarint(buf, at);
      yield { field, wire, start: len.next, end: len.next + len.value, value: 0 };
      at = len.next + len.value;
    } else if (wire === 1) at += 8;
    else if (wire === 5) at += 4;
    else throw new Error(`unsupported protobuf wire type ${wire}`);
  }
}

function* fieldsInFile(file: FileReader, from: number, to: number): Generator<Field> {
  let at = from;
  while (at < to) {
    const tag = file.varint(at, to);
    const field = Math.floor(tag.value / 8);
    const wire = tag.value & 7;
    at = tag.next;
    if (wire === 0) {
      const v = file.varint(at, to);
      yield { field, wire, start: at, end: v.next, value: v.value };
      at = v.next;
    } else if (wire === 2) {
      const len = file.varint(at, to);
      yield { field, wire, start: len.next, end: len.next + len.value, value: 0 };
      at = len.next + len.value;
    } else if (wire === 1) at += 8;
    else if (wire === 5) at += 4;
    else throw new Error(`unsupported protobuf wire type ${wire} at byte ${at}`);
  }
}

/** ValueInfoProto → TensorSignature (non-tensor values get type 'non-tensor'). */
function valueInfo(buf: Buffer): TensorSignature {
  let name = '';
  let type = 'non-tensor';
  const shape: Array<number | string> = [];
  for (const f of fieldsInBuffer(buf)) {
    if (f.field === 1 && f.wire === 2) name = buf.toString('utf8', f.start, f.end);
    if (f.field !== 2 || f.wire !== 2) continue;
    for (const t of fieldsInBuffer(buf, f.start, f.end)) {
      if (t.field !== 1 || t.wire !== 2) continue; // tensor_type
      for (const tt of fieldsInBuffer(buf, t.start, t.end)) {
        if (tt.field === 1 && tt.wire === 0) type = ELEM_TYPES[tt.value] ?? `onnx-type-${tt.value}`;
        if (tt.field !== 2 || tt.wire !== 2) continue; // shape
        for (const d of fieldsInBuffer(buf, tt.start, tt.end)) {
          if (d.field !== 1 || d.wire !== 2) continue;
          let dim: number | string = -1;
          for (const v of fieldsInBuffer(buf, d.start, d.end)) {
            if (v.field === 1 && v.wire === 0) dim = v.value;
            if (v.field === 2 && v.wire === 2) dim = buf.toString('utf8', v.start, v.end);
          }
          shape.push(dim);
        }
      }
    }
  }
  return { name, type, shape };
}

/**
 * The graph's inputs (initializers excluded, as old exporters list weights as inputs) and outputs.
 * @throws MARINA_ERR_MODEL_SIGNATURE_UNREADABLE when the file cannot be read as an ONNX model.
 */
export function readOnnxSignature(path: string): ModelSignature {
  let file: FileReader | undefined;
  try {
    file = new FileReader(path);
    const fileSize = statSync(path).size;
    const inputs: TensorSignature[] = [];
    const outputs: TensorSignature[] = [];
    const initializers = new Set<string>();
    let sawGraph = false;
    for (const top of fieldsInFile(file, 0, fileSize)) {
      if (top.field !== 7 || top.wire !== 2) continue;
      sawGraph = true;
      for (const f of fieldsInFile(file, top.start, top.end)) {
        if (f.wire !== 2) continue;
        if (f.field === 11) inputs.push(valueInfo(file.bytes(f.start, f.end - f.start)));
        else if (f.field === 12) outputs.push(valueInfo(file.bytes(f.start, f.end - f.start)));
        else if (f.field === 5) {
          for (const t of fieldsInFile(file, f.start, f.end)) {
            if (t.field === 8 && t.wire === 2) {
              initializers.add(file.bytes(t.start, t.end - t.start).toString('utf8'));
              break;
            }
          }
        }
      }
    }
    if (!sawGraph) throw new Error('the file has no graph');
    return { inputs: inputs.filter((i) => !initializers.has(i.name)), outputs };
  } catch (error) {
    throw createServeError.MARINA_ERR_MODEL_SIGNATURE_UNREADABLE(
      `cannot read the inputs and outputs of ${path}: ${(error as Error).message}; check that it is an ONNX model`,
      { cause: error },
    );
  } finally {
    file?.close();
  }
}
