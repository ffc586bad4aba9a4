/**
 * One table: every error code a server can answer with, on each of the four protocols (TorchServe
 * REST, OIP REST, OIP gRPC, TorchServe gRPC, unary and in-stream), through the real adapters on real
 * HTTP (inject) and real gRPC on loopback. A stand-in data plane fails each request with the code
 * its model name names, so every code reaches each adapter the way a real failure does.
 */
import * as grpc from '@grpc/grpc-js';
import Fastify, { type FastifyInstance } from 'fastify';
import { MarinaError } from '@marina/errors';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { allErrorCodes } from '../../../scripts/error-registries.ts';
import type { DataPlane } from '../src/protocols/data-plane.ts';
import { loadProto, serviceOf } from '../src/protocols/grpc-common.ts';
import { createOipGrpcService } from '../src/protocols/oip-grpc/oip-grpc-service.ts';
import { oipRestRoutes } from '../src/protocols/oip-rest/oip-rest-routes.ts';
import { createTorchServeInferenceService } from '../src/protocols/torchserve-grpc/inference-service.ts';
import { inferenceRoutes } from '../src/routes/inference.ts';
import { clientPackage, grpcClient, grpcErrorOf, unaryCall } from './oip-harness.ts';

const served = allErrorCodes().filter(({ registry }) => registry.isServed);
const statusOf = new Map(served.map(({ code, definition }) => [code, definition.statusCode]));

/** The codes whose answer says when to come back: a retry of the same request can succeed. */
const RETRY_AFTER = [
  'MARINA_ERR_QUEUE_FULL',
  'MARINA_ERR_CLIENT_TIMEOUT',
  'MARINA_ERR_SERVER_CLOSING',
  'MARINA_ERR_MODEL_UNLOADING',
  'MARINA_ERR_DOWNLOADS_BUSY',
  'MARINA_ERR_MEMORY_BUDGET_FULL',
];

/** HTTP status → the gRPC status the same error gets. */
const GRPC_STATUS: Record<number, grpc.status> = {
  400: grpc.status.INVALID_ARGUMENT,
  499: grpc.status.CANCELLED,
  401: grpc.status.UNAUTHENTICATED,
  403: grpc.status.PERMISSION_DENIED,
  404: grpc.status.NOT_FOUND,
  405: grpc.status.UNIMPLEMENTED,
  409: grpc.status.ALREADY_EXISTS,
  413: grpc.status.RESOURCE_EXHAUSTED,
  414: grpc.status.INVALID_ARGUMENT,
  431: grpc.status.INVALID_ARGUMENT,
  501: grpc.status.UNIMPLEMENTED,
  503: grpc.status.UNAVAILABLE,
  504: grpc.status.DEADLINE_EXCEEDED,
};
const grpcStatusFor = (statusCode: number) => GRPC_STATUS[statusCode] ?? grpc.status.INTERNAL;

/** TorchServe's exception names, where the code's own differs from its status's (checked against TorchServe's frontend). */
const TORCHSERVE_TYPE: Record<string, string> = {
  MARINA_ERR_MODEL_NOT_FOUND: 'ModelNotFoundException',
  MARINA_ERR_MODEL_VERSION_NOT_FOUND: 'ModelVersionNotFoundException',
  MARINA_ERR_ROUTE_NOT_FOUND: 'ResourceNotFoundException',
  MARINA_ERR_QUEUE_FULL: 'ServiceUnavailableException',
  MARINA_ERR_NO_WORKERS: 'ServiceUnavailableException',
  MARINA_ERR_RESPONSE_TIMEOUT: 'RequestTimeoutException',
  MARINA_ERR_DEADLINE_EXCEEDED: 'RequestTimeoutException',
  MARINA_ERR_PRIORITY_INVALID: 'BadRequestException',
  MARINA_ERR_HANDLER_FAILED: 'InternalServerException',
  MARINA_ERR_REQUEST_TOO_LARGE: 'RequestEntityTooLargeException',
  MARINA_ERR_MODEL_VERSION_CONFLICT: 'ConflictStatusException',
  MARINA_ERR_DEFAULT_VERSION_REMOVAL: 'InvalidModelVersionException',
  MARINA_ERR_API_EXPLORER_UNREACHABLE: 'BadRequestException',
  MARINA_ERR_WORKFLOWS_NOT_IMPLEMENTED: 'NotImplementedException',
  MARINA_ERR_WORKER_OUT_OF_MEMORY: 'OutOfMemoryError',
  MARINA_ERR_TOKEN_MISSING: 'InvalidKeyException',
  MARINA_ERR_TOKEN_TYPE_INVALID: 'InvalidKeyException',
  MARINA_ERR_MODEL_FILE_EXISTS: 'InternalServerException',
  MARINA_ERR_DOWNLOAD_FAILED: 'DownloadArchiveException',
  MARINA_ERR_URL_NOT_ALLOWED: 'ModelNotFoundException',
  MARINA_ERR_MODEL_API_DISABLED: 'MethodNotAllowedException',
};

const messageOf = (code: string) => `the request failed with ${code}`;

/**
 * TorchServe's fixed texts, copied from pytorch/serve: http/ResourceNotFoundException.java,
 * http/MethodNotAllowedException.java, http/TokenAuthorizationHandler.java (one text for a missing,
 * wrong or expired token) and ts/service.py ("Prediction failed"). TorchServe's forms (its REST body
 * and its gRPC service) carry this text as `message`, and Marina's own message as `hint`.
 */
const TOKEN_FAILED = 'Token Authorization failed. Token either incorrect, expired, or not provided correctly';
const TORCHSERVE_TEXT: Record<string, string> = {
  MARINA_ERR_ROUTE_NOT_FOUND: 'Requested resource is not found, please refer to API document.',
  MARINA_ERR_METHOD_NOT_ALLOWED: 'Requested method is not allowed, please refer to API document.',
  // ManagementRequestHandler.java: the model API switched off throws MethodNotAllowedException.
  MARINA_ERR_MODEL_API_DISABLED: 'Requested method is not allowed, please refer to API document.',
  MARINA_ERR_TOKEN_MISSING: TOKEN_FAILED,
  MARINA_ERR_TOKEN_INVALID: TOKEN_FAILED,
  MARINA_ERR_TOKEN_EXPIRED: TOKEN_FAILED,
  MARINA_ERR_HANDLER_FAILED: 'Prediction failed',
  MARINA_ERR_EXPLAIN_NOT_SUPPORTED: 'Prediction failed',
};
const torchServeMessageOf = (code: string) => TORCHSERVE_TEXT[code] ?? messageOf(code);
function fail(code: string): never {
  throw new MarinaError(code, messageOf(code), statusOf.get(code) ?? 500);
}

/** A data plane whose every inference fails with the code named by the model. */
const failingDataPlane = {
  maxResponseBytes: Number.POSITIVE_INFINITY,
  isLive: () => true,
  isReady: () => true,
  modelNames: () => [],
  recordUndecodable: () => undefined,
  predict: async (options: { modelName: string }) => fail(options.modelName),
  infer: async (request: { modelName: string }) => fail(request.modelName),
} as unknown as DataPlane;

let rest: FastifyInstance;
let server: grpc.Server;
let oipClient: ReturnType<typeof grpcClient>;
let torchServeClient: ReturnType<typeof grpcClient>;

beforeAll(async () => {
  rest = Fastify();
  await rest.register(inferenceRoutes, { dataPlane: failingDataPlane, maxRequestBytes: 1 << 20 });
  await rest.register(oipRestRoutes, { dataPlane: failingDataPlane, maxRequestBytes: 1 << 20 });
  await rest.ready();
  server = new grpc.Server();
  const checkKey = () => undefined;
  server.addService(
    serviceOf(loadProto('grpc_predict_v2.proto'), 'inference.GRPCInferenceService'),
    createOipGrpcService({ dataPlane: failingDataPlane, checkKey, checkManagementKey: checkKey }),
  );
  server.addService(
    serviceOf(loadProto('inference.proto'), 'org.pytorch.serve.grpc.inference.InferenceAPIsService'),
    createTorchServeInferenceService({ dataPlane: failingDataPlane, checkKey }),
  );
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (error, p) =>
      error ? reject(error) : resolve(p),
    ),
  );
  oipClient = grpcClient(clientPackage('grpc_predict_v2.proto'), 'inference.GRPCInferenceService', `127.0.0.1:${port}`);
  torchServeClient = grpcClient(
    clientPackage('inference.proto'),
    'org.pytorch.serve.grpc.inference.InferenceAPIsService',
    `127.0.0.1:${port}`,
  );
});

afterAll(async () => {
  oipClient?.close();
  torchServeClient?.close();
  await new Promise<void>((resolve) => (server ? server.tryShutdown(() => resolve()) : resolve()));
  await rest?.close();
});

describe('the error table: every code on every protocol', () => {
  it('covers the codes of every registry a server answers with', () => {
    expect(served.length).toBeGreaterThan(60);
    for (const code of [...RETRY_AFTER, ...Object.keys(TORCHSERVE_TYPE)]) expect(statusOf.has(code), code).toBe(true);
  });

  it.each(served.map(({ code, definition }) => [code, definition.statusCode] as const))(
    '%s (%i)',
    async (code, statusCode) => {
      const retryAfter = RETRY_AFTER.includes(code) ? '1' : undefined;

      const torchServe = await rest.inject({ method: 'POST', url: `/predictions/${code}`, payload: 'x' });
      expect(torchServe.statusCode).toBe(statusCode);
      expect(torchServe.headers['retry-after']).toBe(retryAfter);
      const body = JSON.parse(torchServe.body) as Record<string, unknown>;
      expect(body).toEqual({
        code: statusCode,
        type: expect.any(String),
        message: torchServeMessageOf(code),
        marinaCode: code,
        ...(TORCHSERVE_TEXT[code] ? { hint: messageOf(code) } : {}),
      });
      expect(body.type).toMatch(/^[A-Z][A-Za-z]+(Exception|Error)$/);
      if (TORCHSERVE_TYPE[code]) expect(body.type).toBe(TORCHSERVE_TYPE[code]);

      const oip = await rest.inject({
        method: 'POST',
        url: `/v2/models/${code}/infer`,
        payload: { inputs: [{ name: 'x', shape: [1], datatype: 'FP32', data: [1] }] },
      });
      expect(oip.statusCode).toBe(statusCode);
      expect(oip.headers['retry-after']).toBe(retryAfter);
      expect(oip.headers['x-marina-error-code']).toBe(code);
      expect(JSON.parse(oip.body)).toEqual({ error: messageOf(code) });

      const oipGrpc = await grpcErrorOf(
        unaryCall(oipClient, 'ModelInfer', {
          model_name: code,
          inputs: [{ name: 'x', datatype: 'FP32', shape: [1], contents: { fp32_contents: [1] } }],
        }),
      );
      expect(oipGrpc.code).toBe(grpcStatusFor(statusCode));
      expect(oipGrpc.details).toBe(messageOf(code));
      expect(oipGrpc.metadata.get('marina-error-code')).toEqual([code]);
      expect(oipGrpc.metadata.get('retry-after')).toEqual(retryAfter ? [retryAfter] : []);

      const torchServeGrpc = await grpcErrorOf(
        unaryCall(torchServeClient, 'Predictions', { model_name: code, input: { data: Buffer.from('x') } }),
      );
      expect(torchServeGrpc.code).toBe(grpcStatusFor(statusCode));
      expect(torchServeGrpc.details).toBe(torchServeMessageOf(code));
      expect(torchServeGrpc.metadata.get('marina-hint')).toEqual(TORCHSERVE_TEXT[code] ? [messageOf(code)] : []);
      expect(torchServeGrpc.metadata.get('marina-error-code')).toEqual([code]);
      expect(torchServeGrpc.metadata.get('retry-after')).toEqual(retryAfter ? [retryAfter] : []);
    },
  );

  it('answers each code inside a TorchServe StreamPredictions2 stream with the same gRPC status', async () => {
    const call = (torchServeClient.StreamPredictions2 as (m: grpc.Metadata) => grpc.ClientDuplexStream<unknown, any>)(
      new grpc.Metadata(),
    );
    const answers = new Map<string, { code: number; message: string }>();
    call.on('data', (message: { sequence_id: string; status: { code: number; message: string } }) =>
      answers.set(message.sequence_id, message.status),
    );
    const ended = new Promise<void>((resolve, reject) => {
      call.on('end', resolve);
      call.on('error', reject);
    });
    for (const { code } of served)
      call.write({ model_name: code, input: { data: Buffer.from('x') }, sequence_id: code });
    call.end();
    await ended;
    expect(answers.size).toBe(served.length);
    for (const { code, definition } of served)
      expect(answers.get(code), code).toEqual({
        code: grpcStatusFor(definition.statusCode),
        message: torchServeMessageOf(code),
        details: [],
      });
  });
});
