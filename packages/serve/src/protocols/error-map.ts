/**
 * The one map from a MarinaError to each wire form, so a code means the same on every protocol:
 * TorchServe's REST body (`{code, type, message, marinaCode}`), the Open Inference Protocol's
 * `{"error"}` (code in `x-marina-error-code`), gRPC status codes (code in `marina-error-code`
 * metadata), and TorchServe gRPC's per-message `status`. One rule decides `Retry-After`: only
 * where the same request sent again can succeed (see RETRYABLE_CODES).
 */
import { boundText } from '../bounded-text.ts';
import * as grpc from '@grpc/grpc-js';
import type { FastifyReply } from 'fastify';
import type { MarinaError } from '@marina/errors';
import { setTorchServeHeaders } from '../auth/torchserve-response.ts';
import { toMarinaError } from '../errors.ts';
import { torchServeText } from './torchserve-texts.ts';

declare module 'fastify' {
  interface FastifyContextConfig {
    /**
     * The error body a route's protocol expects: `oip` (the Open Inference Protocol's
     * `{"error": "..."}`) for the v2 routes; TorchServe's body otherwise. Errors sent before the
     * route's own handler runs (the token check) follow it too.
     */
    errorBody?: 'torchserve' | 'oip';
  }
}

/** Seconds a client is told to wait before it retries (the `Retry-After` header and gRPC metadata). */
const RETRY_AFTER_SECONDS = 1;

/**
 * Codes where a retry of the same request can succeed, so the answer carries `Retry-After`:
 * a full queue, a request that waited past clientTimeoutInMills, a replica shutting down, a
 * version being unregistered (another replica or version can answer), the download slots all
 * taken, and a model that could not be loaded in time because model_memory_budget was full. Not MARINA_ERR_NO_WORKERS: max_worker=0 or a model that cannot load stays so until an
 * operator acts, and a client that retries it only adds load.
 */
export const RETRYABLE_CODES: ReadonlySet<string> = new Set([
  'MARINA_ERR_QUEUE_FULL',
  'MARINA_ERR_CLIENT_TIMEOUT',
  'MARINA_ERR_SERVER_CLOSING',
  'MARINA_ERR_MODEL_UNLOADING',
  'MARINA_ERR_DOWNLOADS_BUSY',
  'MARINA_ERR_MEMORY_BUDGET_FULL',
]);

/** Whether an error of this code carries `Retry-After`. */
export function isRetryable(code: string): boolean {
  return RETRYABLE_CODES.has(code);
}

/**
 * The `type` TorchServe puts in its error body (the Java exception it throws) for the codes where
 * it is not the one its status gives (TYPE_BY_STATUS).
 */
const TORCHSERVE_TYPE_BY_CODE: Readonly<Record<string, string>> = {
  MARINA_ERR_MODEL_VERSION_NOT_FOUND: 'ModelVersionNotFoundException',
  MARINA_ERR_ROUTE_NOT_FOUND: 'ResourceNotFoundException',
  // A refusal of the request, not a version problem (403's own name in TorchServe).
  MARINA_ERR_API_EXPLORER_UNREACHABLE: 'BadRequestException',
  MARINA_ERR_RESPONSE_TIMEOUT: 'RequestTimeoutException',
  MARINA_ERR_DEADLINE_EXCEEDED: 'RequestTimeoutException',
  // TorchServe answers a handler failure with 503 and InternalServerException ("Prediction failed").
  MARINA_ERR_HANDLER_FAILED: 'InternalServerException',
  MARINA_ERR_HANDLER_RESULT_COUNT: 'InternalServerException',
  MARINA_ERR_HANDLER_OUTPUT_INVALID: 'InternalServerException',
  MARINA_ERR_EXPLAIN_NOT_SUPPORTED: 'InternalServerException',
  // TorchServe's ModelArchive.downloadModel.
  MARINA_ERR_MODEL_STORE_NOT_CONFIGURED: 'ModelNotFoundException',
  MARINA_ERR_URL_RELATIVE_PATH: 'ModelNotFoundException',
  MARINA_ERR_URL_NOT_ALLOWED: 'ModelNotFoundException',
  MARINA_ERR_MODEL_URL_INVALID: 'ModelNotFoundException',
  MARINA_ERR_MODEL_FILE_NOT_FOUND: 'ModelNotFoundException',
  // TorchServe's Postman collection (management_api_test_new_collection.json, "Model Re-Registration"): 500 InternalServerException.
  MARINA_ERR_MODEL_FILE_EXISTS: 'InternalServerException',
  MARINA_ERR_DOWNLOAD_FAILED: 'DownloadArchiveException',
  MARINA_ERR_DOWNLOAD_TOO_LARGE: 'DownloadArchiveException',
  MARINA_ERR_DOWNLOAD_TIMEOUT: 'DownloadArchiveException',
  MARINA_ERR_DOWNLOAD_NOT_ARCHIVE: 'DownloadArchiveException',
  // 507, TorchServe's status for insufficient storage; the archive could not be stored.
  MARINA_ERR_MODEL_STORE_FULL: 'DownloadArchiveException',
  // Netty refuses an overlong request line or headers as a bad request.
  MARINA_ERR_URI_TOO_LONG: 'BadRequestException',
  MARINA_ERR_HEADERS_TOO_LARGE: 'BadRequestException',
  // TorchServe's token plugin throws InvalidKeyException for a bad /token?type= too.
  MARINA_ERR_TOKEN_TYPE_INVALID: 'InvalidKeyException',
  // The same type whatever token_failure_status gives them (401, or TorchServe's 400).
  MARINA_ERR_TOKEN_MISSING: 'InvalidKeyException',
  MARINA_ERR_TOKEN_INVALID: 'InvalidKeyException',
  MARINA_ERR_TOKEN_EXPIRED: 'InvalidKeyException',
};

/** TorchServe's exception name for a status. */
const TYPE_BY_STATUS: Readonly<Record<number, string>> = {
  400: 'BadRequestException',
  401: 'InvalidKeyException',
  403: 'InvalidModelVersionException',
  404: 'ModelNotFoundException',
  405: 'MethodNotAllowedException',
  408: 'RequestTimeoutException',
  409: 'ConflictStatusException',
  413: 'RequestEntityTooLargeException',
  501: 'NotImplementedException',
  503: 'ServiceUnavailableException',
  507: 'OutOfMemoryError',
};

/** The `type` field of TorchServe's error body for an error of this code (or, without one, this status). */
export function torchServeErrorType(code: string | undefined, statusCode: number): string {
  return (
    (code !== undefined ? TORCHSERVE_TYPE_BY_CODE[code] : undefined) ??
    TYPE_BY_STATUS[statusCode] ??
    'InternalServerException'
  );
}

/**
 * TorchServe's error body, plus Marina's stable code and, where TorchServe's exact text leaves out
 * what Marina knows, Marina's guidance in `hint` (see torchserve-texts.ts).
 */
export interface TorchServeErrorBody {
  code: number;
  type: string;
  message: string;
  marinaCode: string;
  hint?: string;
}

/** TorchServe's error body of a MarinaError: TorchServe's exact message where it has one, Marina's guidance in `hint`. */
export function torchServeErrorBody(error: MarinaError): TorchServeErrorBody {
  const { message, hint } = torchServeText(error);
  return {
    code: error.statusCode,
    type: torchServeErrorType(error.code, error.statusCode),
    message: boundText(message, MAX_REST_MESSAGE_CHARS),
    marinaCode: error.code,
    ...(hint !== undefined ? { hint: boundText(hint, MAX_REST_MESSAGE_CHARS) } : {}),
  };
}

/**
 * Longest message (and hint) a REST error body carries, characters: whatever a message quotes
 * from a request, the answer stays small, and credentials in URLs are redacted (boundText).
 */
const MAX_REST_MESSAGE_CHARS = 4096;

/**
 * The headers every HTTP error answer carries besides its body: `Retry-After` where a retry can
 * succeed, and the headers a custom handler set on the error it answered with (`details.headers`).
 */
function errorHeaders(error: MarinaError): Record<string, string> {
  const headers: Record<string, string> = {};
  const own = error.details?.headers;
  if (own && typeof own === 'object') for (const [k, v] of Object.entries(own)) headers[k.toLowerCase()] = String(v);
  if (isRetryable(error.code)) headers['retry-after'] = String(RETRY_AFTER_SECONDS);
  return headers;
}

/** One HTTP error answer, protocol-neutral: status, headers and the body's text. */
interface HttpErrorAnswer {
  statusCode: number;
  headers: Record<string, string>;
  body: string;
}

/** TorchServe REST: pretty-printed JSON ending in a newline, as TorchServe writes it. */
export function torchServeRestError(error: unknown): HttpErrorAnswer {
  const e = toMarinaError(error);
  return {
    statusCode: e.statusCode,
    headers: errorHeaders(e),
    body: `${JSON.stringify(torchServeErrorBody(e), null, 2)}\n`,
  };
}

/** Open Inference Protocol REST: `{"error": message}`, the stable code in `x-marina-error-code`. */
function oipRestError(error: unknown): HttpErrorAnswer {
  const e = toMarinaError(error);
  return {
    statusCode: e.statusCode,
    headers: { ...errorHeaders(e), 'x-marina-error-code': e.code },
    body: JSON.stringify({ error: boundText(e.message, MAX_REST_MESSAGE_CHARS) }),
  };
}

/** The HTTP status of a MarinaError → gRPC status code (as KServe and Triton map them). */
function grpcStatusOf(statusCode: number): grpc.status {
  if (statusCode === 400) return grpc.status.INVALID_ARGUMENT;
  // The client went away (MARINA_ERR_CLIENT_GONE): nobody reads it, but logs and spans name it.
  if (statusCode === 499) return grpc.status.CANCELLED;
  if (statusCode === 401) return grpc.status.UNAUTHENTICATED;
  if (statusCode === 403) return grpc.status.PERMISSION_DENIED;
  if (statusCode === 404) return grpc.status.NOT_FOUND;
  if (statusCode === 405) return grpc.status.UNIMPLEMENTED;
  if (statusCode === 409) return grpc.status.ALREADY_EXISTS;
  if (statusCode === 413) return grpc.status.RESOURCE_EXHAUSTED;
  // A name or headers too long to be anything: the argument is wrong, not the server.
  if (statusCode === 414 || statusCode === 431) return grpc.status.INVALID_ARGUMENT;
  if (statusCode === 501) return grpc.status.UNIMPLEMENTED;
  if (statusCode === 503) return grpc.status.UNAVAILABLE;
  if (statusCode === 504) return grpc.status.DEADLINE_EXCEEDED;
  return grpc.status.INTERNAL;
}

/**
 * The text a gRPC answer carries: the OIP service sends Marina's message; TorchServe's gRPC
 * service sends TorchServe's exact text where it has one (its InferenceImpl sends the same
 * exception messages as its REST handlers), with Marina's guidance in `marina-hint` metadata.
 */
export type GrpcErrorForm = 'oip' | 'torchserve';

/** An error as both gRPC services send it: the mapped status, the message, and metadata with the code (and `retry-after` where a retry can succeed). */
export function grpcError(error: unknown, form: GrpcErrorForm = 'oip'): grpc.StatusObject {
  const e = toMarinaError(error);
  const metadata = new grpc.Metadata();
  metadata.set('marina-error-code', e.code);
  if (isRetryable(e.code)) metadata.set('retry-after', String(RETRY_AFTER_SECONDS));
  const text = form === 'torchserve' ? torchServeText(e) : { message: e.message };
  if (text.hint !== undefined) metadata.set('marina-hint', asciiHeaderValue(text.hint));
  return { code: grpcStatusOf(e.statusCode), details: boundText(text.message, MAX_GRPC_MESSAGE_CHARS), metadata };
}

/**
 * Longest status message a gRPC answer carries, characters. The message travels in the
 * `grpc-message` trailer: a trailer larger than the client's header-list limit (16 KiB in grpc-js)
 * is a protocol error that fails the call and the next calls on the same channel, so an echoed
 * input must never grow it.
 */
const MAX_GRPC_MESSAGE_CHARS = 1024;

/** A metadata value as HTTP/2 allows it: printable ASCII only, and bounded. */
function asciiHeaderValue(text: string): string {
  const ascii = text.replace(/[^\x20-\x7e]/g, '?');
  return ascii.length > 1024 ? `${ascii.slice(0, 1024)}… (${ascii.length} characters)` : ascii;
}

/**
 * ModelMesh's model-runtime SPI: a loadModel that failed before anything was registered. ModelMesh
 * reads INVALID_ARGUMENT and FAILED_PRECONDITION as "no attempt to load was made, no space is
 * used", so a client error (4xx) gets one of those two; the rest is grpcError's form.
 */
export function modelMeshRefusedLoadError(error: unknown): grpc.StatusObject {
  const e = toMarinaError(error);
  const status = grpcError(e);
  if (e.statusCode >= 400 && e.statusCode < 500)
    status.code = e.statusCode === 400 ? grpc.status.INVALID_ARGUMENT : grpc.status.FAILED_PRECONDITION;
  return status;
}

/** The same as a `ServiceError` to hand to a gRPC callback or a stream's `destroy`. */
export function grpcServiceError(error: unknown, form: GrpcErrorForm = 'oip'): grpc.ServiceError {
  const status = grpcError(error, form);
  return Object.assign(new Error(status.details), status);
}

/**
 * TorchServe gRPC's StreamPredictions2: a failed request is answered in the stream by a message
 * whose `status` is a google.rpc.Status (the call itself goes on), with TorchServe's text.
 */
export function torchServeGrpcStreamStatus(error: unknown): { code: number; message: string; details: [] } {
  const e = toMarinaError(error);
  return {
    code: grpcStatusOf(e.statusCode),
    message: boundText(torchServeText(e).message, MAX_GRPC_MESSAGE_CHARS),
    details: [],
  };
}

/**
 * Sends an error on a REST route in its protocol's form: the OIP body on a route that declares
 * `errorBody: 'oip'`, TorchServe's otherwise.
 */
export function sendError(reply: FastifyReply, error: unknown): FastifyReply {
  return send(reply, error, false);
}

/** sendError with TorchServe's no-cache and `Connection: close` headers: the management, metrics and token answers, and the token check. */
export function sendTorchServeError(reply: FastifyReply, error: unknown): FastifyReply {
  return send(reply, error, true);
}

function send(reply: FastifyReply, error: unknown, withTorchServeHeaders: boolean): FastifyReply {
  const e = toMarinaError(error);
  if (e.code === 'MARINA_ERR_INTERNAL') reply.log.error({ err: error }, e.message);
  const request = reply.request;
  const isOip = !request.is404 && request.routeOptions?.config?.errorBody === 'oip';
  const answer = isOip ? oipRestError(e) : torchServeRestError(e);
  if (withTorchServeHeaders) setTorchServeHeaders(request, reply, answer.statusCode);
  for (const k in answer.headers) reply.header(k, answer.headers[k]!);
  return reply.code(answer.statusCode).type('application/json').send(answer.body);
}
