/**
 * The gRPC listeners, as TorchServe has them: `grpc_inference_port` (default 127.0.0.1:7070) serves
 * TorchServe's InferenceAPIsService and the Open Inference Protocol's GRPCInferenceService (under
 * KServe's package `inference` and TorchServe's `org.pytorch.serve.grpc.openinference`);
 * `grpc_management_port` (7071) serves ManagementAPIsService and Marina's TrafficAPIsService and ResidencyAPIsService. TLS with enable_grpc_ssl
 * (private_key_file, certificate_file); token authorization from the `authorization: Bearer <key>`
 * metadata, as on REST. Message sizes are bounded by max_request_size and max_response_size.
 */
import { readFileSync } from 'node:fs';
import * as grpc from '@grpc/grpc-js';
import type { FastifyInstance } from 'fastify';
import type { TokenAuthorization } from '../auth/token-authorization.ts';
import type { GrpcListenAddress, ServerConfig } from '../config/server-config.ts';
import { createKeyCheck, loadProto, serviceOf } from './grpc-common.ts';
import type { DataPlane } from './data-plane.ts';
import { createOipGrpcService } from './oip-grpc/oip-grpc-service.ts';
import { createTorchServeInferenceService } from './torchserve-grpc/inference-service.ts';
import {
  createTorchServeManagementService,
  createResidencyManagementService,
  createTrafficManagementService,
} from './torchserve-grpc/management-service.ts';

export interface GrpcServers {
  /** `host:port` actually bound, per API. */
  inferenceUrl: string;
  managementUrl: string;
  /**
   * Stops accepting calls and waits for the running ones. `drained` (the registry's close) bounds
   * the wait: once it settles, calls still open (a client that never ends its stream) are cancelled.
   */
  close(options?: { drained?: Promise<unknown> }): Promise<void>;
}

export interface StartGrpcServersOptions {
  config: ServerConfig;
  grpc: NonNullable<ServerConfig['grpc']>;
  dataPlane: DataPlane;
  /** The REST management API, which the gRPC management calls are translated to. */
  management: FastifyInstance;
  /** undefined when token authorization is off. */
  tokens: TokenAuthorization | undefined;
}

function serverOptions(config: ServerConfig, address: GrpcListenAddress): grpc.ServerOptions {
  return {
    'grpc.max_receive_message_length': config.maxRequestBytes,
    'grpc.max_send_message_length': config.maxResponseBytes,
    ...(address.maxConnectionAgeMs !== undefined ? { 'grpc.max_connection_age_ms': address.maxConnectionAgeMs } : {}),
    ...(address.maxConnectionAgeGraceMs !== undefined
      ? { 'grpc.max_connection_age_grace_ms': address.maxConnectionAgeGraceMs }
      : {}),
  };
}

/**
 * Binds `address`. grpc-js reports a failed bind as "No address added out of total 1 resolved errors:
 * [listen EADDRINUSE ...]": the rejection carries the system error's code (`EADDRINUSE`, `EACCES`,
 * `EADDRNOTAVAIL`) and the config key of the port, so that start-up can answer as it does for HTTP.
 */
function bind(
  server: grpc.Server,
  address: GrpcListenAddress,
  credentials: grpc.ServerCredentials,
  key: GrpcBindError['key'],
): Promise<string> {
  const host = address.host.includes(':') && !address.host.startsWith('[') ? `[${address.host}]` : address.host;
  return new Promise((resolve, reject) => {
    server.bindAsync(`${host}:${address.port}`, credentials, (error, port) => {
      if (!error) return resolve(`${host}:${port}`);
      const code = /\b(EADDRINUSE|EACCES|EADDRNOTAVAIL)\b/.exec(error.message)?.[1];
      reject(Object.assign(error, { key, ...(code ? { code } : {}) }));
    });
  });
}

/** A failed gRPC bind: grpc-js's error with the system error's code and the port's config key. */
export interface GrpcBindError extends Error {
  code?: string;
  key: 'grpc_inference_port' | 'grpc_management_port';
}

/**
 * Starts both gRPC listeners. @throws GrpcBindError when a port cannot be bound (e.g. it is in use); nothing
 * is left listening then.
 */
export async function startGrpcServers(options: StartGrpcServersOptions): Promise<GrpcServers> {
  const { config, grpc: addresses, dataPlane, tokens } = options;
  const credentials =
    addresses.isSslEnabled && config.privateKeyFile && config.certificateFile
      ? grpc.ServerCredentials.createSsl(
          null,
          [{ private_key: readFileSync(config.privateKeyFile), cert_chain: readFileSync(config.certificateFile) }],
          false,
        )
      : grpc.ServerCredentials.createInsecure();

  const inference = new grpc.Server(serverOptions(config, addresses.inference));
  const inferenceKey = createKeyCheck(tokens, 'inference');
  const oip = createOipGrpcService({
    dataPlane,
    checkKey: inferenceKey,
    checkManagementKey: createKeyCheck(tokens, 'management'),
  });
  inference.addService(serviceOf(loadProto('grpc_predict_v2.proto'), 'inference.GRPCInferenceService'), oip);
  inference.addService(
    serviceOf(loadProto('open_inference_grpc.proto'), 'org.pytorch.serve.grpc.openinference.GRPCInferenceService'),
    oip,
  );
  inference.addService(
    serviceOf(loadProto('inference.proto'), 'org.pytorch.serve.grpc.inference.InferenceAPIsService'),
    createTorchServeInferenceService({ dataPlane, checkKey: inferenceKey }),
  );

  const management = new grpc.Server(serverOptions(config, addresses.management));
  management.addService(
    serviceOf(loadProto('management.proto'), 'org.pytorch.serve.grpc.management.ManagementAPIsService'),
    createTorchServeManagementService({
      management: options.management,
      checkKey: createKeyCheck(tokens, 'management'),
    }),
  );

  management.addService(
    serviceOf(loadProto('marina_management.proto'), 'marina.management.TrafficAPIsService'),
    createTrafficManagementService({
      management: options.management,
      checkKey: createKeyCheck(tokens, 'management'),
    }),
  );

  management.addService(
    serviceOf(loadProto('marina_residency.proto'), 'marina.management.ResidencyAPIsService'),
    createResidencyManagementService({
      management: options.management,
      checkKey: createKeyCheck(tokens, 'management'),
    }),
  );

  const close = async (closeOptions: { drained?: Promise<unknown> } = {}) => {
    const servers = [inference, management];
    const graceful = Promise.all(servers.map((s) => new Promise<void>((resolve) => s.tryShutdown(() => resolve()))));
    if (!closeOptions.drained) return void (await graceful);
    await closeOptions.drained.catch(() => undefined);
    for (const s of servers) s.forceShutdown();
  };
  try {
    const [inferenceUrl, managementUrl] = await Promise.all([
      bind(inference, addresses.inference, credentials, 'grpc_inference_port'),
      bind(management, addresses.management, credentials, 'grpc_management_port'),
    ]);
    return { inferenceUrl, managementUrl, close };
  } catch (error) {
    inference.forceShutdown();
    management.forceShutdown();
    throw error;
  }
}
