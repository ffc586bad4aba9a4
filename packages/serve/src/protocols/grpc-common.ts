/** What every gRPC adapter shares: the protos, status mapping, token checks and the unary wrapper. */
import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import type { MarinaError } from '@marina/errors';
import type { TokenAuthorization } from '../auth/token-authorization.ts';
import { toMarinaError } from '../errors.ts';
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
  if (statusCode === 499) return grpc.status.CANCELLED;
  if (statusCode === 401) return grpc.status.UNAUTHENTICATED;
  if (statusCode === 403) return grpc.status.PERMISSION_DENIED;
  if (statusCode === 404) return grpc.status.NOT_FOUND;
  if (statusCode === 405) return grpc.status.UNIMPLEMENTED;
  if (statusCode === 409) return grpc.status.ALREADY_EXISTS;
  if (statusCode === 413) return grpc.status.RESOURCE_EXHAUSTED;
  if (statusCode === 503) return grpc.status.UNAVAILABLE;
  if (statusCode === 504) return grpc.status.DEADLINE_EXCEEDED;
  return grpc.status.INTERNAL;
}

/** A MarinaError as a gRPC error: the mapped status, the message, and the code in `marina-error-code` metadata. */
export function toGrpcError(error: unknown): Partial<grpc.StatusObject> {
  const e: MarinaError = toMarinaError(error);
  const metadata = new grpc.Metadata();
  metadata.set('marina-error-code', e.code);
  return { code: grpcStatusOf(e.statusCode), details: e.message, metadata };
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
      details: `Token Authorization failed: ${why}; the ${keyType} key is in '${tokens.keyFilePath}'`,
      metadata,
    };
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
 * metadata carries the span's `traceparent`. undefined when tracing is off.
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
  const metadata = new grpc.Metadata();
  metadata.set('traceparent', requestTrace.traceparent);
  call.sendMetadata(metadata);
  return requestTrace;
}

/** Ends a call's span with its gRPC status (an error status for server faults: INTERNAL, UNAVAILABLE, DEADLINE_EXCEEDED …). */
export function endCallTrace(requestTrace: RequestTrace | undefined, code: grpc.status): void {
  if (requestTrace === undefined) return;
  requestTrace.end({
    attributes: { 'rpc.grpc.status_code': code },
    isError: SERVER_FAULTS.has(code),
    errorType: grpc.status[code],
  });
}

/** Status codes that are the server's fault, per OpenTelemetry's gRPC conventions (a span status of Error). */
const SERVER_FAULTS = new Set([
  grpc.status.UNKNOWN,
  grpc.status.DEADLINE_EXCEEDED,
  grpc.status.UNIMPLEMENTED,
  grpc.status.INTERNAL,
  grpc.status.UNAVAILABLE,
  grpc.status.DATA_LOSS,
]);

/**
 * Wraps a unary handler: token check, then the handler; a thrown MarinaError becomes its gRPC
 * status. A traced method gets a server span (see startCallTrace), passed to the handler.
 */
export function unary<Req, Res>(
  checkKey: KeyCheck,
  run: (request: Req, call: grpc.ServerUnaryCall<Req, Res>, trace: RequestTrace | undefined) => Res | Promise<Res>,
  traced?: TracedMethod,
): grpc.handleUnaryCall<Req, Res> {
  return (call, callback) => {
    const requestTrace = startCallTrace(call, traced);
    const denied = checkKey(call);
    if (denied) {
      endCallTrace(requestTrace, denied.code ?? grpc.status.UNAUTHENTICATED);
      return callback(denied as grpc.ServiceError);
    }
    Promise.resolve()
      .then(() => run(call.request, call, requestTrace))
      .then(
        (value) => {
          endCallTrace(requestTrace, grpc.status.OK);
          callback(null, value);
        },
        (error: unknown) => {
          const status = toGrpcError(error);
          endCallTrace(requestTrace, status.code ?? grpc.status.UNKNOWN);
          callback(status as grpc.ServiceError);
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
 * What a call tells the data plane beyond its message: its metadata as request headers (without
 * `authorization`; `x-marina-priority`, `x-marina-timeout-ms` and `traceparent` are read below the
 * protocols), its deadline (always honoured: a request not started by then is answered unrun),
 * and its cancellation (a queued request is dropped).
 */
export function callContext(
  call: AnyServerCall,
  arrivedAt: number,
): {
  headers: Record<string, string>;
  scheduling?: RequestScheduling;
  onClientGone: (cancel: () => void) => () => void;
} {
  const headers: Record<string, string> = {};
  for (const [k, v] of Object.entries(call.metadata.getMap()))
    if (k !== 'authorization') headers[k] = typeof v === 'string' ? v : v.toString('utf8');
  const deadline = call.getDeadline();
  const deadlineMs = deadline instanceof Date ? deadline.getTime() : deadline;
  // A stream carries many requests: each one's listener goes when it is answered.
  const onClientGone = (cancel: () => void) => {
    call.once('cancelled', cancel);
    return () => void call.off('cancelled', cancel);
  };
  if (!Number.isFinite(deadlineMs)) return { headers, onClientGone };
  return { headers, scheduling: { deadlineAt: arrivedAt + (deadlineMs - Date.now()) }, onClientGone };
}
