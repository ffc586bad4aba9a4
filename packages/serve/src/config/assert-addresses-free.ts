import { createServer } from 'node:net';
import type { ListenAddress, ServerConfig } from './server-config.ts';
import { configError } from './config-errors.ts';

/** One address the server will listen on, with the config key that sets it. */
export interface ListenTarget {
  api: 'inference' | 'management' | 'metrics' | 'gRPC inference' | 'gRPC management' | 'modelmesh-runtime';
  key:
    | 'inference_address'
    | 'management_address'
    | 'metrics_address'
    | 'grpc_inference_port'
    | 'grpc_management_port'
    | 'modelmesh_runtime_port';
  address: Pick<ListenAddress, 'host' | 'port'> & { protocol: ListenAddress['protocol'] | 'grpc' | 'grpcs' };
}

/** The ModelMesh model-runtime SPI's listener as a ListenTarget, when modelmesh_runtime_port is set. */
export function modelMeshRuntimeTarget(config: Pick<ServerConfig, 'modelMeshRuntime'>): ListenTarget | undefined {
  const address = config.modelMeshRuntime;
  if (!address) return undefined;
  return {
    api: 'modelmesh-runtime',
    key: 'modelmesh_runtime_port',
    address: { protocol: 'grpc', host: address.host, port: address.port },
  };
}

/**
 * The distinct addresses startServer listens on: the HTTP APIs (metrics only with enable_metrics_api;
 * inference and management may share one) and the two gRPC listeners when gRPC is on. (The ModelMesh
 * SPI's listener is modelMeshRuntimeTarget.)
 */
export function listenTargets(config: ServerConfig): ListenTarget[] {
  const http: ListenTarget[] = [
    { api: 'inference', key: 'inference_address', address: config.inferenceAddress },
    { api: 'management', key: 'management_address', address: config.managementAddress },
    ...(config.enableMetricsApi
      ? [{ api: 'metrics' as const, key: 'metrics_address' as const, address: config.metricsAddress }]
      : []),
  ];
  const grpcProtocol = config.grpc?.isSslEnabled ? 'grpcs' : 'grpc';
  const grpc: ListenTarget[] = config.grpc
    ? [
        {
          api: 'gRPC inference',
          key: 'grpc_inference_port',
          address: { protocol: grpcProtocol, host: config.grpc.inference.host, port: config.grpc.inference.port },
        },
        {
          api: 'gRPC management',
          key: 'grpc_management_port',
          address: { protocol: grpcProtocol, host: config.grpc.management.host, port: config.grpc.management.port },
        },
      ]
    : [];
  const all = [...http, ...grpc];
  return all.filter((target, index) => all.findIndex((other) => sameAddress(other.address, target.address)) === index);
}

/**
 * Two listeners that the configuration puts on one port of one host, where only the HTTP inference and
 * management APIs may share: the second would find the port in use, so this is reported first.
 */
function sharedPortError(config: ServerConfig): Error | undefined {
  const modelMesh = modelMeshRuntimeTarget(config);
  const targets = [...listenTargets(config), ...(modelMesh ? [modelMesh] : [])].filter(
    (target) => target.address.port !== 0,
  );
  for (const [index, target] of targets.entries()) {
    const other = targets.slice(0, index).find((t) => sameHostPort(t.address, target.address));
    if (!other) continue;
    return toListenError(
      Object.assign(new Error(`${other.key} already uses that port`), { code: 'EADDRINUSE' }),
      target,
      config,
      `the ${other.api} API (${other.key}) is set to the same port`,
    );
  }
  return undefined;
}

/**
 * Binds each address the server will listen on and lets it go again, so that a port in use stops
 * start-up in milliseconds, before any model is loaded. Port 0 (any free port) is not checked.
 *
 * @throws MARINA_ERR_ADDRESS_IN_USE / MARINA_ERR_ADDRESS_UNAVAILABLE naming the address and its config key.
 */
export async function assertAddressesFree(config: ServerConfig): Promise<void> {
  const shared = sharedPortError(config);
  if (shared) throw shared;
  const modelMesh = modelMeshRuntimeTarget(config);
  for (const target of [...listenTargets(config), ...(modelMesh ? [modelMesh] : [])]) {
    if (target.address.port === 0) continue;
    await new Promise<void>((resolve, reject) => {
      const probe = createServer();
      probe.once('error', (error: NodeJS.ErrnoException) => reject(toListenError(error, target, config)));
      probe.listen({ host: target.address.host, port: target.address.port, exclusive: true }, () =>
        probe.close(() => resolve()),
      );
    });
  }
}

/**
 * The error for a failed bind of `target`: MARINA_ERR_ADDRESS_IN_USE for EADDRINUSE, else
 * MARINA_ERR_ADDRESS_UNAVAILABLE (EACCES for a privileged port, EADDRNOTAVAIL for a host that is
 * not this machine's). Errors of other kinds are returned unchanged.
 */
export function toListenError(
  error: NodeJS.ErrnoException,
  target: ListenTarget,
  config: Pick<ServerConfig, 'configFile'>,
  /** Set when the configuration itself puts another listener on that port: which one. */
  holder?: string,
): Error {
  const where = config.configFile ? `in ${config.configFile}` : 'in config.properties (pass it with --ts-config)';
  const url = `${target.address.protocol}://${target.address.host.includes(':') ? `[${target.address.host}]` : target.address.host}:${target.address.port}`;
  const details = { key: target.key, address: url, errno: error.code };
  if (error.code === 'EADDRINUSE') {
    return configError.MARINA_ERR_ADDRESS_IN_USE(
      holder
        ? `the ${target.api} API cannot listen on ${url}: ${holder}. Set ${target.key} ${where} to another port.`
        : `the ${target.api} API cannot listen on ${url}: another process is using that port. Stop it (is another Marina or TorchServe running? serve --stop), or set ${target.key} ${where} to a free port.`,
      { details, cause: error },
    );
  }
  if (error.code === 'EACCES' || error.code === 'EADDRNOTAVAIL') {
    const reason =
      error.code === 'EACCES'
        ? 'ports below 1024 need privileges'
        : `${target.address.host} is not an address of this machine`;
    return configError.MARINA_ERR_ADDRESS_UNAVAILABLE(
      `the ${target.api} API cannot listen on ${url} (${error.code}: ${reason}). Set ${target.key} ${where} to another address.`,
      { details, cause: error },
    );
  }
  return error;
}

function sameAddress(a: ListenTarget['address'], b: ListenTarget['address']): boolean {
  return a.protocol === b.protocol && sameHostPort(a, b);
}

function sameHostPort(a: ListenTarget['address'], b: ListenTarget['address']): boolean {
  return a.host === b.host && a.port === b.port;
}
