/**
 * TorchServe's InferenceAPIsService (Ping, Predictions, StreamPredictions, StreamPredictions2):
 * the request's `input` map becomes the handler's row (one key per entry, as multipart fields on
 * REST) and goes through the registry's predict path like `/predictions`.
 */
import { randomUUID } from 'node:crypto';
import type * as grpc from '@grpc/grpc-js';
import { createServeError } from '../../errors.ts';
import type { PredictResult } from '../../registry/model-registry.ts';
import type { DataPlane } from '../data-plane.ts';
import { grpcServiceError, torchServeGrpcStreamStatus } from '../error-map.ts';
import { unary, versionMetadata, type KeyCheck } from '../grpc-common.ts';
import { metadataHeaders } from '../request-headers.ts';

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

  const predict = (request: PredictionsRequest, metadata: grpc.Metadata): Promise<PredictResult> => {
    const arrivedAt = performance.now();
    if (!request.model_name)
      return Promise.reject(createServeError.MARINA_ERR_BAD_REQUEST('Parameter model_name is required.'));
    if (Object.keys(request.input ?? {}).length === 0)
      return Promise.reject(
        createServeError.MARINA_ERR_BAD_REQUEST(
          "the request's input map is empty; put the model input under the key 'data'",
        ),
      );
    const headers = metadataHeaders(metadata);
    return dataPlane.predict({
      modelName: request.model_name,
      modelVersion: request.model_version || undefined,
      requestId: randomUUID(),
      input: { ...request.input },
      headers,
      arrivedAt,
    });
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
      async (request, call) => {
        const result = await predict(request, call.metadata);
        call.sendMetadata(versionMetadata(result.modelVersion));
        return { prediction: result.body };
      },
      'torchserve',
    ),
    /** Marina's handlers answer once, so the stream carries one message. */
    StreamPredictions: (call: grpc.ServerWritableStream<PredictionsRequest, unknown>) => {
      const denied = checkKey(call);
      if (denied) return call.destroy(grpcServiceError(denied, 'torchserve'));
      predict(call.request, call.metadata).then(
        (result) => {
          call.sendMetadata(versionMetadata(result.modelVersion));
          call.write({ prediction: result.body });
          call.end();
        },
        (error: unknown) => call.destroy(grpcServiceError(error, 'torchserve')),
      );
    },
    /** Each request is answered in order of completion; a failed one gets a `status` in its response, as TorchServe does. */
    StreamPredictions2: (call: grpc.ServerDuplexStream<PredictionsRequest, unknown>) => {
      const denied = checkKey(call);
      if (denied) return call.destroy(grpcServiceError(denied, 'torchserve'));
      const running = new Set<Promise<void>>();
      call.on('data', (request: PredictionsRequest) => {
        const sequence = request.sequence_id ? { sequence_id: request.sequence_id } : {};
        const done = (
          request.sequence_id
            ? predict(request, call.metadata)
            : Promise.reject(createServeError.MARINA_ERR_BAD_REQUEST('Parameter sequenceId is required.'))
        ).then(
          (result) => void call.write({ prediction: result.body, ...sequence }),
          (error: unknown) => void call.write({ ...sequence, status: torchServeGrpcStreamStatus(error) }),
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
