import type { IncomingHttpHeaders } from 'node:http';
import type * as grpc from '@grpc/grpc-js';

/**
 * A request's headers as the handler receives them on every protocol: lower-case names, string
 * values, a repeated one joined with ', '. Node's own object when none is a list (nearly always),
 * so the common request copies nothing.
 */
export function flattenHeaders(headers: IncomingHttpHeaders): Record<string, string> {
  for (const k in headers) {
    if (typeof headers[k] === 'string') continue;
    const copy: Record<string, string> = {};
    for (const name in headers) {
      const v = headers[name];
      if (v !== undefined) copy[name] = Array.isArray(v) ? v.join(', ') : v;
    }
    return copy;
  }
  return headers as Record<string, string>;
}

/** A gRPC call's metadata as headers (the same form as flattenHeaders), without the credentials. */
export function metadataHeaders(metadata: grpc.Metadata): Record<string, string> {
  const headers: Record<string, string> = {};
  for (const [k, v] of Object.entries(metadata.getMap()))
    if (k !== 'authorization') headers[k] = typeof v === 'string' ? v : v.toString('utf8');
  return headers;
}
