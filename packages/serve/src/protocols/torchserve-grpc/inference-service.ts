/**
 * TorchServe's InferenceAPIsService (Ping, Predictions, StreamPredictions, StreamPredictions2):
 * the request's `input` map becomes the handler's row (one key per entry, as multipart fields on
 * REST) and goes through the data plane's predict, like `/predictions`.
 */
import { randomUUID } from 'node:crypto';
import * as grpc from '@grpc/grpc-js';
import { createServeError } from '../../errors.ts';
import type { CompletePredictOptions, PredictResult } from '../../registry/model-registry.ts';
import type { DataPlane } from '../data-plane.ts';
import { grpcServiceError, torchServeGrpcStreamStatus } from '../error-map.ts';
import {
  callScheduling,
  endCallTrace,
  startCallTrace,
  unary,
  versionMetadata,
  withTraceparent,
  type KeyCheck,
} from '../grpc-common.ts';
import { metadataHeaders } from '../request-headers.ts';
import type { RequestTrace } from '../../tracing/tracing.ts';

const SERVICE = 'org.pytorch.serve.grpc.inference.InferenceAPIsService';

/** A call of any kind: what predict reads from it. */
type PredictCall = Parameters<typeof callScheduling>[0];

interface PredictionsRequest {
  model_name: string;
  model_version: string;
  input: Record<string, Buffer>;
  sequence_id?: string;
}

/**
 * Ends a stream with a status, the way grpc-js sends one from a server stream: an `error` event
 * carrying `code`, `details` and `metadata` (`destroy(error)` only resets the stream, and the
 * client is left waiting for its deadline).
 */
function failStream(
  call: grpc.ServerWritableStream<PredictionsRequest, unknown> | grpc.ServerDuplexStream<PredictionsRequest, unknown>,
  error: grpc.ServiceError,
): void {
  call.emit('error', error);
}

export function createTorchServeInferenceService(options: {
  dataPlane: DataPlane;
  checkKey: KeyCheck;
}): grpc.UntypedServiceImplementation {
  const { dataPlane, checkKey } = options;

  const predict = (request: PredictionsRequest, call: PredictCall, trace?: RequestTrace): Promise<PredictResult> => {
    const arrivedAt = performance.now();
    if (!request.model_name)
      return Promise.reject(createServeError.MARINA_ERR_BAD_REQUEST('Parameter model_name is required.'));
    if (Object.keys(request.input ?? {}).length === 0)
      return Promise.reject(
        createServeError.MARINA_ERR_BAD_REQUEST(
          "the request's input map is empty; put the model input under the key 'data'",
        ),
      );
    const headers = metadataHeaders(call.metadata);
    const { scheduling, onClientGone } = callScheduling(call, arrivedAt);
    // Every field named, not spread: see CompletePredictOptions.
    const options: CompletePredictOptions = {
      modelName: request.model_name,
      modelVersion: request.model_version || undefined,
      requestedVersion: undefined,
      requestId: randomUUID(),
      input: { ...request.input },
      headers,
      arrivedAt,
      bodyDecoding: undefined,
      scheduling,
      onClientGone,
      trace,
    };
    return dataPlane.predict(options);
  };

  const isHealthy = () => dataPlane.isReady();

  return {
    Ping: unary(
      checkKey,
      () => ({ health: JSON.stringify({ status: isHealthy() ? 'Healthy' : 'Unhealthy' }, null, 2) }),
      'torchserve',
    ),
    Predictions: unary<PredictionsRequest, unknown>(
      checkKey,
      async (request, call, trace) => {
        const result = await predict(request, call, trace);
        call.sendMetadata(versionMetadata(result.modelVersion));
        return { prediction: result.body };
      },
      'torchserve',
      { tracing: dataPlane.tracing, service: SERVICE, method: 'Predictions', protocol: 'torchserve-grpc' },
    ),
    /** Marina's handlers answer once, so the stream carries one message. */
    StreamPredictions: (call: grpc.ServerWritableStream<PredictionsRequest, unknown>) => {
      const trace = startCallTrace(call, {
        tracing: dataPlane.tracing,
        service: SERVICE,
        method: 'StreamPredictions',
        protocol: 'torchserve-grpc',
      });
      const fail = (error: unknown) => {
        const serviceError = withTraceparent(grpcServiceError(error, 'torchserve'), trace);
        endCallTrace(trace, serviceError.code);
        failStream(call, serviceError);
      };
      const denied = checkKey(call);
      if (denied) return fail(denied);
      predict(call.request, call, trace).then((result) => {
        endCallTrace(trace, grpc.status.OK);
        call.sendMetadata(versionMetadata(result.modelVersion));
        call.write({ prediction: result.body });
        call.end();
      }, fail);
    },
    /**
     * Each request is answered in order of completion; a failed one gets a `status` in its response, as TorchServe does.
     * Traced, the call gets a server span (with an `rpc.message` event per message received and
     * sent, as OpenTelemetry's RPC conventions ask of streams) and each message a span of its own
     * under it, with the job's admission, queue and stage spans: a message is a request.
     */
    StreamPredictions2: (call: grpc.ServerDuplexStream<PredictionsRequest, unknown>) => {
      const callTrace = startCallTrace(call, {
        tracing: dataPlane.tracing,
        service: SERVICE,
        method: 'StreamPredictions2',
        protocol: 'torchserve-grpc',
      });
      const denied = checkKey(call);
      if (denied) {
        const error = withTraceparent(grpcServiceError(denied, 'torchserve'), callTrace);
        endCallTrace(callTrace, error.code);
        return failStream(call, error);
      }
      // The response headers go at once, so a client finds the call's traceparent before any answer.
      if (callTrace !== undefined) call.sendMetadata(new grpc.Metadata());
      const running = new Set<Promise<void>>();
      let received = 0;
      let sent = 0;
      const answer = (message: unknown) => {
        call.write(message);
        callTrace?.addMessageEvent('SENT', ++sent);
      };
      call.on('data', (request: PredictionsRequest) => {
        const startedAt = performance.now();
        const id = ++received;
        callTrace?.addMessageEvent('RECEIVED', id);
        const sequence = request.sequence_id ? { sequence_id: request.sequence_id } : {};
        const messageTrace = callTrace?.tracing.startMessage(callTrace, {
          name: `${SERVICE}/StreamPredictions2 message`,
          protocol: 'torchserve-grpc',
          startedAt,
          attributes: {
            'rpc.system': 'grpc',
            'rpc.service': SERVICE,
            'rpc.method': 'StreamPredictions2',
            'rpc.message.id': id,
            ...(request.sequence_id ? { 'marina.sequence.id': request.sequence_id.slice(0, 128) } : {}),
          },
        });
        const done = (
          request.sequence_id
            ? predict(request, call, messageTrace)
            : Promise.reject(createServeError.MARINA_ERR_BAD_REQUEST('Parameter sequenceId is required.'))
        ).then(
          (result) => {
            endCallTrace(messageTrace, grpc.status.OK);
            answer({ prediction: result.body, ...sequence });
          },
          (error: unknown) => {
            const status = torchServeGrpcStreamStatus(error);
            endCallTrace(messageTrace, status.code);
            answer({ ...sequence, status });
          },
        );
        running.add(done);
        void done.finally(() => running.delete(done));
      });
      call.on('end', () => {
        void Promise.all(running).then(() => {
          endCallTrace(callTrace, grpc.status.OK);
          call.end();
        });
      });
      // A client that cancels (or a broken stream) ends the call's span too; a later end is a no-op.
      call.on('cancelled', () => endCallTrace(callTrace, grpc.status.CANCELLED));
    },
  };
}
