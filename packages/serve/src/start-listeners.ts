import type { AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import type { MarinaApp } from './app.ts';
import { listenTargets, toListenError } from './config/assert-addresses-free.ts';
import type { ServerConfig } from './config/server-config.ts';
import type { GrpcBindError, GrpcServers } from './protocols/grpc-server.ts';
import type { ModelMeshRuntimeServer } from './protocols/modelmesh/modelmesh-runtime-server.ts';
import type { OperatorContext } from './server-plugins.ts';

/** One API a server listens for, and where. */
export interface Listening {
  api: 'inference' | 'management' | 'metrics' | 'grpc-inference' | 'grpc-management' | 'modelmesh-runtime';
  url: string;
}

/** The gRPC and ModelMesh servers a start opened, for close() to drain. */
export interface StartedListeners {
  grpcServers?: GrpcServers;
  modelMesh?: ModelMeshRuntimeServer;
}

/**
 * Listens on each HTTP address, once per distinct Fastify instance (metrics only when
 * enable_metrics_api), then starts the gRPC servers and the ModelMesh SPI when configured. The
 * servers started are put into `started` as soon as they run, so a later failure can close them.
 *
 * @throws MARINA_ERR_ADDRESS_IN_USE / MARINA_ERR_ADDRESS_UNAVAILABLE for an address taken since the check.
 */
export async function startListeners(options: {
  app: MarinaApp;
  config: ServerConfig;
  /** The configuration the app was built with (without load_models when a snapshot is restored). */
  effectiveConfig: ServerConfig;
  operator: OperatorContext;
  log: (level: 'info' | 'warn' | 'error', message: string) => void;
  started: StartedListeners;
}): Promise<Listening[]> {
  const { app, effectiveConfig, started } = options;
  const listening = await listenHttp({ app, config: options.config });
  if (effectiveConfig.grpc) {
    // Loaded here, not at import: the launcher's other paths (config errors, --stop) never pay for grpc-js.
    const { startGrpcServers } = await import('./protocols/grpc-server.ts');
    started.grpcServers = await startGrpcServers({
      config: effectiveConfig,
      grpc: effectiveConfig.grpc,
      dataPlane: app.dataPlane,
      management: app.management,
      tokens: options.operator.tokens,
    }).catch((error: GrpcBindError) => {
      // A port taken after assertAddressesFree looked: the same answer as for HTTP, not grpc-js's sentence.
      const target = listenTargets(effectiveConfig).find((t) => t.key === error.key);
      throw target && error.code ? toListenError(error, target, effectiveConfig) : error;
    });
    const scheme = effectiveConfig.grpc.isSslEnabled ? 'grpcs' : 'grpc';
    listening.push(
      { api: 'grpc-inference', url: `${scheme}://${started.grpcServers.inferenceUrl}` },
      { api: 'grpc-management', url: `${scheme}://${started.grpcServers.managementUrl}` },
    );
  }
  if (effectiveConfig.modelMeshRuntime) {
    const { startModelMeshRuntime } = await import('./protocols/modelmesh/modelmesh-runtime-server.ts');
    started.modelMesh = await startModelMeshRuntime({
      registry: app.registry,
      config: effectiveConfig,
      address: effectiveConfig.modelMeshRuntime,
      log: options.log,
    });
    listening.push({ api: 'modelmesh-runtime', url: `grpc://${started.modelMesh.url}` });
  }
  return listening;
}

/** The inference, management and metrics listeners; two APIs on one address share one instance. */
async function listenHttp(options: { app: MarinaApp; config: ServerConfig }): Promise<Listening[]> {
  const { app, config } = options;
  const targets = [
    { api: 'inference' as const, instance: app.inference, address: config.inferenceAddress },
    { api: 'management' as const, instance: app.management, address: config.managementAddress },
    ...(config.enableMetricsApi
      ? [{ api: 'metrics' as const, instance: app.metrics, address: config.metricsAddress }]
      : []),
  ];
  const listening: Listening[] = [];
  const started = new Map<FastifyInstance, string>();
  for (const target of targets) {
    let url = started.get(target.instance);
    if (url === undefined) {
      try {
        await target.instance.listen({ host: target.address.host, port: target.address.port });
      } catch (error) {
        // Taken between the check and now (or an address the check skipped).
        throw toListenError(
          error as NodeJS.ErrnoException,
          { api: target.api, key: `${target.api}_address`, address: target.address },
          config,
        );
      }
      const bound = target.instance.server.address() as AddressInfo;
      const host = bound.family === 'IPv6' ? `[${bound.address}]` : bound.address;
      url = `${target.address.protocol}://${host}:${bound.port}`;
      started.set(target.instance, url);
    }
    listening.push({ api: target.api, url });
  }
  return listening;
}
