/**
 * The Open Inference Protocol (KServe v2) over REST, on the inference listener: health, server
 * and model metadata, readiness and infer, with JSON tensors and the binary tensor data
 * extension in both directions. A thin adapter: wire form → InferRequest → DataPlane → wire form.
 * Errors are the protocol's `{"error": "..."}` with the MarinaError's status (and its code in
 * the `x-marina-error-code` header), from the one error map (every route declares `errorBody: 'oip'`).
 */
import { assertJsonDepth } from '../json-depth.ts';
import type { FastifyInstance, FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import {
  answerBytesAtLeast,
  assertResponseSize,
  createHandlerError,
  INFERENCE_HEADER_CONTENT_LENGTH,
  isV2Datatype,
  joinBinaryBody,
  jsonToRaw,
  rawToJson,
  splitBinaryBody,
  type RawTensor,
} from '@marina/handlers';
import { declareRouteAuth } from '../../auth/token-authorization.ts';
import { createServeError } from '../../errors.ts';
import { modelParamsSchema } from '../../routes/model-params-schema.ts';
import {
  MODEL_VERSION_HEADER,
  type CompleteInferRequest,
  type DataPlane,
  type InferRequest,
  type InferResponse,
} from '../data-plane.ts';
import { sendError } from '../error-map.ts';
import { flattenHeaders } from '../request-headers.ts';
import { answeredPriority } from '../../routes/server-timing.ts';

export interface OipRestRoutesOptions {
  dataPlane: DataPlane;
  /** max_request_size, bytes. */
  maxRequestBytes: number;
}

function invalid(message: string) {
  return createHandlerError.MARINA_ERR_TENSOR_INPUT_INVALID(message);
}

interface WireOutput {
  name: string;
  parameters?: { binary_data?: unknown };
}

interface DecodedRequest {
  request: Omit<InferRequest, 'modelName' | 'modelVersion' | 'requestId'>;
  /** Output name → answer as binary. */
  binaryOutputs: (name: string) => boolean;
}

/** Reads a v2 infer body (JSON, or JSON header + binary tensors). @throws MARINA_ERR_TENSOR_INPUT_INVALID */
function decodeInferBody(body: Buffer, headerLengthText: string | undefined): DecodedRequest {
  let header: Record<string, unknown>;
  let binaries = new Map<number, Buffer>();
  if (headerLengthText !== undefined) {
    const headerLength = Number(headerLengthText);
    if (!/^\d+$/.test(headerLengthText.trim()))
      throw invalid(`Inference-Header-Content-Length must be a non-negative integer, got '${headerLengthText}'`);
    assertJsonDepth(body.subarray(0, headerLength), 'the JSON header of the body');
    ({ header, binaries } = splitBinaryBody(body, headerLength, 'inputs'));
  } else {
    assertJsonDepth(body, 'the JSON body');
    try {
      header = JSON.parse(body.toString('utf8')) as Record<string, unknown>;
    } catch (error) {
      throw invalid(`the body is not valid JSON: ${(error as Error).message}`);
    }
    if (!header || typeof header !== 'object' || Array.isArray(header))
      throw invalid('the body must be a JSON object with an "inputs" list');
  }
  const list = header.inputs;
  if (!Array.isArray(list) || list.length === 0)
    throw invalid('the request needs a non-empty "inputs" list of {"name", "shape", "datatype", "data"}');
  const inputs: RawTensor[] = list.map((entry, i) => {
    const e = (entry ?? {}) as { name?: unknown; shape?: unknown; datatype?: unknown; data?: unknown };
    if (typeof e.name !== 'string' || e.name.length === 0) throw invalid(`inputs[${i}] needs a "name"`);
    const where = `input '${e.name}'`;
    if (!isV2Datatype(e.datatype))
      throw invalid(
        `${where}: "datatype" must be one of BOOL, UINT8, UINT16, UINT32, UINT64, INT8, INT16, INT32, INT64, FP16, FP32, FP64, BYTES; got ${JSON.stringify(e.datatype)}`,
      );
    if (!Array.isArray(e.shape) || !e.shape.every((d) => Number.isInteger(d) && d >= 0))
      throw invalid(`${where}: "shape" must be a list of non-negative integers, got ${JSON.stringify(e.shape)}`);
    const shape = e.shape as number[];
    const binary = binaries.get(i);
    if (binary) return { name: e.name, datatype: e.datatype, shape, raw: binary };
    if (e.data === undefined) throw invalid(`${where} has no "data" and no binary_data_size parameter`);
    return { name: e.name, datatype: e.datatype, shape, raw: jsonToRaw(e.datatype, e.data, shape, where) };
  });
  const parameters = header.parameters as Record<string, unknown> | undefined;
  if (parameters !== undefined && (typeof parameters !== 'object' || parameters === null || Array.isArray(parameters)))
    throw invalid('"parameters" must be an object');
  const outputsValue = header.outputs;
  if (outputsValue !== undefined && !Array.isArray(outputsValue))
    throw invalid('"outputs" must be a list of {"name", "parameters"}');
  const outputs = (outputsValue as WireOutput[] | undefined)?.map((o, i) => {
    if (typeof o?.name !== 'string') throw invalid(`outputs[${i}] needs a "name"`);
    return o;
  });
  const isBinaryDefault = parameters?.binary_data_output === true;
  const id = header.id;
  if (id !== undefined && typeof id !== 'string') throw invalid('"id" must be a string');
  return {
    request: {
      inputs,
      outputs: outputs?.map((o) => ({ name: o.name })),
      id,
      parameters,
    },
    binaryOutputs: (name) => {
      const asked = outputs?.find((o) => o.name === name)?.parameters?.binary_data;
      return asked === undefined ? isBinaryDefault : asked === true;
    },
  };
}

/** The v2 infer answer: JSON, or JSON header + binary tensors when any output is binary. */
export function encodeInferResponse(
  response: InferResponse,
  isBinary: (name: string) => boolean,
  maxResponseBytes?: number,
): { body: Buffer; headerLength?: number } {
  // Refuse before building JSON that cannot fit (JSON numbers are 2 to 25 times the binary bytes).
  assertResponseSize(
    answerBytesAtLeast(response.outputs.map((t) => ({ shape: t.shape, raw: t.raw, isBinary: isBinary(t.name) }))),
    maxResponseBytes,
    true,
  );
  const binaries: Buffer[] = [];
  const outputs = response.outputs.map((t) => {
    if (isBinary(t.name)) {
      binaries.push(t.raw);
      return { name: t.name, datatype: t.datatype, shape: t.shape, parameters: { binary_data_size: t.raw.length } };
    }
    return { name: t.name, datatype: t.datatype, shape: t.shape, data: rawToJson(t.datatype, t.raw) };
  });
  const header = { model_name: response.modelName, model_version: response.modelVersion, id: response.id, outputs };
  if (binaries.length === 0) return { body: Buffer.from(JSON.stringify(header)) };
  return joinBinaryBody(header, binaries);
}

type ModelParams = { Params: { model_name: string; model_version?: string } };

/**
 * A repository extension body: empty, or a JSON object with only the `allowed` keys. Each route
 * checks the values; an unknown key is refused rather than ignored, so a Triton client's
 * `config` or `file:` load parameters never pass silently.
 * @throws MARINA_ERR_BAD_REQUEST
 */
function repositoryBody(body: unknown, allowed: readonly string[]): Record<string, unknown> {
  if (body === undefined || body === null || (Buffer.isBuffer(body) && body.length === 0)) return {};
  let value: unknown;
  try {
    value = JSON.parse(Buffer.isBuffer(body) ? body.toString('utf8') : String(body));
  } catch (error) {
    throw createServeError.MARINA_ERR_BAD_REQUEST(`the body is not valid JSON: ${(error as Error).message}`);
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value))
    throw createServeError.MARINA_ERR_BAD_REQUEST('the body must be empty or a JSON object');
  const unknown = Object.keys(value).filter((key) => !allowed.includes(key));
  if (unknown.length > 0)
    throw createServeError.MARINA_ERR_BAD_REQUEST(
      `unknown field${unknown.length === 1 ? '' : 's'} ${unknown
        .slice(0, 5)
        .map((key) => JSON.stringify(key.slice(0, 100)))
        .join(
          ', ',
        )}; this request takes ${allowed.length === 0 ? 'no fields' : allowed.map((key) => `"${key}"`).join(', ')}`,
    );
  return value as Record<string, unknown>;
}

/** A repository load's or unload's `parameters`: an object whose keys are in `allowed`, each boolean. @throws MARINA_ERR_BAD_REQUEST */
function repositoryParameters(value: unknown, allowed: readonly string[]): void {
  if (value === undefined) return;
  if (value === null || typeof value !== 'object' || Array.isArray(value))
    throw createServeError.MARINA_ERR_BAD_REQUEST('"parameters" must be an object');
  for (const [key, parameter] of Object.entries(value)) {
    if (!allowed.includes(key))
      throw createServeError.MARINA_ERR_BAD_REQUEST(
        `parameter ${JSON.stringify(key.slice(0, 100))} is not supported: ${
          allowed.length === 0
            ? "a load takes no parameters (Marina loads the model with its archive's settings; Triton's config and file: overrides are not accepted)"
            : `this request takes ${allowed.map((k) => `"${k}"`).join(', ')}`
        }`,
      );
    if (typeof parameter !== 'boolean')
      throw createServeError.MARINA_ERR_BAD_REQUEST(`parameter "${key}" must be a boolean`);
  }
}

export const oipRestRoutes: FastifyPluginAsync<OipRestRoutesOptions> = async (app: FastifyInstance, options) => {
  const { dataPlane, maxRequestBytes } = options;
  // Every v2 route needs the inference key (decided on the matched route by the token hook).
  declareRouteAuth(app, 'inference');
  // Errors sent before a v2 handler runs (a missing or wrong token) use the protocol's {"error"} body too.
  app.addHook('onRoute', (route) => {
    route.config = { ...(route.config ?? {}), errorBody: 'oip' };
  });
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', { parseAs: 'buffer', bodyLimit: maxRequestBytes }, (_req, body, done) =>
    done(null, body),
  );
  app.setErrorHandler((error, _request, reply) => {
    if (
      (error as { code?: string }).code === 'FST_ERR_CTP_BODY_TOO_LARGE' ||
      (error as { statusCode?: number }).statusCode === 413
    ) {
      return sendError(
        reply,
        createServeError.MARINA_ERR_REQUEST_TOO_LARGE(
          `the request body is larger than max_request_size (${maxRequestBytes} bytes); use the binary tensor data extension (about 4 bytes per FP32 value instead of 10–20 in JSON), send fewer rows, or raise max_request_size`,
        ),
      );
    }
    const status = (error as { statusCode?: number }).statusCode;
    if ((error as { validation?: unknown }).validation || (status !== undefined && status >= 400 && status < 500)) {
      return sendError(reply, createServeError.MARINA_ERR_BAD_REQUEST((error as Error).message, { cause: error }));
    }
    return sendError(reply, error);
  });
  const json = (reply: FastifyReply, code: number, value: unknown) =>
    reply.code(code).type('application/json').send(JSON.stringify(value));

  // Descriptions and response schemas document the routes in OPTIONS / and GET /api-description (routes/api-description.ts).
  const oipError = {
    type: 'object',
    required: ['error'],
    properties: { error: { type: 'string', description: 'What was wrong.' } },
  } as const;
  const liveSchema = { type: 'object', required: ['live'], properties: { live: { type: 'boolean' } } } as const;
  const readySchema = { type: 'object', required: ['ready'], properties: { ready: { type: 'boolean' } } } as const;
  const modelReadySchema = {
    type: 'object',
    required: ['name', 'ready'],
    properties: { name: { type: 'string' }, ready: { type: 'boolean' } },
  } as const;
  const tensorsSchema = {
    type: 'array',
    items: {
      type: 'object',
      required: ['name', 'datatype', 'shape'],
      properties: {
        name: { type: 'string' },
        datatype: { type: 'string' },
        shape: { type: 'array', items: { type: 'integer' } },
      },
    },
  } as const;
  const modelMetadataSchema = {
    type: 'object',
    required: ['name', 'platform', 'inputs', 'outputs'],
    properties: {
      name: { type: 'string' },
      versions: { type: 'array', items: { type: 'string' } },
      platform: { type: 'string' },
      inputs: tensorsSchema,
      outputs: tensorsSchema,
      state: { type: 'string', enum: ['registered', 'loading', 'resident', 'unloading'] },
      residentBytes: { type: 'integer' },
      lastUsed: { type: ['string', 'null'] },
      pinned: { type: 'boolean' },
    },
  } as const;
  const serverMetadataSchema = {
    type: 'object',
    required: ['name', 'version', 'extensions'],
    properties: {
      name: { type: 'string' },
      version: { type: 'string' },
      extensions: { type: 'array', items: { type: 'string' } },
    },
  } as const;
  const inferResponseSchema = {
    type: 'object',
    required: ['model_name', 'outputs'],
    properties: {
      model_name: { type: 'string' },
      model_version: { type: 'string' },
      id: { type: 'string' },
      outputs: { type: 'array', items: { type: 'object' } },
    },
  } as const;

  // The two health routes are open with token authorization on, as /ping is: KServe's and
  // Kubernetes' probes cannot send a key that rotates, and they tell only live/ready.
  app.get(
    '/v2/health/live',
    {
      config: { auth: 'none' },
      schema: {
        description: 'Open Inference Protocol: server liveness.',
        response: { 200: liveSchema, 503: liveSchema },
      },
    },
    async (_request, reply) => json(reply, dataPlane.isLive() ? 200 : 503, { live: dataPlane.isLive() }),
  );
  app.get(
    '/v2/health/ready',
    {
      config: { auth: 'none' },
      schema: {
        description:
          "Open Inference Protocol: server readiness (every model's default version has its minimum workers up).",
        response: { 200: readySchema, 503: readySchema },
      },
    },
    async (_request, reply) => {
      const ready = dataPlane.isReady();
      return json(reply, ready ? 200 : 503, { ready });
    },
  );
  app.get(
    '/v2',
    {
      schema: {
        description: 'Open Inference Protocol: server metadata (name, version, extensions).',
        response: { 200: serverMetadataSchema },
      },
    },
    async (_request, reply) => json(reply, 200, dataPlane.serverMetadata()),
  );

  const metadata = async (request: FastifyRequest<ModelParams>, reply: FastifyReply) => {
    try {
      return json(reply, 200, dataPlane.modelMetadata(request.params.model_name, request.params.model_version));
    } catch (error) {
      return sendError(reply, error);
    }
  };
  const ready = async (request: FastifyRequest<ModelParams>, reply: FastifyReply) => {
    try {
      const isReady = dataPlane.isModelReady(request.params.model_name, request.params.model_version);
      return json(reply, isReady ? 200 : 503, { name: request.params.model_name, ready: isReady });
    } catch (error) {
      return sendError(reply, error);
    }
  };
  const infer = async (request: FastifyRequest<ModelParams>, reply: FastifyReply) => {
    const arrivedAt = performance.now();
    try {
      const body = Buffer.isBuffer(request.body) ? request.body : Buffer.alloc(0);
      const headerLength = request.headers[INFERENCE_HEADER_CONTENT_LENGTH];
      let decoded: DecodedRequest;
      try {
        decoded = decodeInferBody(body, Array.isArray(headerLength) ? headerLength[0] : headerLength);
      } catch (error) {
        dataPlane.recordUndecodable(request.params.model_name, request.params.model_version, arrivedAt, error);
        throw error;
      }
      // Every field named, not spread: see CompleteInferRequest.
      const inferRequest: CompleteInferRequest = {
        modelName: request.params.model_name,
        modelVersion: request.params.model_version,
        id: decoded.request.id,
        inputs: decoded.request.inputs,
        outputs: decoded.request.outputs,
        parameters: decoded.request.parameters,
        requestId: request.id,
        headers: flattenHeaders(request.headers),
        arrivedAt,
        scheduling: undefined,
        onClientGone: (cancel) => {
          reply.raw.once('close', () => {
            if (!reply.raw.writableFinished) cancel();
          });
        },
        trace: request.marinaTrace ?? undefined,
      };
      const response = await dataPlane.infer(inferRequest);
      if (response.priority !== undefined) answeredPriority.set(request, response.priority);
      reply.header(MODEL_VERSION_HEADER, response.modelVersion);
      const encoded = encodeInferResponse(response, decoded.binaryOutputs, dataPlane.maxResponseBytes);
      assertResponseSize(encoded.body.length, dataPlane.maxResponseBytes);
      if (encoded.headerLength !== undefined) {
        reply.header('inference-header-content-length', String(encoded.headerLength));
        reply.type('application/octet-stream');
      } else reply.type('application/json');
      return reply.code(200).send(encoded.body);
    } catch (error) {
      const priority = (error as { details?: { priority?: unknown } }).details?.priority;
      if (typeof priority === 'number') answeredPriority.set(request, priority);
      return sendError(reply, error);
    }
  };

  for (const prefix of ['/v2/models/:model_name', '/v2/models/:model_name/versions/:model_version']) {
    app.get(
      prefix,
      {
        schema: {
          description: "Open Inference Protocol: the model's metadata, inputs and outputs from its ONNX signature.",
          params: modelParamsSchema,
          response: { 200: modelMetadataSchema, 404: oipError, 500: oipError },
        },
      },
      metadata,
    );
    app.get(
      `${prefix}/ready`,
      {
        schema: {
          description: 'Open Inference Protocol: whether the model version has its minimum workers up.',
          params: modelParamsSchema,
          response: { 200: modelReadySchema, 503: modelReadySchema, 404: oipError },
        },
      },
      ready,
    );
    app.post(
      `${prefix}/infer`,
      {
        schema: {
          description:
            'Open Inference Protocol: inference on JSON tensors, or the binary tensor extension (Inference-Header-Content-Length).',
          params: modelParamsSchema,
          response: { 200: inferResponseSchema, 400: oipError, 404: oipError, 500: oipError, 503: oipError },
        },
      },
      infer,
    );
  }
  // The model repository extension (Triton's and KServe's): index, load, unload. They change which
  // models are in memory, so they need the management key, as the management API does.
  const repositoryEntrySchema = {
    type: 'object',
    required: ['name', 'state'],
    properties: {
      name: { type: 'string' },
      version: { type: 'string' },
      state: { type: 'string', description: 'READY, LOADING, UNLOADING or UNAVAILABLE (Triton).' },
      reason: { type: 'string', description: 'Why the version is not READY.' },
    },
  } as const;
  const nameOnly = {
    type: 'object',
    properties: { model_name: { type: 'string', minLength: 1 } },
    required: ['model_name'],
  } as const;
  app.post(
    '/v2/repository/index',
    {
      config: { auth: 'management' },
      schema: {
        description:
          'Model repository extension: every registered model version and its state; {"ready": true} keeps the READY ones. Needs the management key.',
        response: { 200: { type: 'array', items: repositoryEntrySchema }, 400: oipError },
      },
    },
    async (request, reply) => {
      try {
        const body = repositoryBody(request.body, ['ready', 'repository_name']);
        if (body.ready !== undefined && typeof body.ready !== 'boolean')
          throw createServeError.MARINA_ERR_BAD_REQUEST('"ready" must be a boolean');
        return json(reply, 200, dataPlane.repositoryIndex({ ready: body.ready === true }));
      } catch (error) {
        return sendError(reply, error);
      }
    },
  );
  app.post(
    '/v2/repository/models/:model_name/load',
    {
      config: { auth: 'management' },
      schema: {
        description:
          "Model repository extension: load the model's default version (answers once it is resident; at once if it is). Needs the management key.",
        params: nameOnly,
        response: {
          200: { type: 'object', properties: { name: { type: 'string' }, load: { type: 'boolean' } } },
          400: oipError,
          404: oipError,
          503: oipError,
        },
      },
    },
    async (request: FastifyRequest<ModelParams>, reply) => {
      try {
        repositoryParameters(repositoryBody(request.body, ['parameters']).parameters, []);
        await dataPlane.loadModel(request.params.model_name);
        return json(reply, 200, { name: request.params.model_name, load: true });
      } catch (error) {
        return sendError(reply, error);
      }
    },
  );
  app.post(
    '/v2/repository/models/:model_name/unload',
    {
      config: { auth: 'management' },
      schema: {
        description:
          "Model repository extension: unload the model's default version (back to registered: no worker, no session; a request loads it again). Needs the management key.",
        params: nameOnly,
        response: {
          200: { type: 'object', properties: { name: { type: 'string' }, unload: { type: 'boolean' } } },
          400: oipError,
          404: oipError,
        },
      },
    },
    async (request: FastifyRequest<ModelParams>, reply) => {
      try {
        repositoryParameters(repositoryBody(request.body, ['parameters']).parameters, ['unload_dependents']);
        await dataPlane.unloadModel(request.params.model_name);
        return json(reply, 200, { name: request.params.model_name, unload: true });
      } catch (error) {
        return sendError(reply, error);
      }
    },
  );
};
