/** What every gRPC adapter shares: the protos, token checks and the unary wrapper (errors map to gRPC in error-map.ts). */
import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import type { MarinaError } from '@marina/errors';
import { authErrors } from '../auth/auth-errors.ts';
import type { TokenAuthorization } from '../auth/token-authorization.ts';
import { grpcServiceError, type GrpcErrorForm } from './error-map.ts';
import { MODEL_VERSION_HEADER } from './data-plane.ts';

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
  file:
    | 'grpc_predict_v2.proto'
    | 'open_inference_grpc.proto'
    | 'inference.proto'
    | 'management.proto'
    | 'marina_management.proto'
    | 'marina_residency.proto'
    | 'model-runtime.proto',
): grpc.GrpcObject {
  return grpc.loadPackageDefinition(protoLoader.loadSync(file, PROTO_LOADER_OPTIONS));
}

/** Looks up a service's definition in a loaded package by its dotted name. */
export function serviceOf(pkg: grpc.GrpcObject, dotted: string): grpc.ServiceDefinition {
  let node: unknown = pkg;
  for (const part of dotted.split('.')) node = (node as Record<string, unknown>)[part];
  return (node as { service: grpc.ServiceDefinition }).service;
}

/** Response metadata saying which model version answered (`x-marina-model-version`). */
export function versionMetadata(modelVersion: string): grpc.Metadata {
  const metadata = new grpc.Metadata();
  metadata.set(MODEL_VERSION_HEADER, modelVersion);
  return metadata;
}

export type KeyCheck = (call: { metadata: grpc.Metadata }) => MarinaError | undefined;

/** Token authorization for one API: undefined when the call carries the key, else the token error (UNAUTHENTICATED on the wire). */
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
          : `the key is incorrect for the ${keyType} API`;
    const create =
      result === 'missing'
        ? authErrors.create.MARINA_ERR_TOKEN_MISSING
        : result === 'expired'
          ? authErrors.create.MARINA_ERR_TOKEN_EXPIRED
          : authErrors.create.MARINA_ERR_TOKEN_INVALID;
    return create(`Token Authorization failed: ${why}; the ${keyType} key is in '${tokens.keyFilePath}'`);
  };
}

/**
 * Wraps a unary handler: token check, then the handler; a thrown MarinaError becomes its gRPC
 * status, with the text of the service's protocol (`form`: TorchServe's service sends TorchServe's texts).
 */
export function unary<Req, Res>(
  checkKey: KeyCheck,
  run: (request: Req, call: grpc.ServerUnaryCall<Req, Res>) => Res | Promise<Res>,
  form: GrpcErrorForm = 'oip',
): grpc.handleUnaryCall<Req, Res> {
  return (call, callback) => {
    const denied = checkKey(call);
    if (denied) return callback(grpcServiceError(denied, form));
    Promise.resolve()
      .then(() => run(call.request, call))
      .then(
        (value) => callback(null, value),
        (error: unknown) => callback(grpcServiceError(error, form)),
      );
  };
}
