/**
 * TorchServe's response conventions, shared by the management, metrics and auth code:
 * pretty-printed JSON with a trailing newline, no-cache headers, `x-request-id`, and
 * `Connection: close` on any status of 400 or above. Errors reach the wire through
 * protocols/error-map.ts, which uses these headers.
 */
import type { FastifyReply, FastifyRequest } from 'fastify';

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
