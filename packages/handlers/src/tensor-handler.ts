import * as ort from 'onnxruntime-node';
import { isMarinaError, type MarinaError } from '@marina/errors';
import { createHandlerError } from './errors.ts';
import { isDynamicDim } from './signature-checks.ts';
import { rowPayload } from './row-input.ts';
import type { Handler, HandlerContext, RequestRow } from './types.ts';

/** One JSON tensor: a shape and its values, flat (row-major) or nested. */
export interface JsonTensor {
  shape: number[];
  data: unknown[];
}

/** The tensor handler's answer per request: `{"outputs": {name: {shape, data}}}` with flat data. */
export interface TensorHandlerResponse {
  outputs: Record<string, { shape: number[]; data: number[] | boolean[] | string[] }>;
}

type Parsed = Map<string, { shape: number[]; data: unknown[] }>;

const typedArrays: Record<string, (values: unknown[]) => ort.Tensor['data']> = {
  float32: (v) => Float32Array.from(v as number[]),
  float64: (v) => Float64Array.from(v as number[]),
  int32: (v) => Int32Array.from(v as number[]),
  int16: (v) => Int16Array.from(v as number[]),
  int8: (v) => Int8Array.from(v as number[]),
  uint8: (v) => Uint8Array.from(v as number[]),
  uint16: (v) => Uint16Array.from(v as number[]),
  uint32: (v) => Uint32Array.from(v as number[]),
  int64: (v) => BigInt64Array.from(v as number[], (x) => BigInt(Math.trunc(x))),
  uint64: (v) => BigUint64Array.from(v as number[], (x) => BigInt(Math.trunc(x))),
  bool: (v) => Uint8Array.from(v as unknown[], (x) => (x ? 1 : 0)),
};

function invalid(message: string): MarinaError {
  return createHandlerError.MARINA_ERR_TENSOR_INPUT_INVALID(message);
}

/** Shape of a nested array (checked to be rectangular) and its values, flattened. */
function flattenNested(value: unknown, where: string): { shape: number[]; data: unknown[] } {
  const shape: number[] = [];
  let probe: unknown = value;
  while (Array.isArray(probe)) {
    shape.push(probe.length);
    probe = probe[0];
  }
  const data = (value as unknown[]).flat(Infinity);
  const expected = shape.reduce((a, b) => a * b, 1);
  if (data.length !== expected) throw invalid(`${where}: the nested array is not rectangular (shape looks like [${shape.join(', ')}] but has ${data.length} values)`);
  return { shape, data };
}

function readTensor(value: unknown, where: string): { shape: number[]; data: unknown[] } {
  if (Array.isArray(value)) return flattenNested(value, where);
  if (value && typeof value === 'object' && 'data' in value) {
    const t = value as { shape?: unknown; data: unknown };
    if (!Array.isArray(t.data)) throw invalid(`${where}: 'data' must be an array`);
    const flat = flattenNested(t.data, where);
    if (t.shape === undefined) return flat;
    if (!Array.isArray(t.shape) || !t.shape.every((d) => Number.isInteger(d) && d >= 0)) throw invalid(`${where}: 'shape' must be a list of non-negative integers, got ${JSON.stringify(t.shape)}`);
    const count = (t.shape as number[]).reduce((a, b) => a * b, 1);
    if (count !== flat.data.length) throw invalid(`${where}: shape [${t.shape.join(', ')}] needs ${count} values but 'data' has ${flat.data.length}`);
    return { shape: t.shape as number[], data: flat.data };
  }
  throw invalid(`${where}: expected a nested array or {"shape": [...], "data": [...]}`);
}

/**
 * Reads one request into named tensors. Accepted bodies (JSON):
 * - `{"inputs": {"<name>": {"shape": [...], "data": [...]}}}` (data flat or nested);
 * - `{"inputs": [{"name", "shape", "datatype", "data"}]}` (KServe v2 style; datatype is ignored, the model's type is used);
 * - `{"data": <nested array>}` or a bare nested array, for a model with one input.
 * Every input's first dimension is the batch dimension (rows of this request).
 */
export function parseTensorRequest(payload: unknown, inputNames: string[]): Parsed {
  let body = payload;
  if (Buffer.isBuffer(body) || body instanceof Uint8Array) body = Buffer.from(body).toString('utf8');
  if (typeof body === 'string') {
    try {
      body = JSON.parse(body);
    } catch (error) {
      throw invalid(`the body is not valid JSON: ${(error as Error).message}`);
    }
  }
  const parsed: Parsed = new Map();
  const single = (value: unknown) => {
    if (inputNames.length !== 1) throw invalid(`the model has ${inputNames.length} inputs (${inputNames.join(', ')}); name them: {"inputs": {"${inputNames[0]}": {"shape": [...], "data": [...]}}}`);
    parsed.set(inputNames[0]!, readTensor(value, `input '${inputNames[0]}'`));
  };
  if (Array.isArray(body)) single(body);
  else if (body && typeof body === 'object' && 'inputs' in body) {
    const inputs = (body as { inputs: unknown }).inputs;
    const entries: Array<[string, unknown]> = Array.isArray(inputs)
      ? inputs.map((i, n) => [String((i as { name?: unknown })?.name ?? (inputNames.length === 1 ? inputNames[0] : `#${n}`)), i])
      : inputs && typeof inputs === 'object' ? Object.entries(inputs) : [];
    for (const [name, value] of entries) {
      if (!inputNames.includes(name)) throw invalid(`unknown input '${name}'; the model's inputs are: ${inputNames.join(', ')}`);
      parsed.set(name, readTensor(value, `input '${name}'`));
    }
  } else if (body && typeof body === 'object' && 'data' in body) single((body as { data: unknown }).data);
  else throw invalid('expected {"inputs": {...}}, {"inputs": [...]}, {"data": [...]} or a nested array');
  for (const name of inputNames) if (!parsed.has(name)) throw invalid(`input '${name}' is missing; the model's inputs are: ${inputNames.join(', ')}`);
  for (const [name, t] of parsed) {
    if (t.data.some((v) => typeof v !== 'number' && typeof v !== 'boolean')) throw invalid(`input '${name}' has non-numeric values`);
    if (t.shape.length === 0) throw invalid(`input '${name}' needs at least one dimension (the batch dimension)`);
  }
  return parsed;
}

function toPlain(tensor: ort.Tensor, start: number, end: number): number[] | boolean[] | string[] {
  const per = tensor.dims.slice(1).reduce((a, b) => a * b, 1);
  const slice = Array.prototype.slice.call(tensor.data, start * per, end * per) as unknown[];
  if (tensor.type === 'bool') return slice.map((v) => Boolean(v));
  if (tensor.type === 'string') return slice as string[];
  return slice.map((v) => Number(v));
}

/** Bytes per element of each tensor type (strings are counted by their values, not here). */
const elementBytes: Record<string, number> = {
  float32: 4, float64: 8, int32: 4, int16: 2, int8: 1, uint8: 1, uint16: 2, uint32: 4, int64: 8, uint64: 8, bool: 1, float16: 2,
};

/** Default of `handler.maxTensorBytesPerRequest`: 256 MiB of input and output tensors per request. */
export const DEFAULT_MAX_TENSOR_BYTES_PER_REQUEST = 256 * 1024 * 1024;

interface TensorSignature {
  name: string;
  type: string;
  /** Fixed sizes, or the symbolic name of a dynamic dimension (undefined when it has none). */
  dims: Array<number | string | undefined>;
}

function signatureOf(m: ort.InferenceSession.ValueMetadata): TensorSignature {
  if (!m.isTensor) return { name: m.name, type: 'non-tensor', dims: [] };
  return { name: m.name, type: m.type, dims: m.shape.map((d) => (typeof d === 'number' && d >= 0 ? d : typeof d === 'string' && d !== '' ? d : undefined)) };
}

/**
 * The bytes one request's tensors will take: its inputs, and each output whose shape follows from
 * the inputs (fixed sizes, or symbolic dimensions the inputs bind, like the batch dimension N).
 * An output with a dimension only the data decides (e.g. a detector's box count) cannot be
 * computed before run(); it is left out, and `isExact` is false.
 */
export function tensorBytesOf(parsed: Parsed, inputs: readonly TensorSignature[], outputs: readonly TensorSignature[]): { bytes: number; isExact: boolean } {
  const bound = new Map<string, number>();
  let bytes = 0;
  for (const input of inputs) {
    const tensor = parsed.get(input.name);
    if (!tensor) continue;
    tensor.shape.forEach((size, i) => {
      const dim = input.dims[i];
      if (typeof dim === 'string') bound.set(dim, size);
    });
    bytes += tensor.shape.reduce((a, b) => a * b, 1) * (elementBytes[input.type] ?? 8);
  }
  let isExact = true;
  for (const output of outputs) {
    let count = 1;
    for (const dim of output.dims) {
      const size = typeof dim === 'number' ? dim : dim !== undefined ? bound.get(dim) : undefined;
      if (size === undefined) {
        count = Number.NaN;
        break;
      }
      count *= size;
    }
    if (Number.isNaN(count)) isExact = false;
    else bytes += count * (elementBytes[output.type] ?? 8);
  }
  return { bytes, isExact };
}

/**
 * The generic tensor handler: JSON tensors in, `{"outputs": {name: {shape, data}}}` out.
 * Requests of a batch are stacked along dimension 0 when the model's batch dimension is
 * dynamic and their other dimensions agree; otherwise each request runs on its own.
 */
export function createTensorHandler(): Handler {
  let session: ort.InferenceSession;
  let inputs: Array<{ name: string; type: string; isBatchDynamic: boolean }>;
  let inputSignatures: TensorSignature[];
  let outputSignatures: TensorSignature[];
  let maxTensorBytes = DEFAULT_MAX_TENSOR_BYTES_PER_REQUEST;

  /** Refuses, before run(), a request whose tensors would take more than maxTensorBytesPerRequest. */
  const checkTensorBytes = (parsed: Parsed): void => {
    const { bytes, isExact } = tensorBytesOf(parsed, inputSignatures, outputSignatures);
    if (bytes <= maxTensorBytes) return;
    throw createHandlerError.MARINA_ERR_TENSOR_TOO_LARGE(
      `this request's tensors need ${bytes} bytes${isExact ? '' : ' or more'} (inputs and the outputs their shapes determine), over the model's limit of ${maxTensorBytes} bytes (model-config.yaml handler.maxTensorBytesPerRequest); send fewer rows or smaller dimensions`,
      { details: { tensorBytes: bytes, maxTensorBytesPerRequest: maxTensorBytes } },
    );
  };

  const run = async (requests: Parsed[]): Promise<TensorHandlerResponse[]> => {
    const rowsPer = requests.map((r) => r.get(inputs[0]!.name)!.shape[0]!);
    const feeds: Record<string, ort.Tensor> = {};
    for (const input of inputs) {
      const parts = requests.map((r) => r.get(input.name)!);
      const make = typedArrays[input.type];
      if (!make) throw invalid(`input '${input.name}' has type ${input.type}, which JSON tensors cannot carry`);
      const shape = [parts.reduce((a, p) => a + p.shape[0]!, 0), ...parts[0]!.shape.slice(1)];
      feeds[input.name] = new ort.Tensor(input.type as 'float32', make(parts.flatMap((p) => p.data)) as Float32Array, shape);
    }
    const result = await session.run(feeds);
    const total = rowsPer.reduce((a, b) => a + b, 0);
    const answers: TensorHandlerResponse[] = requests.map(() => ({ outputs: {} }));
    for (const name of session.outputNames) {
      const tensor = result[name]!;
      if (requests.length > 1 && tensor.dims[0] !== total) {
        throw createHandlerError.MARINA_ERR_MODEL_OUTPUT_UNEXPECTED(`output '${name}' has ${tensor.dims[0]} rows for ${total} input rows; the tensor handler needs outputs batched along dimension 0`);
      }
      let start = 0;
      requests.forEach((_, i) => {
        const rows = requests.length > 1 ? rowsPer[i]! : tensor.dims[0] ?? 1;
        answers[i]!.outputs[name] = { shape: [rows, ...tensor.dims.slice(1)], data: toPlain(tensor, start, start + rows) };
        start += rows;
      });
    }
    return answers;
  };

  return {
    async initialize(context: HandlerContext) {
      session = await context.createSession();
      inputSignatures = session.inputMetadata.map(signatureOf);
      outputSignatures = session.outputMetadata.map(signatureOf);
      const configured = (context.modelYamlConfig?.['handler'] as Record<string, unknown> | undefined)?.['maxTensorBytesPerRequest'];
      if (configured !== undefined) {
        if (typeof configured !== 'number' || !Number.isInteger(configured) || configured <= 0) {
          throw createHandlerError.MARINA_ERR_HANDLER_CONFIG_INVALID(`model-config.yaml handler.maxTensorBytesPerRequest must be a positive integer (bytes), got ${JSON.stringify(configured)}`);
        }
        maxTensorBytes = configured;
      }
      inputs = session.inputMetadata.map((m) => ({
        name: m.name,
        type: m.isTensor ? m.type : 'non-tensor',
        isBatchDynamic: m.isTensor && m.shape.length > 0 && isDynamicDim(m.shape[0]),
      }));
    },

    async handle(rows: RequestRow[]) {
      const names = inputs.map((i) => i.name);
      const results: Array<TensorHandlerResponse | MarinaError> = new Array(rows.length);
      const good: Array<{ index: number; parsed: Parsed }> = [];
      rows.forEach((row, index) => {
        try {
          const parsed = parseTensorRequest(rowPayload(row), names);
          checkTensorBytes(parsed);
          good.push({ index, parsed });
        } catch (error) {
          results[index] = isMarinaError(error) ? error : invalid(String(error));
        }
      });
      const key = (p: Parsed) => names.map((n) => p.get(n)!.shape.slice(1).join('x')).join('|');
      const canStack = good.length > 1 && inputs.every((i) => i.isBatchDynamic) && good.every((g) => key(g.parsed) === key(good[0]!.parsed));
      if (canStack) {
        const answers = await run(good.map((g) => g.parsed));
        good.forEach((g, i) => (results[g.index] = answers[i]!));
      } else {
        for (const g of good) {
          try {
            results[g.index] = (await run([g.parsed]))[0]!;
          } catch (error) {
            // A shape the model rejects is the caller's mistake, and only this request's.
            results[g.index] = isMarinaError(error) ? error : invalid(`the model rejected the input: ${(error as Error).message}`);
          }
        }
      }
      return results;
    },
  };
}
