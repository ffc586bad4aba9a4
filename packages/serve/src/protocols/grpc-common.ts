/** What every gRPC adapter shares: the protos, token checks and the unary wrapper (errors map to gRPC in error-map.ts). */
import { basename } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import type { MarinaError } from '@marina/errors';
import { authErrors } from '../auth/auth-errors.ts';
import type { TokenAuthorization } from '../auth/token-authorization.ts';
import { grpcServiceError, type GrpcErrorForm } from './error-map.ts';
import { MODEL_VERSION_HEADER } from './data-plane.ts';
import type { RequestScheduling } from '../scheduling/queue-policy.ts';
import type { RequestTrace, TracedProtocol, Tracing } from '../tracing/tracing.ts';

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
          : result === 'malformed'
            ? `the 'authorization' metadata must be 'Bearer <key>', one key without spaces`
            : `the key is incorrect for the ${keyType} API`;
    const create =
      result === 'missing'
        ? authErrors.create.MARINA_ERR_TOKEN_MISSING
        : result === 'expired'
          ? authErrors.create.MARINA_ERR_TOKEN_EXPIRED
          : authErrors.create.MARINA_ERR_TOKEN_INVALID;
    // The file's name only: a client without a key must not learn the server's paths.
    return create(
      `Token Authorization failed: ${why}; the ${keyType} key is in the server's ${basename(tokens.keyFilePath)}`,
    );
  };
}

/** A traced gRPC method: the server's tracing (undefined when off) and the method's names. */
export interface TracedMethod {
  tracing: Tracing | undefined;
  /** `inference.GRPCInferenceService`, `org.pytorch.serve.grpc.inference.InferenceAPIsService`. */
  service: string;
  method: string;
  protocol: TracedProtocol;
}

/**
 * A call's server span, joined to the `traceparent`/`tracestate` in its metadata; its response
 * metadata carries the span's `traceparent` (added to whatever metadata the call sends: a call
 * sends its response metadata once). undefined when tracing is off.
 */
export function startCallTrace(
  call: { metadata: grpc.Metadata; sendMetadata(metadata: grpc.Metadata): void; getPeer(): string },
  traced: TracedMethod | undefined,
): RequestTrace | undefined {
  if (traced?.tracing === undefined) return undefined;
  const text = (key: string) => {
    const value = call.metadata.get(key)[0];
    return value === undefined ? undefined : typeof value === 'string' ? value : value.toString('utf8');
  };
  const requestTrace = traced.tracing.startRequest({
    name: `${traced.service}/${traced.method}`,
    protocol: traced.protocol,
    headers: { traceparent: text('traceparent'), tracestate: text('tracestate') },
    startedAt: performance.now(),
    attributes: {
      'rpc.system': 'grpc',
      'rpc.service': traced.service,
      'rpc.method': traced.method,
      'network.peer.address': call.getPeer(),
    },
  });
  const send = call.sendMetadata.bind(call);
  call.sendMetadata = (metadata: grpc.Metadata) => {
    metadata.set('traceparent', requestTrace.traceparent);
    send(metadata);
  };
  return requestTrace;
}

/** An error answered on a traced call carries its `traceparent` too (in the status metadata: an error may be sent without response headers). */
export function withTraceparent(error: grpc.ServiceError, requestTrace: RequestTrace | undefined): grpc.ServiceError {
  if (requestTrace === undefined) return error;
  error.metadata ??= new grpc.Metadata();
  error.metadata.set('traceparent', requestTrace.traceparent);
  return error;
}

/** Status codes that are the server's fault, per OpenTelemetry's gRPC conventions (a span status of Error). */
const SERVER_FAULTS: ReadonlySet<grpc.status> = new Set([
  grpc.status.UNKNOWN,
  grpc.status.DEADLINE_EXCEEDED,
  grpc.status.UNIMPLEMENTED,
  grpc.status.INTERNAL,
  grpc.status.UNAVAILABLE,
  grpc.status.DATA_LOSS,
]);

/** Ends a call's span with its gRPC status (an error status for server faults: INTERNAL, UNAVAILABLE, DEADLINE_EXCEEDED …). */
export function endCallTrace(requestTrace: RequestTrace | undefined, code: grpc.status): void {
  if (requestTrace === undefined) return;
  requestTrace.end({
    statusAttribute: 'rpc.grpc.status_code',
    status: code,
    isError: SERVER_FAULTS.has(code),
    errorType: grpc.status[code],
  });
}

/**
 * Wraps a unary handler: token check, then the handler; a thrown MarinaError becomes its gRPC
 * status, with the text of the service's protocol (`form`: TorchServe's service sends TorchServe's
 * texts). A traced method gets a server span (see startCallTrace), passed to the handler.
 */
export function unary<Req, Res>(
  checkKey: KeyCheck,
  run: (request: Req, call: grpc.ServerUnaryCall<Req, Res>, trace: RequestTrace | undefined) => Res | Promise<Res>,
  form: GrpcErrorForm = 'oip',
  traced?: TracedMethod,
): grpc.handleUnaryCall<Req, Res> {
  return (call, callback) => {
    const requestTrace = startCallTrace(call, traced);
    const denied = checkKey(call);
    if (denied) {
      const error = withTraceparent(grpcServiceError(denied, form), requestTrace);
      endCallTrace(requestTrace, error.code);
      return callback(error);
    }
    Promise.resolve()
      .then(() => run(call.request, call, requestTrace))
      .then(
        (value) => {
          if (requestTrace !== undefined) {
            endCallTrace(requestTrace, grpc.status.OK);
            // No-op when the handler already sent its metadata (with the traceparent added).
            call.sendMetadata(new grpc.Metadata());
          }
          callback(null, value);
        },
        (error: unknown) => {
          const serviceError = withTraceparent(grpcServiceError(error, form), requestTrace);
          endCallTrace(requestTrace, serviceError.code);
          callback(serviceError);
        },
      );
  };
}

/** A server call of any kind: its metadata, deadline and cancellation. */
interface AnyServerCall {
  readonly metadata: grpc.Metadata;
  getDeadline(): grpc.Deadline;
  once(event: 'cancelled', listener: () => void): unknown;
  off(event: 'cancelled', listener: () => void): unknown;
}

/**
 * What a call tells the data plane beyond its message: its deadline (always honoured: a request
 * not started by then is answered unrun) and its cancellation (a queued request is dropped).
 * Its metadata's `x-marina-priority`, `x-marina-timeout-ms` and `traceparent` are read below
 * the protocols, with the request's headers.
 */
export function callScheduling(
  call: AnyServerCall,
  arrivedAt: number,
): { scheduling?: RequestScheduling; onClientGone: (cancel: () => void) => () => void } {
  const deadline = call.getDeadline();
  const deadlineMs = deadline instanceof Date ? deadline.getTime() : deadline;
  // A stream carries many requests: each one's listener goes when it is answered.
  const onClientGone = (cancel: () => void) => {
    call.once('cancelled', cancel);
    return () => void call.off('cancelled', cancel);
  };
  if (!Number.isFinite(deadlineMs)) return { onClientGone };
  return { scheduling: { deadlineAt: arrivedAt + (deadlineMs - Date.now()) }, onClientGone };
}
