import type { FastifyInstance, FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import multipart from '@fastify/multipart';
import { declareRouteAuth } from '../auth/token-authorization.ts';
import { createServeError, errorBody, isMarinaError, toMarinaError } from '../errors.ts';
import type { ModelRegistry } from '../registry/model-registry.ts';
import { assertResponseSize, type DataPlane } from '../protocols/data-plane.ts';
import type { JobInput } from '../scheduling/job.ts';
import { serverTimingHeader } from './server-timing.ts';
import type { BodyDecoding } from '../workers/worker-protocol.ts';

export interface InferenceRoutesOptions {
  registry: ModelRegistry;
  /** max_request_size, bytes. */
  maxRequestBytes: number;
  /** max_response_size, bytes: a larger answer is refused with MARINA_ERR_RESPONSE_TOO_LARGE. Default: unbounded. */
  maxResponseBytes?: number;
  /** Admission below the protocols (strict tensor checks before the queue); without it, inputs go to the handler as they came. */
  dataPlane?: DataPlane;
}

/** Codes whose 503 should tell clients when to come back: those where a retry can succeed (not MARINA_ERR_NO_WORKERS: max_worker=0 or a model that cannot load). */
const retryableCodes = new Set(['MARINA_ERR_QUEUE_FULL', 'MARINA_ERR_CLIENT_TIMEOUT', 'MARINA_ERR_SERVER_CLOSING', 'MARINA_ERR_MODEL_UNLOADING']);

/** Sends a MarinaError as TorchServe's error body (plus `marinaCode`), with Retry-After on overload. */
export function sendError(reply: FastifyReply, error: unknown): FastifyReply {
  const e = toMarinaError(error);
  if (e.statusCode >= 500 && e.code === 'MARINA_ERR_INTERNAL') reply.log.error({ err: error }, e.message);
  if (retryableCodes.has(e.code)) reply.header('retry-after', '1');
  const headers = e.details?.['headers'];
  if (headers && typeof headers === 'object') for (const [k, v] of Object.entries(headers)) reply.header(k, String(v));
  return reply.code(e.statusCode).type('application/json').send(`${JSON.stringify(errorBody(e), null, 2)}\n`);
}

/** @fastify/multipart's codes for a body over its limits (answered 413). */
const multipartTooLargeCodes = new Set(['FST_REQ_FILE_TOO_LARGE', 'FST_PARTS_LIMIT', 'FST_FILES_LIMIT', 'FST_FIELDS_LIMIT']);

/** How the worker decodes a raw body for the handler (TorchServe's decode_input_request): JSON parsed, text/* as a string, other types as bytes. */
function bodyDecodingOf(contentType: string | undefined): BodyDecoding {
  if (contentType === undefined) return undefined;
  const semi = contentType.indexOf(';');
  const type = (semi === -1 ? contentType : contentType.slice(0, semi)).trim().toLowerCase();
  if (type === 'application/json') return 'json';
  if (type.startsWith('text/')) return 'text';
  return undefined;
}

/** The handler's input and how the worker decodes it: the body's bytes travel as they came, JSON is parsed in the worker, not on the HTTP thread. */
async function readInput(request: FastifyRequest): Promise<{ input: JobInput; bodyDecoding: BodyDecoding }> {
  if (request.isMultipart()) {
    const input: JobInput = {};
    try {
      for await (const part of request.parts()) {
        if (part.type === 'file') input[part.fieldname] = await part.toBuffer();
        else input[part.fieldname] = part.value;
      }
    } catch (error) {
      const code = (error as { code?: string }).code;
      if (isMarinaError(error) || (code !== undefined && multipartTooLargeCodes.has(code))) throw error;
      // Everything else the parser throws (truncated body, no boundary, bad part headers, a
      // `__proto__` field) is the client's malformed body, not a server fault.
      throw createServeError.MARINA_ERR_BAD_REQUEST(`the multipart body cannot be parsed: ${(error as Error).message}; send a well-formed multipart/form-data body (field 'data') or a raw body`, { cause: error });
    }
    if (Object.keys(input).length === 0) throw createServeError.MARINA_ERR_BAD_REQUEST('the multipart body has no fields; send the input in a field named data');
    return { input, bodyDecoding: undefined };
  }
  const body = request.body;
  if (body === undefined || body === null) return { input: {}, bodyDecoding: undefined };
  return Buffer.isBuffer(body) ? { input: { body }, bodyDecoding: bodyDecodingOf(request.headers['content-type']) } : { input: { body }, bodyDecoding: undefined };
}

const paramsSchema = {
  type: 'object',
  properties: { model_name: { type: 'string', minLength: 1 }, model_version: { type: 'string', minLength: 1 } },
  required: ['model_name'],
} as const;

/**
 * The inference API (TorchServe section 5): `GET /ping`, `POST|PUT /predictions/{model}[/{version}]`.
 * Raw bodies of any content type reach the handler as `{ body }`; multipart fields each become a key.
 */
export const inferenceRoutes: FastifyPluginAsync<InferenceRoutesOptions> = async (app: FastifyInstance, options) => {
  const { registry, maxRequestBytes } = options;
  const maxResponseBytes = options.maxResponseBytes ?? Infinity;
  declareRouteAuth(app, 'inference');

  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', { parseAs: 'buffer', bodyLimit: maxRequestBytes }, (_req, body, done) => done(null, body));
  await app.register(multipart, { limits: { fileSize: maxRequestBytes, fieldSize: maxRequestBytes } });

  app.get('/ping', async (_request, reply) => {
    const isHealthy = registry.isHealthy() && !registry.isClosing;
    return reply.code(isHealthy ? 200 : 500).type('application/json').send(`${JSON.stringify({ status: isHealthy ? 'Healthy' : 'Unhealthy' }, null, 2)}\n`);
  });

  const predict = async (request: FastifyRequest<{ Params: { model_name: string; model_version?: string } }>, reply: FastifyReply) => {
    const arrivedAt = performance.now();
    try {
      const { input, bodyDecoding } = await readInput(request);
      const headers: Record<string, string> = {};
      const requestHeaders = request.headers;
      for (const k in requestHeaders) {
        const v = requestHeaders[k];
        if (v !== undefined) headers[k] = Array.isArray(v) ? v.join(', ') : v;
      }
      const predictOptions = {
        modelName: request.params.model_name,
        modelVersion: request.params.model_version,
        requestId: request.id,
        input,
        headers,
        arrivedAt,
        bodyDecoding,
      };
      const result = await registry.predict(options.dataPlane ? options.dataPlane.admitTorchServeInput(predictOptions) : predictOptions);
      assertResponseSize(result.body.length, maxResponseBytes);
      reply.header('server-timing', serverTimingHeader(result.timings, performance.now() - arrivedAt));
      for (const k in result.headers) reply.header(k, result.headers[k]!);
      if (result.contentType) reply.type(result.contentType);
      return reply.code(result.statusCode).send(result.body);
    } catch (error) {
      const code = (error as { code?: string }).code;
      if (code !== undefined && multipartTooLargeCodes.has(code)) {
        return sendError(reply, createServeError.MARINA_ERR_REQUEST_TOO_LARGE(`the multipart body is larger than max_request_size (${maxRequestBytes} bytes); send a smaller input or raise max_request_size`));
      }
      return sendError(reply, error);
    }
  };

  for (const url of ['/predictions/:model_name', '/predictions/:model_name/:model_version']) {
    app.route({ method: ['POST', 'PUT'], url, schema: { params: paramsSchema }, handler: predict });
  }
};
