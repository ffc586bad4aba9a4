/**
 * The listener of ModelMesh's model-runtime SPI: its own gRPC server on modelmesh_runtime_port
 * (127.0.0.1 unless modelmesh_runtime_address says otherwise; ModelMesh's container calls it on
 * localhost in the same pod). Plain gRPC without token authorization: ModelMesh's SPI carries no
 * key, so keep it on loopback.
 */
import * as grpc from '@grpc/grpc-js';
import { modelMeshRuntimeTarget, toListenError } from '../../config/assert-addresses-free.ts';
import type { GrpcListenAddress, ServerConfig } from '../../config/server-config.ts';
import { configError } from '../../config/config-errors.ts';
import { loadProto, serviceOf } from '../grpc-common.ts';
import { ModelRuntimeService, type ModelRuntimeServiceOptions } from './model-runtime-service.ts';

export interface ModelMeshRuntimeServer {
  /** `host:port` actually bound. */
  url: string;
  service: ModelRuntimeService;
  /** Stops accepting calls; calls still open once `drained` settles are cancelled. */
  close(options?: { drained?: Promise<unknown> }): Promise<void>;
}

export interface StartModelMeshRuntimeOptions extends ModelRuntimeServiceOptions {
  config: ModelRuntimeServiceOptions['config'] & Pick<ServerConfig, 'configFile' | 'maxRequestBytes'>;
  address: GrpcListenAddress;
}

/**
 * Starts the SPI's listener.
 * @throws MARINA_ERR_CONFIG_VALUE_INVALID without model_memory_budget (ModelMesh needs a capacity);
 *   MARINA_ERR_ADDRESS_IN_USE / MARINA_ERR_ADDRESS_UNAVAILABLE when the port cannot be bound.
 */
export async function startModelMeshRuntime(options: StartModelMeshRuntimeOptions): Promise<ModelMeshRuntimeServer> {
  if (options.registry.memoryBudgetBytes === undefined)
    throw configError.MARINA_ERR_CONFIG_VALUE_INVALID(
      'modelmesh_runtime_port needs model_memory_budget: ModelMesh places models by the capacity the runtime reports. Set model_memory_budget (e.g. 60% or 3GB) in config.properties',
    );
  const service = new ModelRuntimeService(options);
  const server = new grpc.Server({ 'grpc.max_receive_message_length': options.config.maxRequestBytes });
  server.addService(serviceOf(loadProto('model-runtime.proto'), 'mmesh.ModelRuntime'), service.implementation());
  const { host, port } = options.address;
  const bracketed = host.includes(':') && !host.startsWith('[') ? `[${host}]` : host;
  let url: string;
  try {
    url = await new Promise<string>((resolve, reject) =>
      server.bindAsync(`${bracketed}:${port}`, grpc.ServerCredentials.createInsecure(), (error, bound) =>
        error ? reject(error) : resolve(`${bracketed}:${bound}`),
      ),
    );
  } catch (error) {
    server.forceShutdown();
    const message = (error as Error).message;
    const code = /EADDRINUSE|address already in use/i.test(message)
      ? 'EADDRINUSE'
      : /EACCES|EADDRNOTAVAIL/.exec(message)?.[0];
    const target = modelMeshRuntimeTarget({ modelMeshRuntime: options.address })!;
    throw code ? toListenError(Object.assign(new Error(message), { code }), target, options.config) : error;
  }
  return {
    url,
    service,
    async close(closeOptions = {}) {
      const graceful = new Promise<void>((resolve) => server.tryShutdown(() => resolve()));
      if (!closeOptions.drained) return void (await graceful);
      await closeOptions.drained.catch(() => undefined);
      server.forceShutdown();
    },
  };
}
