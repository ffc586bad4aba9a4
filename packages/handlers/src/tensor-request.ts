/**
 * One tensor request as the tensor handler (and image_classifier's raw-tensor path) reads it,
 * checked strictly against the model's signature, and the answer's two wire forms: TorchServe's
 * JSON (`{"outputs": {name: {shape, data}}}`) and the Open Inference Protocol's binary layout.
 */
import { FP32_MAX } from './v2-tensors.ts';
import type * as ort from 'onnxruntime-node';
import { createHandlerError } from './errors.ts';
import { isDynamicDim } from './signature-checks.ts';
import type { HandlerContext, TensorSignature } from './types.ts';
import {
  answerBytesAtLeast,
  assertResponseSize,
  checkRawSize,
  isV2Datatype,
  joinBinaryBody,
  jsonToRaw,
  ortToRaw,
  rawToJson,
  splitBinaryBody,
  v2DatatypeOf,
  type RawTensor,
  type V2Datatype,
} from './v2-tensors.ts';

/** The request header that marks a body in the binary tensor data extension's layout. */
export const INFERENCE_HEADER_CONTENT_LENGTH = 'inference-header-content-length';

export interface RequestedOutput {
  name: string;
  /** Answer this output as binary data (binary requests only); undefined = the request's default. */
  isBinary?: boolean;
}

export interface ParsedTensorRequest {
  tensors: Map<string, RawTensor>;
  /** The outputs asked for, in order; undefined = every output of the model. */
  outputs: RequestedOutput[] | undefined;
  /** 'json': TorchServe's JSON answer; 'v2-binary': the v2 layout (the request came in it). */
  format: 'json' | 'v2-binary';
  /** For 'v2-binary': outputs are binary unless they say otherwise (`binary_data_output`, default true). */
  isBinaryOutputDefault: boolean;
}

function invalid(message: string) {
  return createHandlerError.MARINA_ERR_TENSOR_INPUT_INVALID(message);
}

function shapeText(shape: ReadonlyArray<number | string>): string {
  return `[${shape.map((d) => (isDynamicDim(d) ? -1 : d)).join(', ')}]`;
}

/**
 * Checks one tensor against the model's input: datatype equal, same rank, fixed dimensions equal.
 * The one strict check every protocol applies (the server calls it before a job is queued).
 * @throws MARINA_ERR_TENSOR_INPUT_INVALID naming the input, what came and what the model expects.
 */
export function checkTensorAgainstSignature(
  tensor: { name: string; datatype: string; shape: readonly number[] },
  input: TensorSignature,
): void {
  const expected = v2DatatypeOf(input.type);
  if (!expected) throw invalid(`input '${input.name}' has type ${input.type}, which tensor requests cannot carry`);
  if (tensor.datatype !== expected) {
    throw invalid(
      `input '${tensor.name}' has datatype ${tensor.datatype}, but the model expects ${expected} with shape ${shapeText(input.shape)}`,
    );
  }
  const ok =
    tensor.shape.length === input.shape.length && input.shape.every((d, i) => isDynamicDim(d) || d === tensor.shape[i]);
  if (!ok) {
    throw invalid(
      `input '${tensor.name}' has shape [${tensor.shape.join(', ')}], but the model expects ${expected} with shape ${shapeText(input.shape)} (-1 = any size)`,
    );
  }
}

function readShape(value: unknown, where: string): number[] {
  if (!Array.isArray(value) || !value.every((d) => Number.isInteger(d) && d >= 0))
    throw invalid(`${where}: 'shape' must be a list of non-negative integers, got ${JSON.stringify(value)}`);
  return value as number[];
}

/** Shape of a nested array (checked to be rectangular). */
function nestedShape(value: unknown, where: string): number[] {
  const shape: number[] = [];
  let probe: unknown = value;
  while (Array.isArray(probe)) {
    shape.push(probe.length);
    probe = probe[0];
  }
  if (Array.isArray(value) && !isRectangular(value, shape, 0)) {
    throw invalid(
      `${where}: the nested array is not rectangular (shape looks like [${shape.join(', ')}] but some rows differ in length or depth)`,
    );
  }
  return shape;
}

/** Every array at depth `depth` has `shape[depth]` items, arrays down to the last dimension and no arrays below it. */
function isRectangular(value: readonly unknown[], shape: readonly number[], depth: number): boolean {
  if (value.length !== shape[depth]) return false;
  const isLast = depth === shape.length - 1;
  for (let i = 0; i < value.length; i++) {
    const item = value[i];
    if (isLast ? Array.isArray(item) : !Array.isArray(item) || !isRectangular(item, shape, depth + 1)) return false;
  }
  return true;
}

/** BOOL accepts 0/1 as well as booleans on the JSON routes (TorchServe clients send numbers). */
function boolValues(data: unknown): unknown {
  return Array.isArray(data) ? data.flat(Infinity).map((v) => (v === 0 ? false : v === 1 ? true : v)) : data;
}

function readOutputs(value: unknown, where: string): RequestedOutput[] | undefined {
  if (value === undefined) return undefined;
  if (!Array.isArray(value))
    throw invalid(`${where}: 'outputs' must be a list of output names or {"name": ...} objects`);
  return value.map((o, i) => {
    if (typeof o === 'string') return { name: o };
    const name = (o as { name?: unknown } | null)?.name;
    if (typeof name !== 'string') throw invalid(`${where}: outputs[${i}] needs a 'name'`);
    const binary = (o as { parameters?: { binary_data?: unknown } }).parameters?.binary_data;
    return binary === undefined ? { name } : { name, isBinary: binary === true };
  });
}

/** The model's input names and signatures by name, built once per signature (this runs for every request). */
const inputIndexes = new WeakMap<TensorSignature[], { names: string[]; byName: Map<string, TensorSignature> }>();

function inputIndexOf(inputs: TensorSignature[]): { names: string[]; byName: Map<string, TensorSignature> } {
  let index = inputIndexes.get(inputs);
  if (!index) {
    index = { names: inputs.map((i) => i.name), byName: new Map(inputs.map((i) => [i.name, i])) };
    inputIndexes.set(inputs, index);
  }
  return index;
}

interface JsonTensorIndex {
  names: string[];
  byName: Map<string, TensorSignature>;
  tensors: Map<string, RawTensor>;
}

/** One named tensor of a JSON body, checked against the model's input of that name, into `index.tensors`. */
function addJsonTensor(index: JsonTensorIndex, name: string, value: unknown, datatype?: unknown): void {
  const { names, byName, tensors } = index;
  const where = `input '${name}'`;
  const input = byName.get(name);
  if (!input) throw invalid(`unknown input '${name}'; the model's inputs are: ${names.join(', ')}`);
  const modelType = v2DatatypeOf(input.type);
  if (!modelType) throw invalid(`${where} has type ${input.type}, which JSON tensors cannot carry`);
  if (datatype !== undefined && !isV2Datatype(datatype))
    throw invalid(
      `${where}: 'datatype' must be one of BOOL, UINT8…UINT64, INT8…INT64, FP16, FP32, FP64, BYTES; got ${JSON.stringify(datatype)}`,
    );
  const type: V2Datatype = (datatype as V2Datatype | undefined) ?? modelType;
  let shape: number[];
  let data: unknown;
  if (Array.isArray(value)) {
    shape = nestedShape(value, where);
    data = value;
  } else if (typeof value === 'number' || typeof value === 'boolean' || typeof value === 'string') {
    shape = [];
    data = [value];
  } else if (value && typeof value === 'object' && 'data' in value) {
    const t = value as { shape?: unknown; data: unknown };
    data = t.data;
    shape =
      t.shape === undefined ? (Array.isArray(t.data) ? nestedShape(t.data, where) : []) : readShape(t.shape, where);
  } else throw invalid(`${where}: expected a nested array, a number, or {"shape": [...], "data": [...]}`);
  const tensor: RawTensor = { name, datatype: type, shape, raw: Buffer.alloc(0) };
  checkTensorAgainstSignature(tensor, input);
  tensor.raw = jsonToRaw(type, type === 'BOOL' ? boolValues(data) : data, shape, where);
  tensors.set(name, tensor);
}

/** A body with one unnamed tensor (`{"data": ...}` or a bare nested array): the model must have one input. */
function addSingle(index: JsonTensorIndex, value: unknown): void {
  const { names } = index;
  if (names.length !== 1)
    throw invalid(
      `the model has ${names.length} inputs (${names.join(', ')}); name them: {"inputs": {"${names[0]}": {"shape": [...], "data": [...]}}}`,
    );
  addJsonTensor(index, names[0]!, value);
}

/**
 * Reads one request into named raw tensors, strictly checked against `inputs` (the model's signature).
 * Accepted bodies:
 * - JSON `{"inputs": {"<name>": {"shape": [...], "data": [...]}}}` (data flat or nested; a bare number for a rank-0 input);
 * - JSON `{"inputs": [{"name", "shape", "datatype", "data"}]}` (KServe v2 style; datatype, when given, must be the model's);
 * - JSON `{"data": <nested array>}` or a bare nested array, for a model with one input;
 * - bytes in the v2 binary layout when `headerLength` (the Inference-Header-Content-Length header) is given.
 * Any JSON form may name the outputs to return: `"outputs": ["name", ...]` or `[{"name": ...}]`.
 * @throws MARINA_ERR_TENSOR_INPUT_INVALID
 */
export function parseTensorRequest(
  payload: unknown,
  inputs: TensorSignature[],
  options: { headerLength?: number } = {},
): ParsedTensorRequest {
  const { names, byName } = inputIndexOf(inputs);
  const tensors = new Map<string, RawTensor>();
  let body = payload;
  if (options.headerLength !== undefined) {
    const bytes = Buffer.isBuffer(body)
      ? body
      : body instanceof Uint8Array
        ? Buffer.from(body.buffer, body.byteOffset, body.byteLength)
        : typeof body === 'string'
          ? Buffer.from(body)
          : Buffer.from(JSON.stringify(body));
    const { header, binaries } = splitBinaryBody(bytes, options.headerLength, 'inputs');
    const list = header.inputs;
    if (!Array.isArray(list))
      throw invalid(`the JSON header needs an 'inputs' list; the model's inputs are: ${names.join(', ')}`);
    list.forEach((entry, i) => {
      const e = entry as { name?: unknown; datatype?: unknown; shape?: unknown; data?: unknown };
      const name = typeof e?.name === 'string' ? e.name : undefined;
      if (name === undefined) throw invalid(`inputs[${i}] needs a 'name'`);
      const where = `input '${name}'`;
      const input = byName.get(name);
      if (!input) throw invalid(`unknown input '${name}'; the model's inputs are: ${names.join(', ')}`);
      if (!isV2Datatype(e.datatype))
        throw invalid(
          `${where}: 'datatype' must be one of BOOL, UINT8…UINT64, INT8…INT64, FP16, FP32, FP64, BYTES; got ${JSON.stringify(e.datatype)}`,
        );
      const shape = readShape(e.shape, where);
      const binary = binaries.get(i);
      const tensor: RawTensor = binary
        ? { name, datatype: e.datatype, shape, raw: binary }
        : {
            name,
            datatype: e.datatype,
            shape,
            raw: jsonToRaw(e.datatype, e.datatype === 'BOOL' ? boolValues(e.data) : e.data, shape, where),
          };
      checkTensorAgainstSignature(tensor, input);
      if (binary) checkRawSize(tensor, where);
      tensors.set(name, tensor);
    });
    for (const name of names)
      if (!tensors.has(name)) throw invalid(`input '${name}' is missing; the model's inputs are: ${names.join(', ')}`);
    const parameters = header.parameters as
      | { binary_data_output?: unknown; marina_response_format?: unknown }
      | undefined;
    // The server re-encodes TorchServe-route JSON it has already checked in this layout; the answer stays JSON.
    const format = parameters?.marina_response_format === 'torchserve_json' ? 'json' : 'v2-binary';
    return {
      tensors,
      outputs: readOutputs(header.outputs, 'the JSON header'),
      format,
      isBinaryOutputDefault: parameters?.binary_data_output !== false,
    };
  }

  if (Buffer.isBuffer(body)) body = body.toString('utf8');
  else if (body instanceof Uint8Array)
    body = Buffer.from(body.buffer, body.byteOffset, body.byteLength).toString('utf8');
  if (typeof body === 'string') {
    try {
      body = JSON.parse(body);
    } catch (error) {
      throw invalid(`the body is not valid JSON: ${(error as Error).message}`);
    }
  }
  let outputs: RequestedOutput[] | undefined;
  const index = { names, byName, tensors };
  if (Array.isArray(body)) addSingle(index, body);
  else if (body && typeof body === 'object' && 'inputs' in body) {
    const list = (body as { inputs: unknown }).inputs;
    if (Array.isArray(list)) {
      list.forEach((i, n) => {
        const e = i as { name?: unknown; datatype?: unknown } | null;
        const name = typeof e?.name === 'string' ? e.name : names.length === 1 ? names[0]! : `#${n}`;
        addJsonTensor(index, name, i, e?.datatype);
      });
    } else if (list && typeof list === 'object')
      for (const name in list) addJsonTensor(index, name, (list as Record<string, unknown>)[name]);
    else throw invalid("'inputs' must be an object of named tensors or a list of {name, shape, datatype, data}");
    outputs = readOutputs((body as { outputs?: unknown }).outputs, 'the body');
  } else if (body && typeof body === 'object' && 'data' in body) {
    addSingle(index, (body as { data: unknown }).data);
    outputs = readOutputs((body as { outputs?: unknown }).outputs, 'the body');
  } else throw invalid('expected {"inputs": {...}}, {"inputs": [...]}, {"data": [...]} or a nested array');
  for (const name of names)
    if (!tensors.has(name)) throw invalid(`input '${name}' is missing; the model's inputs are: ${names.join(', ')}`);
  return { tensors, outputs, format: 'json', isBinaryOutputDefault: false };
}

/**
 * Whether `body` (a parsed JSON value) is the plainest TorchServe tensor request, one that
 * parseTensorRequest accepts as it is: for a model with one FP32 or FP64 input, `{"data": X}`
 * (no other key) or a bare X, where X is a rectangular nested array of numbers with the input's
 * rank and its fixed dimensions, none of them 0. Admission on the HTTP thread checks the common
 * body with this one walk and no allocation; false means "not sure", never "invalid": the caller
 * then runs parseTensorRequest, which accepts or refuses with the exact error. Nothing this
 * accepts is refused by parseTensorRequest (test/plain-json-tensor.test.ts compares the two).
 */
export function isPlainFloatTensorBody(body: unknown, inputs: readonly TensorSignature[]): boolean {
  if (inputs.length !== 1) return false;
  const input = inputs[0]!;
  const datatype = v2DatatypeOf(input.type);
  if ((datatype !== 'FP32' && datatype !== 'FP64') || input.shape.length === 0) return false;
  let data: unknown = body;
  if (!Array.isArray(body)) {
    if (body === null || typeof body !== 'object') return false;
    for (const key in body) if (key !== 'data') return false;
    data = (body as { data?: unknown }).data;
    if (!Array.isArray(data)) return false;
  }
  const lengths: number[] = [];
  return isPlainFloatArray(
    data as unknown[],
    input.shape,
    0,
    lengths,
    datatype === 'FP32' ? FP32_MAX : Number.MAX_VALUE,
  );
}

/** One level of isPlainFloatTensorBody's walk: every array at `depth` has the same length (`lengths[depth]`, the first one seen), a fixed dimension's size, and holds arrays down to the last dimension, numbers there. */
function isPlainFloatArray(
  array: unknown[],
  shape: ReadonlyArray<number | string>,
  depth: number,
  lengths: number[],
  maxAbs: number,
): boolean {
  const n = array.length;
  if (n === 0) return false;
  const seen = lengths[depth];
  if (seen === undefined) {
    const dim = shape[depth];
    if (!isDynamicDim(dim) && dim !== n) return false;
    lengths[depth] = n;
  } else if (seen !== n) return false;
  if (depth === shape.length - 1) {
    // A value the datatype cannot hold is not plain: parseTensorRequest then refuses it by name.
    for (let i = 0; i < n; i++) {
      const value = array[i];
      if (typeof value !== 'number' || !(Math.abs(value) <= maxAbs)) return false;
    }
    return true;
  }
  for (let i = 0; i < n; i++) {
    const item = array[i];
    if (!Array.isArray(item) || !isPlainFloatArray(item, shape, depth + 1, lengths, maxAbs)) return false;
  }
  return true;
}

/**
 * The output names to fetch for a request (all when it names none).
 * @throws MARINA_ERR_TENSOR_OUTPUT_UNKNOWN for a name the model does not have.
 */
export function selectedOutputNames(request: ParsedTensorRequest, outputNames: readonly string[]): string[] {
  if (!request.outputs) return [...outputNames];
  for (const o of request.outputs) {
    if (!outputNames.includes(o.name))
      throw createHandlerError.MARINA_ERR_TENSOR_OUTPUT_UNKNOWN(
        `unknown output '${o.name}'; the model's outputs are: ${outputNames.join(', ')}`,
      );
  }
  return request.outputs.map((o) => o.name);
}

/**
 * Whether a binary request's output is answered as binary data (its own `binary_data`, else the
 * request's default); a JSON request's never is. A module function, not a closure per answer: a
 * named closure costs a `name` definition each time it is made where the sources run through tsx.
 */
function isBinaryOutput(request: ParsedTensorRequest, name: string): boolean {
  if (request.format === 'json') return false;
  return request.outputs?.find((o) => o.name === name)?.isBinary ?? request.isBinaryOutputDefault;
}

/**
 * Builds one request's answer from its rows of the outputs: TorchServe's JSON object, or a
 * Buffer in the v2 binary layout (with the response headers set through `context`). An answer
 * that cannot fit `context.maxResponseBytes` is returned as a MARINA_ERR_RESPONSE_TOO_LARGE error
 * (for the row's place), decided before any JSON is built.
 */
export function tensorAnswer(options: {
  request: ParsedTensorRequest;
  names: string[];
  outputs: Record<string, ort.Tensor>;
  rows: { start: number; end: number } | undefined;
  context: HandlerContext;
  index: number;
}): unknown {
  const { request, names, outputs, rows, context, index } = options;
  const raws = names.map((name) => ortToRaw(name, outputs[name]!, rows));
  // An answer that cannot fit max_response_size is refused here, before its JSON is built; the
  // error in the row's place fails this request only, never the others of its batch.
  try {
    // TorchServe JSON is pretty-printed by the server (10 bytes per value at least); JSON inside the binary layout is compact.
    const jsonBytesPerElement = request.format === 'json' ? 10 : 2;
    assertResponseSize(
      answerBytesAtLeast(
        raws.map((t) => ({ shape: t.shape, raw: t.raw, isBinary: isBinaryOutput(request, t.name) })),
        jsonBytesPerElement,
      ),
      context.maxResponseBytes,
      true,
    );
  } catch (error) {
    return error;
  }
  if (request.format === 'json') {
    const out: Record<string, { shape: number[]; data: unknown[] }> = {};
    for (const t of raws) out[t.name] = { shape: t.shape, data: rawToJson(t.datatype, t.raw) };
    return { outputs: out };
  }
  const binaries: Buffer[] = [];
  const list = raws.map((t) => {
    if (!isBinaryOutput(request, t.name))
      return { name: t.name, datatype: t.datatype, shape: t.shape, data: rawToJson(t.datatype, t.raw) };
    binaries.push(t.raw);
    return { name: t.name, datatype: t.datatype, shape: t.shape, parameters: { binary_data_size: t.raw.length } };
  });
  const { body, headerLength } = joinBinaryBody({ outputs: list }, binaries);
  context.setResponseContentType(index, 'application/octet-stream');
  context.setResponseHeader(index, INFERENCE_HEADER_CONTENT_LENGTH, String(headerLength));
  return body;
}

/** The Inference-Header-Content-Length of a row, when its body is in the v2 binary layout. */
export function binaryHeaderLength(context: HandlerContext, index: number): number | undefined {
  const value = context.getRequestHeader(index, INFERENCE_HEADER_CONTENT_LENGTH);
  if (value === undefined) return undefined;
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0)
    throw invalid(`Inference-Header-Content-Length must be a non-negative integer, got '${value}'`);
  return n;
}
