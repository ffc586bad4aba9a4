/**
 * TorchServe's InferenceAPIsService (Ping, Predictions, StreamPredictions, StreamPredictions2):
 * the request's `input` map becomes the handler's row (one key per entry, as multipart fields on
 * REST) and goes through the registry's predict path like `/predictions`.
 */
import { randomUUID } from 'node:crypto';
import * as grpc from '@grpc/grpc-js';
import { createServeError, toMarinaError } from '../../errors.ts';
import type { JobResult } from '../../scheduling/job.ts';
import type { DataPlane } from '../data-plane.ts';
import {
  callContext,
  endCallTrace,
  grpcStatusOf,
  startCallTrace,
  toGrpcError,
  unary,
  type KeyCheck,
} from '../grpc-common.ts';
import type { RequestTrace } from '../../tracing/tracing.ts';

const SERVICE = 'org.pytorch.serve.grpc.inference.InferenceAPIsService';

interface PredictionsRequest {
  model_name: string;
  model_version: string;
  input: Record<string, Buffer>;
  sequence_id?: string;
}

export function createTorchServeInferenceService(options: {
  dataPlane: DataPlane;
  checkKey: KeyCheck;
}): grpc.UntypedServiceImplementation {
  const { dataPlane, checkKey } = options;

  const predict = (
    request: PredictionsRequest,
    call: Parameters<typeof callContext>[0],
    trace?: RequestTrace,
  ): Promise<JobResult> => {
    const arrivedAt = performance.now();
    if (!request.model_name)
      return Promise.reject(createServeError.MARINA_ERR_BAD_REQUEST('Parameter model_name is required.'));
    if (Object.keys(request.input ?? {}).length === 0)
      return Promise.reject(
        createServeError.MARINA_ERR_BAD_REQUEST(
          "the request's input map is empty; put the model input under the key 'data'",
        ),
      );
    const { headers, scheduling, onClientGone } = callContext(call, arrivedAt);
    return dataPlane.predict({
      modelName: request.model_name,
      modelVersion: request.model_version || undefined,
      requestId: randomUUID(),
      input: { ...request.input },
      headers,
      arrivedAt,
      ...(scheduling ? { scheduling } : {}),
      onClientGone,
      ...(trace ? { trace } : {}),
    });
  };

  const isHealthy = () => dataPlane.isReady();

  return {
    Ping: unary(checkKey, () => ({
      health: JSON.stringify({ status: isHealthy() ? 'Healthy' : 'Unhealthy' }, null, 2),
    })),
    Predictions: unary<PredictionsRequest, unknown>(
      checkKey,
      async (request, call, trace) => ({ prediction: (await predict(request, call, trace)).body }),
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
      const denied = checkKey(call);
      if (denied) {
        endCallTrace(trace, denied.code ?? grpc.status.UNAUTHENTICATED);
        return call.destroy(Object.assign(new Error(denied.details), denied));
      }
      predict(call.request, call, trace).then(
        (result) => {
          endCallTrace(trace, grpc.status.OK);
          call.write({ prediction: result.body });
          call.end();
        },
        (error: unknown) => {
          const status = toGrpcError(error);
          endCallTrace(trace, status.code ?? grpc.status.UNKNOWN);
          call.destroy(Object.assign(new Error(toMarinaError(error).message), status));
        },
      );
    },
    /** Each request is answered in order of completion; a failed one gets a `status` in its response, as TorchServe does. */
    StreamPredictions2: (call: grpc.ServerDuplexStream<PredictionsRequest, unknown>) => {
      const denied = checkKey(call);
      if (denied) return call.destroy(Object.assign(new Error(denied.details), denied));
      const running = new Set<Promise<void>>();
      call.on('data', (request: PredictionsRequest) => {
        const sequence = request.sequence_id ? { sequence_id: request.sequence_id } : {};
        const done = (
          request.sequence_id
            ? predict(request, call)
            : Promise.reject(createServeError.MARINA_ERR_BAD_REQUEST('Parameter sequenceId is required.'))
        ).then(
          (result) => void call.write({ prediction: result.body, ...sequence }),
          (error: unknown) => {
            const e = toMarinaError(error);
            call.write({ ...sequence, status: { code: grpcStatusOf(e.statusCode), message: e.message, details: [] } });
          },
        );
        running.add(done);
        void done.finally(() => running.delete(done));
      });
      call.on('end', () => {
        void Promise.all(running).then(() => call.end());
      });
    },
  };
}
