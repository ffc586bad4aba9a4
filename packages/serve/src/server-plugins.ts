import os from 'node:os';
import type { FastifyPluginAsync } from 'fastify';
import type { AppPlugin } from './app.ts';
import {
  createTokenAuthorization,
  createTokenHook,
  tokenRoutes,
  type CreateTokenHookOptions,
  type TokenAuthorization,
} from './auth/token-authorization.ts';
import { createServerMetrics, type ServerMetrics } from './metrics/server-metrics.ts';
import type { ResponseWriteGuard } from './response-write-guard.ts';
import type { Autoscaler } from './scaling/autoscaler.ts';
import type { ServerLogs } from './logging/server-logs.ts';
import type { SnapshotStore } from './snapshot/snapshot-store.ts';
import { managementRoutes } from './routes/management.ts';
import { metricsRoutes } from './routes/metrics.ts';
import type { ModelRegistryApi } from './registry/model-registry-api.ts';
import type { ServerConfig } from './config/server-config.ts';

/** Late-bound parts the plugins reach at request time (they exist only once the registry does). */
export interface OperatorContext {
  /** The keys, when token authorization is on (the gRPC listeners check them too). */
  tokens?: TokenAuthorization;
  autoscaler?: Autoscaler;
  metrics?: ServerMetrics;
  /** TorchServe's log files; with metrics_mode=log the metrics are written there too. */
  logs?: ServerLogs;
  /** Config snapshots, when enabled: the management routes report a snapshot they could not write. */
  snapshots?: SnapshotStore;
}

/**
 * The APIs around the core's inference routes: token authorization (unless disabled), the
 * management API with /token (describe shows the autoscaler's policy), /metrics on the metrics
 * listener, and TorchServe's Requests2XX/4XX/5XX counted on the inference and management listeners.
 * `operator` is filled in by startServer once the registry exists.
 *
 * @throws MARINA_ERR_KEY_FILE_INVALID when token authorization is on and the key file cannot be written.
 */
export async function createServerPlugins(config: ServerConfig, operator: OperatorContext = {}): Promise<AppPlugin[]> {
  const plugins: AppPlugin[] = [];
  const isSharedListener = isSameAddress(config.inferenceAddress, config.managementAddress);
  const isMetricsLogged = config.metricsMode === 'log';
  if (config.enableMetricsApi || isMetricsLogged) {
    plugins.push({ api: 'inference', plugin: responseCounterPlugin, options: { operator } });
    if (!isSharedListener) plugins.push({ api: 'management', plugin: responseCounterPlugin, options: { operator } });
  }
  if (!config.disableTokenAuthorization) {
    const tokens = await createTokenAuthorization({
      keyFilePath: config.keyFilePath,
      tokenExpirationMin: config.tokenExpirationMin,
      isKeyFileProvided: config.isKeyFileProvided,
      failureStatus: config.tokenFailureStatus,
    });
    operator.tokens = tokens;
    // Each request needs the key its matched route declares (declareRouteAuth), also when both
    // APIs share one listener.
    if (isSharedListener) {
      plugins.push({
        api: 'inference',
        plugin: tokenHookPlugin,
        options: { listenerKeys: ['inference', 'management'], tokens },
      });
    } else {
      plugins.push({ api: 'inference', plugin: tokenHookPlugin, options: { listenerKeys: ['inference'], tokens } });
      plugins.push({ api: 'management', plugin: tokenHookPlugin, options: { listenerKeys: ['management'], tokens } });
    }
    plugins.push({ api: 'management', plugin: tokenRoutes, options: { tokens } });
  }
  plugins.push({
    api: 'management',
    plugin: managementRoutes,
    options: {
      autoscaling: (modelName: string, modelVersion: string) => operator.autoscaler?.describe(modelName, modelVersion),
      afterChange: async () => operator.snapshots?.settle(),
      holdChanges: () => operator.snapshots?.hold(),
    },
  });
  if (config.enableMetricsApi)
    plugins.push({ api: 'metrics', plugin: metricsPlugin, options: { operator, hasRoute: true } });
  // metrics_mode=log without the metrics API: the metrics still go to ts_metrics.log / model_metrics.log (TorchServe's default).
  else if (isMetricsLogged)
    plugins.push({ api: 'inference', plugin: metricsPlugin, options: { operator, hasRoute: false } });
  return plugins;
}

/** Whether two listen addresses are the same listener (buildApp then serves both APIs on one instance). */
export function isSameAddress(a: ServerConfig['inferenceAddress'], b: ServerConfig['inferenceAddress']): boolean {
  return a.protocol === b.protocol && a.host === b.host && a.port === b.port;
}

/** Counts every response of the listener (skip-override: applies to routes of every plugin on it). */
const responseCounterPlugin: FastifyPluginAsync<{ operator: OperatorContext }> = async (app, options) => {
  app.addHook('onResponse', (_request, reply, done) => {
    options.operator.metrics?.recordResponse(reply.statusCode);
    done();
  });
};
(responseCounterPlugin as unknown as Record<symbol, boolean>)[Symbol.for('skip-override')] = true;

/** Adds the token hook to the whole listener (skip-override: not encapsulated, so it guards routes registered before it). */
const tokenHookPlugin: FastifyPluginAsync<CreateTokenHookOptions> = async (app, options) => {
  app.addHook('onRequest', createTokenHook(options));
};
(tokenHookPlugin as unknown as Record<symbol, boolean>)[Symbol.for('skip-override')] = true;

/** /metrics on the metrics listener; buildApp passes every plugin the registry. */
const metricsPlugin: FastifyPluginAsync<{
  registry: ModelRegistryApi;
  config: ServerConfig;
  operator: OperatorContext;
  hasRoute: boolean;
  responseWrites?: Pick<ResponseWriteGuard, 'pendingBytes' | 'closedCount'>;
}> = async (app, options) => {
  const logs = options.config.metricsMode === 'log' ? options.operator.logs : undefined;
  const metrics = createServerMetrics({
    registry: options.registry,
    hostname: os.hostname(),
    ...(options.responseWrites ? { responseWrites: options.responseWrites } : {}),
    ...(logs ? { logs } : {}),
  });
  options.operator.metrics = metrics;
  app.addHook('onClose', async () => metrics.close());
  if (options.hasRoute) await app.register(metricsRoutes, { metrics });
};
