import { createHandlerError } from './errors.ts';
import type { RequestRow } from './types.ts';

/**
 * The payload of one request as TorchServe's handlers read it: the `data` field, else `body`.
 * @throws MARINA_ERR_INPUT_MISSING when neither is present.
 */
export function rowPayload(row: RequestRow): unknown {
  const value = row.data ?? row.body;
  if (value === undefined || value === null) {
    const keys = Object.keys(row);
    throw createHandlerError.MARINA_ERR_INPUT_MISSING(
      `the request has no input: expected a raw body or a multipart field named 'data' or 'body'${keys.length > 0 ? ` (got fields: ${keys.join(', ')})` : ''}`,
    );
  }
  return value;
}

/** Bytes of a payload; a string is base64 as in TorchServe's image handlers. Returns undefined for parsed JSON values. */
export function payloadBytes(value: unknown): Buffer | undefined {
  if (Buffer.isBuffer(value)) return value;
  if (value instanceof Uint8Array) return Buffer.from(value.buffer, value.byteOffset, value.byteLength);
  if (value instanceof ArrayBuffer) return Buffer.from(value);
  if (typeof value === 'string') return Buffer.from(value, 'base64');
  return undefined;
}
