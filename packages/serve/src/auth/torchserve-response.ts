/**
 * TorchServe's response conventions, shared by the management, metrics and auth code:
 * pretty-printed JSON with a trailing newline, no-cache headers, `x-request-id`, and
 * `Connection: close` on any status of 400 or above.
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import { isMarinaError } from '@marina/errors';
import { torchServeErrorType } from '../errors.ts';

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

/** TorchServe's error body, plus Marina's stable code where there is one. */
export interface TorchServeErrorBody {
  code: number;
  type: string;
  message: string;
  marinaCode?: string;
}

/** Sets TorchServe's common headers on a reply (no body written). */
export function setTorchServeHeaders(request: FastifyRequest, reply: FastifyReply, statusCode: number): void {
  reply
    .header('x-request-id', request.id)
    .header('Cache-Control', 'no-cache; no-store, must-revalidate, private')
    .header('Pragma', 'no-cache')
    .header('Expires', 'Thu, 01 Jan 1970 00:00:00 GMT');
  if (statusCode >= 400) reply.header('Connection', 'close');
}

/** Sends `body` as TorchServe does: pretty-printed JSON ending in a newline. */
export function sendTorchServeJson(
  request: FastifyRequest,
  reply: FastifyReply,
  statusCode: number,
  body: unknown,
): FastifyReply {
  setTorchServeHeaders(request, reply, statusCode);
  return reply
    .code(statusCode)
    .type('application/json')
    .send(`${JSON.stringify(body, null, 2)}\n`);
}

/** The Java exception name TorchServe reports for a status code (errors.ts holds the one map). */
export function torchServeExceptionType(statusCode: number): string {
  return torchServeErrorType(undefined, statusCode);
}

/**
 * Turns any thrown value into TorchServe's error body. A MarinaError keeps its status and
 * message and adds `marinaCode`; its `type` comes from the one map in errors.ts.
 */
export function toTorchServeError(error: unknown): TorchServeErrorBody {
  if (isMarinaError(error)) {
    return {
      code: error.statusCode,
      type: torchServeErrorType(error.code, error.statusCode),
      message: error.message,
      marinaCode: error.code,
    };
  }
  const statusCode =
    typeof (error as { statusCode?: unknown })?.statusCode === 'number'
      ? (error as { statusCode: number }).statusCode
      : 500;
  const message = error instanceof Error ? error.message : String(error);
  return { code: statusCode, type: torchServeExceptionType(statusCode), message };
}

/** Sends a thrown value as TorchServe's error body with its status. */
export function sendTorchServeError(request: FastifyRequest, reply: FastifyReply, error: unknown): FastifyReply {
  const body = toTorchServeError(error);
  if (!request.is404 && request.routeOptions?.config?.errorBody === 'oip') {
    // An Open Inference Protocol route: the protocol's body, the stable code in a header (as the v2 routes send their own errors).
    setTorchServeHeaders(request, reply, body.code);
    if (body.marinaCode) reply.header('x-marina-error-code', body.marinaCode);
    return reply
      .code(body.code)
      .type('application/json')
      .send(JSON.stringify({ error: body.message }));
  }
  return sendTorchServeJson(request, reply, body.code, body);
}
