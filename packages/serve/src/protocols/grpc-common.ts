/** What every gRPC adapter shares: the protos, status mapping, token checks and the unary wrapper. */
import { basename } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import type { MarinaError } from '@marina/errors';
import type { TokenAuthorization } from '../auth/token-authorization.ts';
import { boundText } from '../bounded-text.ts';
import { toMarinaError } from '../errors.ts';

const PROTO_DIR = fileURLToPath(new URL('../../protos/', import.meta.url));

/** proto-loader options: field names as in the .proto files, 64-bit integers as numbers, bytes as Buffers. */
export const PROTO_LOADER_OPTIONS: protoLoader.Options = {
  keepCase: true,
  longs: Number,
  enums: String,
  defaults: true,
  oneofs: true,
  includeDirs: [PROTO_DIR],
};

/** Loads one of the .proto files shipped in packages/serve/protos (for servers and test clients). */
export function loadProto(
  file: 'grpc_predict_v2.proto' | 'open_inference_grpc.proto' | 'inference.proto' | 'management.proto',
): grpc.GrpcObject {
  return grpc.loadPackageDefinition(protoLoader.loadSync(file, PROTO_LOADER_OPTIONS));
}

/** Looks up a service's definition in a loaded package by its dotted name. */
export function serviceOf(pkg: grpc.GrpcObject, dotted: string): grpc.ServiceDefinition {
  let node: unknown = pkg;
  for (const part of dotted.split('.')) node = (node as Record<string, unknown>)[part];
  return (node as { service: grpc.ServiceDefinition }).service;
}

/** HTTP status of a MarinaError → gRPC status code. */
export function grpcStatusOf(statusCode: number): grpc.status {
  if (statusCode === 400) return grpc.status.INVALID_ARGUMENT;
  if (statusCode === 401) return grpc.status.UNAUTHENTICATED;
  if (statusCode === 403) return grpc.status.PERMISSION_DENIED;
  if (statusCode === 404) return grpc.status.NOT_FOUND;
  if (statusCode === 405) return grpc.status.UNIMPLEMENTED;
  if (statusCode === 409) return grpc.status.ALREADY_EXISTS;
  if (statusCode === 413 || statusCode === 507) return grpc.status.RESOURCE_EXHAUSTED;
  if (statusCode === 414 || statusCode === 431) return grpc.status.INVALID_ARGUMENT;
  if (statusCode === 503) return grpc.status.UNAVAILABLE;
  if (statusCode === 504) return grpc.status.DEADLINE_EXCEEDED;
  return grpc.status.INTERNAL;
}

/**
 * Longest status message sent, characters. The message travels in the `grpc-message` trailer: a
 * trailer larger than the client's header-list limit (16 KiB in grpc-js) is a protocol error that
 * fails the call and the calls after it on the same channel, so an echoed input must never grow it.
 */
export const MAX_STATUS_CHARS = 1024;

/** A MarinaError as a gRPC error: the mapped status, the message (bounded), and the code in `marina-error-code` metadata. */
export function toGrpcError(error: unknown): Partial<grpc.StatusObject> {
  const e: MarinaError = toMarinaError(error);
  const metadata = new grpc.Metadata();
  metadata.set('marina-error-code', e.code);
  return { code: grpcStatusOf(e.statusCode), details: boundText(e.message, MAX_STATUS_CHARS), metadata };
}

export type KeyCheck = (call: { metadata: grpc.Metadata }) => Partial<grpc.StatusObject> | undefined;

/** Token authorization for one API: undefined when the call carries the key, else the UNAUTHENTICATED error. */
export function createKeyCheck(tokens: TokenAuthorization | undefined, keyType: 'inference' | 'management'): KeyCheck {
  return (call) => {
    if (!tokens) return undefined;
    const value = call.metadata.get('authorization')[0];
    const result = tokens.check(keyType, typeof value === 'string' ? value : value?.toString('utf8'));
    if (result === 'ok') return undefined;
    const why =
      result === 'missing'
        ? `the call has no 'authorization: Bearer <key>' metadata`
        : result === 'expired'
          ? `the ${keyType} key expired (keys last ${tokens.tokenExpirationMin} min); rotate it with /token?type=${keyType}`
          : result === 'malformed'
            ? `the 'authorization' metadata must be 'Bearer <key>', one key without spaces`
            : `the key is incorrect for the ${keyType} API`;
    const metadata = new grpc.Metadata();
    metadata.set(
      'marina-error-code',
      result === 'missing'
        ? 'MARINA_ERR_TOKEN_MISSING'
        : result === 'expired'
          ? 'MARINA_ERR_TOKEN_EXPIRED'
          : 'MARINA_ERR_TOKEN_INVALID',
    );
    return {
      code: grpc.status.UNAUTHENTICATED,
      // The file's name only: a client without a key must not learn the server's paths.
      details: `Token Authorization failed: ${why}; the ${keyType} key is in the server's ${basename(tokens.keyFilePath)}`,
      metadata,
    };
  };
}

/** Wraps a unary handler: token check, then the handler; a thrown MarinaError becomes its gRPC status. */
export function unary<Req, Res>(
  checkKey: KeyCheck,
  run: (request: Req, call: grpc.ServerUnaryCall<Req, Res>) => Res | Promise<Res>,
): grpc.handleUnaryCall<Req, Res> {
  return (call, callback) => {
    const denied = checkKey(call);
    if (denied) return callback(denied as grpc.ServiceError);
    Promise.resolve()
      .then(() => run(call.request, call))
      .then(
        (value) => callback(null, value),
        (error: unknown) => callback(toGrpcError(error) as grpc.ServiceError),
      );
  };
}
