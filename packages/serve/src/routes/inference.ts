import type { FastifyInstance, FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import { FormFields, parseFormBody } from './form-body.ts';
import multipart from '@fastify/multipart';
import { declareRouteAuth } from '../auth/token-authorization.ts';
import { createServeError, isMarinaError, type MarinaError } from '../errors.ts';
import { MODEL_VERSION_HEADER, type DataPlane } from '../protocols/data-plane.ts';
import { sendError } from '../protocols/error-map.ts';
import { flattenHeaders } from '../protocols/request-headers.ts';
import { modelParamsSchema } from './model-params-schema.ts';
import type { JobInput } from '../scheduling/job.ts';
import { answeredPriority, serverTimingHeader } from './server-timing.ts';
import type { BodyDecoding } from '../workers/worker-protocol.ts';

export interface InferenceRoutesOptions {
  /** The one way into inference: admission, the registry's predict path and the max_response_size bound. */
  dataPlane: DataPlane;
  /** max_request_size, bytes. */
  maxRequestBytes: number;
  /** ping_requires_token: `/ping` needs the inference key as in TorchServe (default: open, for probes). */
  pingRequiresToken?: boolean;
}

/** The serializer of an answer the worker sent as text: it is sent as it is. */
const textAsIs = (text: unknown) => text as string;

/** Parts (fields and files) read from one multipart body: @fastify/multipart's default, stated so the message can say it. */
const MAX_MULTIPART_PARTS = 1000;

/** @fastify/multipart's code for a part over max_request_size (answered 413; too many parts have their own code). */
const multipartTooLargeCodes = new Set(['FST_REQ_FILE_TOO_LARGE']);

/** How the worker decodes a raw body for the handler (TorchServe's decode_input_request): JSON parsed, text/* as a string, other types as bytes. */
function bodyDecodingOf(contentType: string | undefined): BodyDecoding {
  if (contentType === undefined) return undefined;
  const semi = contentType.indexOf(';');
  const type = (semi === -1 ? contentType : contentType.slice(0, semi)).trim().toLowerCase();
  if (type === 'application/json') return 'json';
  if (type.startsWith('text/')) return 'text';
  return undefined;
}

/**
 * The handler's input and how the worker decodes it: the body's bytes travel as they came, JSON is parsed in the worker, not on the HTTP thread.
 * Only a multipart body is read asynchronously (its parts stream in); every other body is already read, so no promise is made for it.
 */
function readInput(
  request: FastifyRequest,
): { input: JobInput; bodyDecoding: BodyDecoding } | Promise<{ input: JobInput; bodyDecoding: BodyDecoding }> {
  return request.isMultipart() ? readMultipartInput(request) : readBodyInput(request);
}

async function readMultipartInput(request: FastifyRequest): Promise<{ input: JobInput; bodyDecoding: BodyDecoding }> {
  const input: JobInput = {};
  try {
    for await (const part of request.parts()) {
      if (part.type === 'file') input[part.fieldname] = await part.toBuffer();
      else input[part.fieldname] = part.value;
    }
  } catch (error) {
    const code = (error as { code?: string }).code;
    if (code === 'FST_PARTS_LIMIT' || code === 'FST_FILES_LIMIT' || code === 'FST_FIELDS_LIMIT')
      throw createServeError.MARINA_ERR_MULTIPART_TOO_MANY_PARTS(
        `the multipart body has more than ${MAX_MULTIPART_PARTS} parts; send the input in fewer fields (one field 'data' is usual)`,
        { cause: error, details: { maxParts: MAX_MULTIPART_PARTS } },
      );
    if (isMarinaError(error) || (code !== undefined && multipartTooLargeCodes.has(code))) throw error;
    // Everything else the parser throws (truncated body, no boundary, bad part headers, a
    // `__proto__` field) is the client's malformed body, not a server fault.
    throw createServeError.MARINA_ERR_BAD_REQUEST(
      `the multipart body cannot be parsed: ${(error as Error).message}; send a well-formed multipart/form-data body (field 'data') or a raw body`,
      { cause: error },
    );
  }
  if (Object.keys(input).length === 0)
    throw createServeError.MARINA_ERR_BAD_REQUEST(
      'the multipart body has no fields; send the input in a field named data',
    );
  return { input, bodyDecoding: undefined };
}

function readBodyInput(request: FastifyRequest): { input: JobInput; bodyDecoding: BodyDecoding } {
  const body = request.body;
  if (body === undefined || body === null) return { input: {}, bodyDecoding: undefined };
  if (body instanceof FormFields) {
    const input: JobInput = {};
    for (const [k, v] of body.entries) input[k] = v;
    return { input, bodyDecoding: undefined };
  }
  return Buffer.isBuffer(body)
    ? { input: { body }, bodyDecoding: bodyDecodingOf(request.headers['content-type']) }
    : { input: { body }, bodyDecoding: undefined };
}

/** The answer of every workflow route, until workflows are implemented. */
export function workflowsNotImplemented(): MarinaError {
  return createServeError.MARINA_ERR_WORKFLOWS_NOT_IMPLEMENTED(
    'Workflows are not implemented in Marina yet: register the models of the workflow and call /predictions/{model_name} for each (see docs/explanation/torchserve-differences.md).',
  );
}

/** Where the model of a request comes from, per route family. */
type ModelFrom = (request: FastifyRequest, input: JobInput) => { modelName: string; modelVersion: string | undefined };

const statusResponse = { type: 'object', properties: { status: { type: 'string' } }, required: ['status'] } as const;
const errorResponse = {
  type: 'object',
  description: "TorchServe's error body, plus Marina's stable code.",
  properties: {
    code: { type: 'integer' },
    type: { type: 'string' },
    message: { type: 'string' },
    marinaCode: { type: 'string' },
  },
  required: ['code', 'type', 'message'],
} as const;
const predictionResponses = {
  200: { description: "The handler's output: JSON, text or bytes, as the handler returns it." },
  400: errorResponse,
  404: errorResponse,
  413: errorResponse,
  500: errorResponse,
  503: errorResponse,
  504: errorResponse,
} as const;
const invocationsQuery = { type: 'object', properties: { model_name: { type: 'string', minLength: 1 } } } as const;

/**
 * The inference API (TorchServe section 5): `GET /ping`; `POST|PUT /predictions/{model}[/{version}]`;
 * KServe v1 `POST /v1/models/{model}:predict`; SageMaker's `POST /invocations?model_name=` and
 * `POST /models/{model}/invoke`; the legacy `POST /{model}[/{version}]/predict`; and
 * `POST /explanations/{model}[/{version}]` (and `/v1/models/{model}:explain`).
 * Raw bodies of any content type reach the handler as `{ body }`; multipart and form-urlencoded
 * fields each become a key. The legacy and /invocations routes also pass query parameters as
 * fields, as TorchServe.
 */
export const inferenceRoutes: FastifyPluginAsync<InferenceRoutesOptions> = async (app: FastifyInstance, options) => {
  const { dataPlane, maxRequestBytes } = options;
  declareRouteAuth(app, 'inference');

  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', { parseAs: 'buffer', bodyLimit: maxRequestBytes }, (_req, body, done) =>
    done(null, body),
  );
  // TorchServe decodes a form body into one input field per form field, like multipart.
  app.addContentTypeParser(
    'application/x-www-form-urlencoded',
    { parseAs: 'buffer', bodyLimit: maxRequestBytes },
    (request, body, done) => done(null, parseFormBody(body as Buffer, request.headers['content-type'])),
  );
  await app.register(multipart, {
    limits: { fileSize: maxRequestBytes, fieldSize: maxRequestBytes, parts: MAX_MULTIPART_PARTS },
  });

  // Open with token authorization on: Kubernetes' liveness and readiness probes (and load
  // balancers' health checks) cannot send a key that rotates. It tells only Healthy or Unhealthy.
  app.get(
    '/ping',
    {
      config: { auth: options.pingRequiresToken ? 'inference' : 'none' },
      schema: {
        description: "Health of the server: Healthy when every model's default version has its minimum workers up.",
        response: { 200: statusResponse, 500: statusResponse },
      },
    },
    async (_request, reply) => {
      const isHealthy = dataPlane.isReady();
      return reply
        .code(isHealthy ? 200 : 500)
        .type('application/json')
        .send(`${JSON.stringify({ status: isHealthy ? 'Healthy' : 'Unhealthy' }, null, 2)}\n`);
    },
  );

  const predictFrom =
    (modelFrom: ModelFrom, routeOptions: { withQuery: boolean }) =>
    async (request: FastifyRequest, reply: FastifyReply) => {
      const arrivedAt = performance.now();
      try {
        const read = readInput(request);
        const { input, bodyDecoding } = read instanceof Promise ? await read : read;
        const { modelName, modelVersion } = modelFrom(request, input);
        if (routeOptions.withQuery) {
          for (const [k, v] of Object.entries(request.query as Record<string, string | string[]>))
            if (!(k in input)) input[k] = Array.isArray(v) ? v.join(',') : v;
        }
        const headers = flattenHeaders(request.headers);
        const predictOptions = {
          modelName,
          modelVersion,
          requestId: request.id,
          input,
          headers,
          arrivedAt,
          bodyDecoding,
          trace: request.marinaTrace ?? undefined,
          onClientGone: (cancel: () => void) => {
            reply.raw.once('close', () => {
              if (!reply.raw.writableFinished) cancel();
            });
          },
        };
        const result = await dataPlane.predict(predictOptions);
        const { text } = result;
        reply.header('server-timing', serverTimingHeader(result.timings, performance.now() - arrivedAt));
        if (result.timings.priority !== undefined) answeredPriority.set(request, result.timings.priority);
        reply.header(MODEL_VERSION_HEADER, result.modelVersion);
        for (const k in result.headers) reply.header(k, result.headers[k]!);
        // Text goes as it is (node writes it with the head in one write); fastify would call a string
        // without a type text/plain, so an untyped answer keeps the type its bytes would get.
        if (result.contentType) reply.type(result.contentType);
        else if (text !== undefined && !reply.hasHeader('content-type')) reply.type('application/octet-stream');
        if (text === undefined) return reply.code(result.statusCode).send(result.body);
        // As it is: fastify would add `; charset=utf-8` to a JSON type given a string (TorchServe's is `application/json`).
        return reply.code(result.statusCode).serializer(textAsIs).send(text);
      } catch (error) {
        const code = (error as { code?: string }).code;
        if (code !== undefined && multipartTooLargeCodes.has(code)) {
          return sendError(
            reply,
            createServeError.MARINA_ERR_REQUEST_TOO_LARGE(
              `the multipart body is larger than max_request_size (${maxRequestBytes} bytes); send a smaller input or raise max_request_size`,
            ),
          );
        }
        const priority = (error as { details?: { priority?: unknown } }).details?.priority;
        if (typeof priority === 'number') answeredPriority.set(request, priority);
        return sendError(reply, error);
      }
    };
  const fromParams: ModelFrom = (request) => {
    const params = request.params as { model_name: string; model_version?: string };
    return { modelName: params.model_name, modelVersion: params.model_version };
  };
  /**
   * /invocations as TorchServe's InferenceRequestHandler reads it: `model_name` from the query, else
   * the only model registered, else a `model_name` field of the body (multipart or form), else 400
   * "Parameter model_name is required.".
   */
  const fromQueryOrOnly: ModelFrom = (request, input) => {
    const name = (request.query as { model_name?: string }).model_name;
    if (name !== undefined && name !== '') return { modelName: name, modelVersion: undefined };
    const names = dataPlane.modelNames();
    if (names.length === 1) return { modelName: names[0]!, modelVersion: undefined };
    const field = input.model_name;
    const fromBody = Buffer.isBuffer(field) ? field.toString('utf8') : field;
    if (typeof fromBody === 'string' && fromBody !== '') return { modelName: fromBody, modelVersion: undefined };
    throw createServeError.MARINA_ERR_BAD_REQUEST(
      `Parameter model_name is required. ${names.length === 0 ? 'No model is registered.' : `Give model_name= in the query or the body (registered: ${names.slice(0, 20).join(', ')}).`}`,
    );
  };

  const predict = predictFrom(fromParams, { withQuery: false });
  const predictDescription =
    'Runs the model (default version, or the one named) on the body: raw bytes, JSON, text, multipart or form fields.';
  for (const url of ['/predictions/:model_name', '/predictions/:model_name/:model_version']) {
    app.route({
      method: ['POST', 'PUT'],
      url,
      schema: { description: predictDescription, params: modelParamsSchema, response: predictionResponses },
      handler: predict,
    });
  }

  app.post(
    '/models/:model_name/invoke',
    {
      schema: {
        description: 'SageMaker-style invoke: the same as POST /predictions/{model_name}.',
        params: modelParamsSchema,
        response: predictionResponses,
      },
    },
    predict,
  );
  app.post(
    '/invocations',
    {
      schema: {
        description:
          'SageMaker-style invocations: the model from ?model_name= (or the only model registered); query parameters become input fields.',
        querystring: invocationsQuery,
        response: predictionResponses,
      },
    },
    predictFrom(fromQueryOrOnly, { withQuery: true }),
  );
  const legacy = predictFrom(fromParams, { withQuery: true });
  // TorchServe's handleLegacyPredict takes any method: `GET /{model}/predict?data=...` passes the query as the input.
  for (const url of ['/:model_name/predict', '/:model_name/:model_version/predict']) {
    app.route({
      method: ['GET', 'POST'],
      url,
      schema: {
        description:
          'The legacy predict route: the same as POST /predictions/{model_name}, with query parameters as input fields (GET takes them alone).',
        params: modelParamsSchema,
        response: predictionResponses,
      },
      handler: legacy,
    });
  }

  // Explanations: DataPlane.explain answers as TorchServe does for a handler without explain.
  const explain = async (request: FastifyRequest, reply: FastifyReply) => {
    try {
      const { modelName, modelVersion } = fromParams(request, {});
      dataPlane.explain(modelName, modelVersion);
    } catch (error) {
      return sendError(reply, error);
    }
  };
  const explainDescription =
    "Explanations (TorchServe runs the handler's explain_handle): Marina's handlers have none, so this answers 503.";
  for (const url of ['/explanations/:model_name', '/explanations/:model_name/:model_version']) {
    app.route({
      method: ['POST', 'PUT'],
      url,
      schema: { description: explainDescription, params: modelParamsSchema, response: predictionResponses },
      handler: explain,
    });
  }
  app.route({
    method: ['POST', 'PUT'],
    url: '/wfpredict/:workflow_name',
    schema: {
      description: 'Workflow predictions: not implemented in Marina yet (501).',
      response: { 501: errorResponse },
    },
    handler: async (_request, reply) => sendError(reply, workflowsNotImplemented()),
  });
  // KServe v1 `/v1/models/{model}:predict` and `:explain`: one route (the router cannot tell two
  // `:param:suffix` routes apart), described as the two paths it serves.
  const kserveParams = {
    type: 'object',
    properties: { model_action: { type: 'string', pattern: '^.+:(predict|explain)$' } },
    required: ['model_action'],
  } as const;
  app.post(
    '/v1/models/:model_action',
    {
      schema: { params: kserveParams, response: predictionResponses },
      config: {
        describedAs: [
          {
            url: '/v1/models/:model_name::predict',
            description:
              'KServe v1 predict: the same as POST /predictions/{model_name} (the body is passed to the handler as is).',
          },
          { url: '/v1/models/:model_name::explain', description: explainDescription },
        ],
      },
    },
    async (request, reply) => {
      const action = (request.params as { model_action: string }).model_action;
      const colon = action.lastIndexOf(':');
      (request.params as { model_name?: string }).model_name = action.slice(0, colon);
      return action.slice(colon + 1) === 'explain' ? explain(request, reply) : predict(request, reply);
    },
  );
};
