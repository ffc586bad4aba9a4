/**
 * The one place below the protocol adapters (TorchServe REST and gRPC, OIP REST and gRPC):
 * health and readiness, server and model metadata (read from the ONNX signature), strict input
 * checks before a job is queued, the response size bound, and inference through the registry's
 * one predict path. Adapters only translate their wire form into an InferRequest and the
 * InferResponse back; they never talk to the registry for inference themselves.
 */
import { assertJsonDepth } from './json-depth.ts';
import {
  assertResponseSize,
  checkRawSize,
  checkTensorAgainstSignature,
  createHandlerError,
  encodeBytesElements,
  INFERENCE_HEADER_CONTENT_LENGTH,
  isPlainFloatTensorBody,
  isV2Datatype,
  joinBinaryBody,
  jsonToRaw,
  parseTensorRequest,
  selectedOutputNames,
  splitBinaryBody,
  v2DatatypeOf,
  type ModelSignature,
  type RawTensor,
  type V2Datatype,
} from '@marina/handlers';
import { createServeError } from '../errors.ts';
import { MARINA_VERSION } from '../version.ts';
import type { JobResult } from '../scheduling/job.ts';
import type {
  CompletePredictOptions,
  ModelRegistry,
  PredictOptions,
  PredictResult,
} from '../registry/model-registry.ts';
import type { ModelVersion, ResidencyState } from '../scheduling/model-version.ts';
import { requestSchedulingOf, type RequestScheduling } from '../scheduling/queue-policy.ts';
import type { Tracing } from '../tracing/tracing.ts';

/**
 * A request's priority and timeout, from the one place every protocol passes through: its
 * headers (REST headers, gRPC metadata), OIP `parameters`, and what the transport knows (a gRPC
 * deadline). undefined when it names none (the model's defaults apply).
 * @throws MARINA_ERR_PRIORITY_INVALID, MARINA_ERR_TIMEOUT_INVALID (400)
 */
function schedulingOf(
  headers: Readonly<Record<string, string>> | undefined,
  parameters: Readonly<Record<string, unknown>> | undefined,
  transport: RequestScheduling | undefined,
): RequestScheduling | undefined {
  const asked = requestSchedulingOf(headers, parameters);
  if (transport === undefined) return asked;
  return asked === undefined ? transport : { ...asked, ...transport };
}

/** A checked JSON tensor body up to this size reaches the worker as it came (see #encodeTorchServeInput). */
const SMALL_JSON_BODY_BYTES = 64 * 1024;

export const SERVER_NAME = 'marina';
/** The response header (and gRPC metadata key) that says which model version answered. */
export const MODEL_VERSION_HEADER = 'x-marina-model-version';
/** Open Inference Protocol extensions Marina implements. */
const SERVER_EXTENSIONS = ['binary_tensor_data', 'model_repository'] as const;

/** A protocol-neutral inference request (KServe's InferRequest): tensors as raw bytes. */
export interface InferRequest {
  modelName: string;
  /** undefined = the default version. */
  modelVersion?: string;
  /** The client's request id, echoed back. */
  id?: string;
  inputs: RawTensor[];
  /** Outputs to return, in order; undefined = all. */
  outputs?: Array<{ name: string }>;
  parameters?: Record<string, unknown>;
  /** Server request id (logs, x-request-id). */
  requestId: string;
  /** Forwarded to the handler (lower-case names); `x-marina-priority` and `x-marina-timeout-ms` are read here. */
  headers?: Record<string, string>;
  arrivedAt?: number;
  /** What the transport knows of the request's time (a gRPC deadline); merged with its headers and parameters. */
  scheduling?: RequestScheduling;
  /** See PredictOptions.onClientGone. */
  onClientGone?: PredictOptions['onClientGone'];
  /** See PredictOptions.trace. */
  trace?: PredictOptions['trace'];
}

/**
 * InferRequest with every field named (undefined where a request has none): the form the adapters
 * build, as one literal, so every request's object has one V8 map (see CompletePredictOptions).
 */
export type CompleteInferRequest = { [K in keyof Required<InferRequest>]: InferRequest[K] };

export interface InferResponse {
  modelName: string;
  modelVersion: string;
  id: string;
  outputs: RawTensor[];
  /** The priority level the request waited at, for a model with more than one. */
  priority?: number;
}

export interface TensorMetadata {
  name: string;
  datatype: V2Datatype | string;
  /** -1 for a dynamic dimension. */
  shape: number[];
}

export interface ModelMetadata {
  name: string;
  versions: string[];
  platform: string;
  inputs: TensorMetadata[];
  outputs: TensorMetadata[];
  /**
   * Marina's additions, on REST only (gRPC's ModelMetadataResponse has fixed fields): the answering
   * version's place in memory, as describe shows it (see docs/guides/many-models.md).
   */
  state: ResidencyState;
  residentBytes: number;
  lastUsed: string | null;
  pinned: boolean;
}

/**
 * One entry of the model repository extension's index (Triton's `$repository_index_response`):
 * `state` is Triton's READY, LOADING, UNLOADING or UNAVAILABLE; `reason` says why a version is not READY.
 */
export interface RepositoryIndexEntry {
  name: string;
  version: string;
  state: 'READY' | 'LOADING' | 'UNLOADING' | 'UNAVAILABLE';
  reason: string;
}

/** Triton's state for a version's life state (and, for a description without one, its workers). */
function repositoryStateOf(description: {
  state?: 'registered' | 'loading' | 'resident' | 'unloading';
  workers: Array<{ status: string }>;
}): Pick<RepositoryIndexEntry, 'state' | 'reason'> {
  const hasWorker = description.workers.some((w) => w.status === 'READY' || w.status === 'BUSY');
  const state = description.state ?? (hasWorker ? 'resident' : 'registered');
  if (state === 'resident') return { state: 'READY', reason: '' };
  if (state === 'loading') return { state: 'LOADING', reason: 'loading' };
  if (state === 'unloading') return { state: 'UNLOADING', reason: 'unloading' };
  return { state: 'UNAVAILABLE', reason: 'unloaded: registered, not resident; a request or load loads it' };
}

export interface DataPlaneOptions {
  registry: ModelRegistry;
  /** max_response_size, bytes. */
  maxResponseBytes: number;
  /** OpenTelemetry tracing, when on: the gRPC adapters start their request spans from it. */
  tracing?: Tracing;
}

/** Handlers that feed the request's tensors to the model as they are, so the signature check applies. */
const TENSOR_HANDLERS = new Set(['tensor', 'base_handler', 'image_classifier']);

function tensorMetadata(signature: ModelSignature['inputs']): TensorMetadata[] {
  return signature.map((t) => ({
    name: t.name,
    datatype: v2DatatypeOf(t.type) ?? t.type,
    shape: t.shape.map((d) => (typeof d === 'number' && d >= 0 ? d : -1)),
  }));
}
/**
 * A small JSON body's value, parsed once for both checks of admission: the one-walk check of the
 * common body (isPlainFloatTensorBody) and, when that is not sure, parseTensorRequest. The payload
 * itself when it is not JSON (parseTensorRequest then says why) or when its value is a string
 * (parseTensorRequest would read a string as JSON text again). The worker parses the body again to run it.
 */
function jsonValueOf(payload: Buffer | string): unknown {
  let value: unknown;
  try {
    value = JSON.parse(typeof payload === 'string' ? payload : payload.toString('utf8'));
  } catch {
    return payload;
  }
  return typeof value === 'string' ? payload : value;
}

export class DataPlane {
  readonly #registry: ModelRegistry;
  readonly #maxResponseBytes: number;

  /** OpenTelemetry tracing, when on; undefined when off. */
  readonly tracing: Tracing | undefined;

  constructor(options: DataPlaneOptions) {
    this.#registry = options.registry;
    this.#maxResponseBytes = options.maxResponseBytes;
    this.tracing = options.tracing;
  }

  get maxResponseBytes(): number {
    return this.#maxResponseBytes;
  }

  serverMetadata(): { name: string; version: string; extensions: string[] } {
    return { name: SERVER_NAME, version: MARINA_VERSION, extensions: [...SERVER_EXTENSIONS] };
  }

  /** The process serves requests (false once closing). */
  isLive(): boolean {
    return !this.#registry.isClosing;
  }

  /** TorchServe's /ping rule: every model's default version has its minimum of workers up. */
  isReady(): boolean {
    return this.isLive() && this.#registry.isHealthy();
  }

  /**
   * Whether the version has a worker ready.
   * @throws MARINA_ERR_MODEL_NOT_FOUND, MARINA_ERR_MODEL_VERSION_NOT_FOUND
   */
  isModelReady(modelName: string, modelVersion?: string): boolean {
    const [description] = this.#registry.describe(modelName, modelVersion);
    return this.isLive() && (description?.workers.some((w) => w.status === 'READY' || w.status === 'BUSY') ?? false);
  }

  /**
   * The model's signature: the ONNX graph's inputs and outputs (empty for a custom handler's
   * archive without an ONNX serializedFile), read when the version was registered.
   * @throws MARINA_ERR_MODEL_NOT_FOUND, MARINA_ERR_MODEL_VERSION_NOT_FOUND, MARINA_ERR_MODEL_SIGNATURE_UNREADABLE
   */
  signature(modelName: string, modelVersion?: string): { version: ModelVersion; signature: ModelSignature } {
    return this.#signatureOf(this.#registry.getVersion(modelName, modelVersion));
  }

  /**
   * The version that serves a request, chosen once (the registry's resolveVersion: the one named,
   * else the traffic policy's pick, else the default), with its signature.
   */
  #route(
    modelName: string,
    modelVersion: string | undefined,
    headers: Record<string, string> | undefined,
  ): { version: ModelVersion; signature: ModelSignature } {
    return this.#signatureOf(this.#registry.resolveVersion(modelName, modelVersion, headers));
  }

  #signatureOf(version: ModelVersion): { version: ModelVersion; signature: ModelSignature } {
    const read = version.signature;
    if ('error' in read) throw read.error;
    return { version, signature: read.signature };
  }

  /** The names of the registered models, in registration order. */
  modelNames(): string[] {
    return this.#registry.list().map((m) => m.modelName);
  }

  /**
   * Explanations: Marina's handlers have no explain(); TorchServe answers a handler without one
   * with 503 "Prediction failed" (its BaseHandler has no get_insights), and so does Marina.
   * @throws MARINA_ERR_EXPLAIN_NOT_SUPPORTED, or not found (404).
   */
  explain(modelName: string, modelVersion?: string): never {
    const version = this.#registry.getVersion(modelName, modelVersion);
    throw createServeError.MARINA_ERR_EXPLAIN_NOT_SUPPORTED(
      `Prediction failed: the handler '${version.handler}' of model ${modelName} version ${version.modelVersion} has no explain; Marina's handlers do not implement explanations (use /predictions)`,
    );
  }

  /** OIP model metadata; `versions` lists every version when none was asked for. */
  modelMetadata(modelName: string, modelVersion?: string): ModelMetadata {
    const { version, signature } = this.signature(modelName, modelVersion);
    const versions =
      modelVersion === undefined
        ? (this.#registry.list().find((m) => m.modelName === modelName)?.versions ?? [version.modelVersion])
        : [version.modelVersion];
    return {
      name: version.modelName,
      versions,
      platform: signature.inputs.length > 0 ? 'onnxruntime_onnx' : `marina_${version.handler}`,
      inputs: tensorMetadata(signature.inputs),
      outputs: tensorMetadata(signature.outputs),
      ...version.residency(),
    };
  }

  /**
   * The model repository extension's index: every registered version with its state, sorted by
   * name; `ready` keeps only the READY ones (Triton's and KServe's `ready` filter).
   */
  repositoryIndex(options: { ready?: boolean } = {}): RepositoryIndexEntry[] {
    const entries: RepositoryIndexEntry[] = [];
    for (const model of this.#registry.list()) {
      let descriptions: ReturnType<ModelRegistry['describe']>;
      try {
        descriptions = this.#registry.describe(model.modelName, 'all');
      } catch {
        continue; // unregistered between list() and describe()
      }
      for (const d of descriptions) {
        const entry = { name: d.modelName, version: d.modelVersion, ...repositoryStateOf(d) };
        if (!options.ready || entry.state === 'READY') entries.push(entry);
      }
    }
    return entries;
  }

  /**
   * The repository extension's load: makes the model's default version (or the version named)
   * resident; answers at once when it is.
   * @throws MARINA_ERR_MODEL_NOT_FOUND, MARINA_ERR_MODEL_VERSION_NOT_FOUND (404), MARINA_ERR_MEMORY_BUDGET_FULL (503), load failures.
   */
  async loadModel(modelName: string, modelVersion?: string): Promise<void> {
    this.#registry.getVersion(modelName, modelVersion);
    await this.#registry.load(modelName, modelVersion, { reason: 'api' });
  }

  /**
   * The repository extension's unload: back to registered (no worker, no session); the model stays
   * known, and a later request or load loads it again.
   * @throws MARINA_ERR_MODEL_NOT_FOUND, MARINA_ERR_MODEL_VERSION_NOT_FOUND (404).
   */
  async unloadModel(modelName: string, modelVersion?: string): Promise<void> {
    this.#registry.getVersion(modelName, modelVersion);
    await this.#registry.unload(modelName, modelVersion);
  }

  /**
   * Admission: every input named once, present, of the model's datatype and shape; outputs known.
   * Runs before anything is queued, for built-in tensor handlers (custom handlers read their own input).
   * @throws MARINA_ERR_TENSOR_INPUT_INVALID, MARINA_ERR_TENSOR_OUTPUT_UNKNOWN (400)
   */
  #admit(request: InferRequest, version: ModelVersion, signature: ModelSignature): void {
    const seen = new Set<string>();
    for (const t of request.inputs) {
      if (seen.has(t.name))
        throw createHandlerError.MARINA_ERR_TENSOR_INPUT_INVALID(`input '${t.name}' is given twice`);
      seen.add(t.name);
      checkRawSize(t, `input '${t.name}'`);
    }
    if (!TENSOR_HANDLERS.has(version.handler)) return;
    const names = signature.inputs.map((i) => i.name);
    for (const t of request.inputs) {
      const input = signature.inputs.find((i) => i.name === t.name);
      if (!input)
        throw createHandlerError.MARINA_ERR_TENSOR_INPUT_INVALID(
          `unknown input '${t.name}'; model '${version.modelName}' has inputs: ${names.join(', ')}`,
        );
      checkTensorAgainstSignature(t, input);
    }
    for (const name of names)
      if (!seen.has(name))
        throw createHandlerError.MARINA_ERR_TENSOR_INPUT_INVALID(
          `input '${name}' is missing; model '${version.modelName}' has inputs: ${names.join(', ')}`,
        );
    const outputNames = signature.outputs.map((o) => o.name);
    for (const o of request.outputs ?? []) {
      if (!outputNames.includes(o.name))
        throw createHandlerError.MARINA_ERR_TENSOR_OUTPUT_UNKNOWN(
          `unknown output '${o.name}'; model '${version.modelName}' has outputs: ${outputNames.join(', ')}`,
        );
    }
  }

  /**
   * Admission for the TorchServe routes (REST `/predictions`, gRPC Predictions): a built-in tensor
   * handler's input (JSON, or the v2 binary layout) is parsed and checked against the signature
   * here, so a bad one is refused before it is queued, and travels on in the v2 binary layout so
   * the worker does not parse it again (the answer keeps the form the client used). Other handlers'
   * inputs pass as they came.
   * @throws MARINA_ERR_TENSOR_INPUT_INVALID, MARINA_ERR_TENSOR_OUTPUT_UNKNOWN, MARINA_ERR_JSON_TOO_DEEP (400), not found (404).
   */
  admitTorchServeInput(request: PredictOptions): PredictOptions {
    const { version, signature } = this.#route(request.modelName, request.modelVersion, request.headers);
    const scheduling = schedulingOf(request.headers, undefined, request.scheduling);
    // From here on the version is fixed: the predict path must not pick again. Every field is
    // named, not spread: see CompletePredictOptions.
    const options: CompletePredictOptions = {
      modelName: request.modelName,
      modelVersion: version.modelVersion,
      requestedVersion: request.requestedVersion ?? request.modelVersion ?? 'default',
      requestId: request.requestId,
      input: request.input,
      headers: request.headers,
      arrivedAt: request.arrivedAt,
      bodyDecoding: request.bodyDecoding,
      scheduling,
      onClientGone: request.onClientGone,
      trace: request.trace,
    };
    // Any handler: a JSON body is parsed in the worker, and a custom handler walks what it gets.
    const body = options.input.body;
    if (options.bodyDecoding === 'json' && (Buffer.isBuffer(body) || typeof body === 'string'))
      assertJsonDepth(body, 'the JSON body');
    if (version.handler !== 'tensor' && version.handler !== 'base_handler') return options;
    try {
      return this.#encodeTorchServeInput(options, signature);
    } catch (error) {
      this.#recordRefused(version, options, error);
      throw error;
    }
  }

  /**
   * A request refused by admission never reaches the registry's predict, which counts requests
   * for the metrics; it is reported on the registry's `request` event the same way (queue and
   * inference time 0), so ts_inference_requests_total and the status classes still see it.
   */
  #recordRefused(
    version: ModelVersion,
    options: { modelVersion?: string; requestedVersion?: string; arrivedAt?: number },
    error: unknown,
  ): void {
    const totalMs = performance.now() - (options.arrivedAt ?? performance.now());
    this.#registry.events.emit('request', {
      modelName: version.modelName,
      requestedVersion: options.requestedVersion ?? options.modelVersion ?? 'default',
      modelVersion: version.modelVersion,
      statusCode: (error as { statusCode?: number }).statusCode ?? 500,
      queueMs: 0,
      inferenceMs: 0,
      totalMs,
    });
  }

  /**
   * Counts a request an adapter refused before it reached `infer` (a body that does not decode), as
   * `#recordRefused` does for admission, so the metrics see every request a model was sent. A model
   * that does not exist is not counted (as an unknown model's request never is).
   */
  recordUndecodable(modelName: string, modelVersion: string | undefined, arrivedAt: number, error: unknown): void {
    let version: ModelVersion;
    try {
      version = this.#registry.getVersion(modelName, modelVersion);
    } catch {
      return;
    }
    this.#recordRefused(version, { modelVersion, arrivedAt }, error);
  }

  #encodeTorchServeInput(options: PredictOptions, signature: ModelSignature): PredictOptions {
    const keys = Object.keys(options.input);
    const payload = options.input.data ?? options.input.body;
    if (keys.length !== 1 || (!Buffer.isBuffer(payload) && typeof payload !== 'string')) return options;
    const headerText = options.headers?.[INFERENCE_HEADER_CONTENT_LENGTH];
    const headerLength = headerText === undefined ? undefined : Number(headerText);
    if (headerLength !== undefined && !Number.isInteger(headerLength))
      throw createHandlerError.MARINA_ERR_TENSOR_INPUT_INVALID(
        `Inference-Header-Content-Length must be a non-negative integer, got '${headerText}'`,
      );
    if (headerLength === undefined) assertJsonDepth(payload, 'the JSON input');
    else if (Buffer.isBuffer(payload))
      assertJsonDepth(payload.subarray(0, headerLength), 'the JSON header of the input');
    const value =
      headerLength === undefined && payload.length <= SMALL_JSON_BODY_BYTES ? jsonValueOf(payload) : payload;
    if (value !== payload && isPlainFloatTensorBody(value, signature.inputs)) return options;
    const parsed = parseTensorRequest(value, signature.inputs, { headerLength });
    selectedOutputNames(
      parsed,
      signature.outputs.map((o) => o.name),
    );
    // Checked; a small JSON body then goes on as it came: the worker parses it again in
    // microseconds, which costs the HTTP thread (the tiny model's bottleneck) less than re-encoding
    // it here. A larger one travels re-encoded, so the worker does not parse it twice.
    if (parsed.format === 'json' && payload.length <= SMALL_JSON_BODY_BYTES) return options;
    const tensors = signature.inputs.map((i) => parsed.tensors.get(i.name)!);
    const header = {
      parameters: {
        binary_data_output: parsed.isBinaryOutputDefault,
        ...(parsed.format === 'json' ? { marina_response_format: 'torchserve_json' } : {}),
      },
      inputs: tensors.map((t) => ({
        name: t.name,
        datatype: t.datatype,
        shape: t.shape,
        parameters: { binary_data_size: t.raw.length },
      })),
      ...(parsed.outputs
        ? {
            outputs: parsed.outputs.map((o) => ({
              name: o.name,
              ...(o.isBinary === undefined ? {} : { parameters: { binary_data: o.isBinary } }),
            })),
          }
        : {}),
    };
    const { body, headerLength: length } = joinBinaryBody(
      header,
      tensors.map((t) => t.raw),
    );
    const encoded: CompletePredictOptions = {
      modelName: options.modelName,
      modelVersion: options.modelVersion,
      requestedVersion: options.requestedVersion,
      requestId: options.requestId,
      input: { body },
      headers: { ...options.headers, [INFERENCE_HEADER_CONTENT_LENGTH]: String(length) },
      arrivedAt: options.arrivedAt,
      // The body is the v2 binary layout now, which the worker reads as it is.
      bodyDecoding: undefined,
      scheduling: options.scheduling,
      onClientGone: options.onClientGone,
      trace: options.trace,
    };
    return encoded;
  }

  /**
   * A TorchServe-style request through admission (admitTorchServeInput) and the registry's
   * predict path, with the answer bounded by max_response_size.
   * @throws as ModelRegistry.predict, and MARINA_ERR_RESPONSE_TOO_LARGE.
   */
  async predict(options: PredictOptions): Promise<PredictResult> {
    const result = await this.#registry.predict(this.admitTorchServeInput(options));
    const { text } = result;
    assertResponseSize(text === undefined ? result.body.length : Buffer.byteLength(text), this.#maxResponseBytes);
    return result;
  }

  /**
   * Runs one inference through the registry's predict path (same queue and batching as every
   * other protocol). The job carries the tensors in the v2 binary layout; the handler answers in it.
   * @throws not found (404), input errors (400), queue full (503), MARINA_ERR_RESPONSE_TOO_LARGE, handler errors.
   */
  async infer(request: InferRequest): Promise<InferResponse> {
    const arrivedAt = request.arrivedAt ?? performance.now();
    const { version, signature } = this.#route(request.modelName, request.modelVersion, request.headers);
    try {
      this.#admit(request, version, signature);
    } catch (error) {
      this.#recordRefused(version, { modelVersion: request.modelVersion, arrivedAt }, error);
      throw error;
    }
    // One shape for every request (a leading spread followed by more fields would give each its own
    // map); JSON leaves out an `outputs` that is undefined.
    const header = {
      parameters: request.parameters
        ? { ...request.parameters, binary_data_output: true }
        : { binary_data_output: true },
      inputs: request.inputs.map((t) => ({
        name: t.name,
        datatype: t.datatype,
        shape: t.shape,
        parameters: { binary_data_size: t.raw.length },
      })),
      outputs: request.outputs?.map((o) => ({ name: o.name, parameters: { binary_data: true } })),
    };
    const { body, headerLength } = joinBinaryBody(
      header,
      request.inputs.map((t) => t.raw),
    );
    const scheduling = schedulingOf(request.headers, request.parameters, request.scheduling);
    const options: CompletePredictOptions = {
      modelName: request.modelName,
      modelVersion: version.modelVersion,
      requestedVersion: request.modelVersion ?? 'default',
      requestId: request.requestId,
      input: { body },
      headers: {
        ...request.headers,
        'content-type': 'application/octet-stream',
        [INFERENCE_HEADER_CONTENT_LENGTH]: String(headerLength),
      },
      arrivedAt,
      bodyDecoding: undefined,
      scheduling,
      onClientGone: request.onClientGone,
      trace: request.trace,
    };
    const result = await this.#registry.predict(options);
    assertResponseSize(result.body.length, this.#maxResponseBytes);
    return {
      modelName: version.modelName,
      modelVersion: version.modelVersion,
      id: request.id ?? request.requestId,
      outputs: this.#outputsOf(result),
      ...(result.timings.priority !== undefined ? { priority: result.timings.priority } : {}),
    };
  }

  /** The handler's answer as tensors: the v2 binary layout, or (a custom handler's own answer) one BYTES tensor `output` holding its body. */
  #outputsOf(result: JobResult): RawTensor[] {
    const headerLength = result.headers[INFERENCE_HEADER_CONTENT_LENGTH];
    if (headerLength === undefined) {
      return [{ name: 'output', datatype: 'BYTES', shape: [1], raw: encodeBytesElements([result.body]) }];
    }
    const { header, binaries } = splitBinaryBody(result.body, Number(headerLength), 'outputs');
    const list = Array.isArray(header.outputs)
      ? (header.outputs as Array<{ name: string; datatype: unknown; shape: number[]; data?: unknown }>)
      : [];
    return list.map((o, i) => {
      if (!isV2Datatype(o.datatype))
        throw createServeError.MARINA_ERR_HANDLER_OUTPUT_INVALID(
          `the handler answered output '${o.name}' with datatype ${JSON.stringify(o.datatype)}`,
        );
      return {
        name: o.name,
        datatype: o.datatype,
        shape: o.shape,
        raw: binaries.get(i) ?? jsonToRaw(o.datatype, o.data, o.shape, `output '${o.name}'`),
      };
    });
  }
}
