import type { AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { buildApp, listStartupModels, type MarinaApp } from './app.ts';
import { createAutoscaler, type Autoscaler, type AutoscalingKnobs } from './scaling/autoscaler.ts';
import { createSnapshotStore, listSnapshots, readLatestSnapshot, type SnapshotStore } from './snapshot/snapshot-store.ts';
import { registrationsFromSnapshot, snapshotPropertiesFromConfigFile, withoutRestored, type SnapshotRegistration } from './snapshot/restore-snapshot.ts';
import type { ServerConfig } from './config/server-config.ts';
import { deepFreeze } from './config/load-config.ts';
import { createServerPlugins, isSameAddress, type OperatorContext } from './server-plugins.ts';
import { assertAddressesFree, toListenError } from './config/assert-addresses-free.ts';
import type { StartupProgressEvent } from './startup-progress.ts';
import type { GrpcServers } from './protocols/grpc-server.ts';
import { createRequestLog, type RequestLog } from './request-log.ts';

/** A server listening on its addresses. */
export interface RunningServer {
  /** One line per API, e.g. `Inference API bound to http://127.0.0.1:8080`. */
  listening: Array<{ api: 'inference' | 'management' | 'metrics' | 'grpc-inference' | 'grpc-management'; url: string }>;
  /** `name (version v)` of every model version serving after start-up. */
  loaded: string[];
  /** `url: code: message` of every model version that could not be loaded; the server runs without it. */
  failed: string[];
  /** The snapshot file whose model versions were registered again, when one was. */
  restoredFrom?: string;
  /**
   * Start-up problems the operator must see on the terminal: every snapshot file skipped as
   * corrupt, and a start that restored none of a snapshot's models (the snapshots are then left
   * as they are: no snapshot is written until the next management change).
   */
  warnings: string[];
  /** Stops the autoscaler and the snapshot store, then stops accepting connections and drains in-flight requests (app.close()). Idempotent. */
  close(): Promise<void>;
}

export interface StartServerOptions {
  /** Non-fatal events (snapshot restore and write problems, autoscaler moves); ignored by default. */
  log?: (level: 'info' | 'warn' | 'error', message: string) => void;
  /** Each start-up model starting to load and finishing (loading includes onnxruntime's optimisation). */
  onProgress?: (event: StartupProgressEvent) => void;
  /**
   * The request log: every answered request appended to `accessLogPath` (TorchServe's
   * access_log.log), and the failed ones (or all, with isEveryRequestLogged) sent to `log`.
   */
  requestLog?: { accessLogPath?: string; isEveryRequestLogged?: boolean };
}

/**
 * Builds the app, restores the newest config snapshot (unless --ncs / isSnapshotEnabled false),
 * loads the start-up models not already restored (before the ports bind, as TorchServe), starts
 * the autoscaler and the snapshot store (one snapshot now, then one after every change), then
 * listens on each address, once per distinct Fastify instance; metrics only when enable_metrics_api.
 * Library function: prints nothing, never exits. A model that fails to load is listed in `failed`
 * and does not stop the server.
 *
 * @throws MARINA_ERR_ADDRESS_IN_USE / MARINA_ERR_ADDRESS_UNAVAILABLE before anything loads when an
 *   address cannot be bound; else the first error of building the app or binding a port. What was
 *   started by then is closed first.
 */
export async function startServer(config: ServerConfig, options: StartServerOptions = {}): Promise<RunningServer> {
  const log = options.log ?? (() => undefined);
  // A port in use fails here, in milliseconds, rather than after the models have loaded.
  await assertAddressesFree(config);
  const warnings: string[] = [];
  const snapshotFiles = config.isSnapshotEnabled ? await listSnapshots(config.snapshotDir).catch(() => []) : [];
  const snapshot = config.isSnapshotEnabled ? await readLatestSnapshot(config.snapshotDir, { onWarning: (message) => warnings.push(message) }) : undefined;
  const registrations = snapshot ? registrationsFromSnapshot(snapshot, { modelStore: config.modelStore }) : [];
  // Writing a snapshot now would put a model-less one on top of snapshots this start could not use.
  let isSnapshotKept = false;
  if (snapshotFiles.length > 0 && snapshot === undefined) {
    isSnapshotKept = true;
    warnings.push(`none of the ${snapshotFiles.length} snapshot files in ${config.snapshotDir} could be read, so no model was restored; they are left as they are (no snapshot is written until the models change through the management API). Fix or remove them, or start with --ncs to ignore snapshots`);
  }
  const effectiveConfig = registrations.length > 0 ? await withoutRestoredStartupModels(config, registrations) : config;
  const operator: OperatorContext = {};
  const requestLog: RequestLog | undefined = options.requestLog ? createRequestLog({ ...options.requestLog, log }) : undefined;
  // First on each listener (inference, management when it is another one, metrics), so it sees every answer.
  const requestLogPlugins = requestLog
    ? (['inference', 'management', 'metrics'] as const)
        .filter((api) => api !== 'management' || !isSameAddress(effectiveConfig.inferenceAddress, effectiveConfig.managementAddress))
        .map((api) => ({ api, plugin: requestLog.plugin }))
    : [];
  let app: MarinaApp;
  try {
    app = await buildApp(effectiveConfig, { log, plugins: [...requestLogPlugins, ...(await createServerPlugins(effectiveConfig, operator))] });
  } catch (error) {
    await requestLog?.close();
    throw error;
  }
  let autoscaler: Autoscaler | undefined;
  let snapshots: SnapshotStore | undefined;
  let grpcServers: GrpcServers | undefined;
  let closing: Promise<void> | undefined;
  const close = () => {
    closing ??= (async () => {
      autoscaler?.stop();
      // Unsubscribe before the registry empties itself on close: that is not a state to restore.
      await snapshots?.close();
      const appClosed = app.close();
      await Promise.all([grpcServers?.close({ drained: appClosed }), appClosed]);
      await requestLog?.close();
    })();
    return closing;
  };
  try {
    const restored = await restoreSnapshotModels(app, registrations, snapshot?.path);
    const startup = await app.loadStartupModels(options.onProgress ? { onProgress: options.onProgress } : {});
    await restored.start();
    const loaded = [...restored.loaded, ...startup.loaded.map((model) => `${model.modelName} (version ${model.modelVersion})`)];
    const failed = [...restored.failed, ...startup.failed.map((failure) => `${failure.url}: ${failure.error.code}: ${failure.error.message}`)];
    if (registrations.length > 0 && restored.loaded.length === 0) {
      isSnapshotKept = true;
      warnings.push(`none of the ${registrations.length} model versions of the snapshot ${snapshot?.path} could be restored (see the failures); the snapshot is left as it is (no snapshot is written until the models change through the management API). Make the archives available and restart, or start with --ncs to ignore snapshots`);
    }

    autoscaler = createAutoscaler({
      registry: app.registry,
      config,
      knobs: definedKnobs(config.autoscaling),
      onScale: (event) => log(event.error ? 'warn' : 'info', event.error
        ? `autoscaler could not move model ${event.modelName} version ${event.modelVersion} from ${event.from} to ${event.to} workers: ${event.error.message}`
        : `autoscaler: model ${event.modelName} version ${event.modelVersion} ${event.from} -> ${event.to} workers (${event.reason})`),
    });
    operator.autoscaler = autoscaler;
    autoscaler.start();

    if (config.isSnapshotEnabled) {
      let properties: Record<string, string> = {};
      try {
        properties = await snapshotPropertiesFromConfigFile(config.configFile);
      } catch (error) {
        log('warn', `snapshots will not carry the settings of ${config.configFile}: ${(error as Error).message}`);
      }
      snapshots = createSnapshotStore({
        registry: app.registry,
        snapshotDir: config.snapshotDir,
        modelStore: config.modelStore,
        properties,
        onError: (error) => log('error', error.message),
      });
      operator.snapshots = snapshots;
      if (!isSnapshotKept) await snapshots.write().catch((error: Error) => log('error', error.message));
    }

    const targets = [
      { api: 'inference' as const, instance: app.inference, address: config.inferenceAddress },
      { api: 'management' as const, instance: app.management, address: config.managementAddress },
      ...(config.enableMetricsApi ? [{ api: 'metrics' as const, instance: app.metrics, address: config.metricsAddress }] : []),
    ];
    const listening: RunningServer['listening'] = [];
    const started = new Map<FastifyInstance, string>();
    for (const target of targets) {
      let url = started.get(target.instance);
      if (url === undefined) {
        try {
          await target.instance.listen({ host: target.address.host, port: target.address.port });
        } catch (error) {
          // Taken between the check and now (or an address the check skipped).
          throw toListenError(error as NodeJS.ErrnoException, { api: target.api, key: `${target.api}_address`, address: target.address }, config);
        }
        const bound = target.instance.server.address() as AddressInfo;
        const host = bound.family === 'IPv6' ? `[${bound.address}]` : bound.address;
        url = `${target.address.protocol}://${host}:${bound.port}`;
        started.set(target.instance, url);
      }
      listening.push({ api: target.api, url });
    }
    if (effectiveConfig.grpc) {
      // Loaded here, not at import: the launcher's other paths (config errors, --stop) never pay for grpc-js.
      const { startGrpcServers } = await import('./protocols/grpc-server.ts');
      grpcServers = await startGrpcServers({ config: effectiveConfig, grpc: effectiveConfig.grpc, dataPlane: app.dataPlane, management: app.management, tokens: operator.tokens });
      const scheme = effectiveConfig.grpc.isSslEnabled ? 'grpcs' : 'grpc';
      listening.push({ api: 'grpc-inference', url: `${scheme}://${grpcServers.inferenceUrl}` }, { api: 'grpc-management', url: `${scheme}://${grpcServers.managementUrl}` });
    }
    return {
      listening,
      loaded,
      failed,
      ...(snapshot && registrations.length > 0 && !isSnapshotKept ? { restoredFrom: snapshot.path } : {}),
      warnings,
      close,
    };
  } catch (error) {
    await close().catch(() => undefined);
    throw error;
  }
}

/**
 * Opens every model version of the snapshot (so the thread split counts their workers with the
 * load_models ones), and returns `start` to start their workers once load_models are opened too.
 * A version that cannot come back (archive gone, workers fail) is reported, the others go on.
 */
async function restoreSnapshotModels(app: MarinaApp, registrations: SnapshotRegistration[], snapshotPath: string | undefined) {
  const loaded: string[] = [];
  const failed: string[] = [];
  const describeFailure = (r: SnapshotRegistration, error: unknown) =>
    `${r.url} (model ${r.modelName} version ${r.snapshotVersion} from snapshot ${snapshotPath}): ${(error as { code?: string }).code ?? 'MARINA_ERR_INTERNAL'}: ${(error as Error).message}`;
  const opened: Array<{ registration: SnapshotRegistration; version: Awaited<ReturnType<MarinaApp['registry']['open']>> }> = [];
  for (const registration of registrations) {
    try {
      opened.push({ registration, version: await app.registry.open(registration) });
    } catch (error) {
      failed.push(describeFailure(registration, error));
    }
  }
  return {
    loaded,
    failed,
    async start(): Promise<void> {
      await Promise.all(opened.map(async ({ registration, version }) => {
        try {
          const result = await app.registry.start(version, { synchronous: true });
          loaded.push(`${result.modelName} (version ${result.modelVersion})`);
        } catch (error) {
          failed.push(describeFailure(registration, error));
        }
      }));
    },
  };
}

/** The configuration with the load_models entries that the snapshot already restores taken out. */
async function withoutRestoredStartupModels(config: ServerConfig, registrations: SnapshotRegistration[]): Promise<ServerConfig> {
  let specs;
  try {
    specs = await listStartupModels(config);
  } catch {
    return config; // loadStartupModels reports an unreadable store itself.
  }
  const kept = withoutRestored(specs, registrations);
  if (kept.length === specs.length) return config;
  return deepFreeze({ ...config, loadModels: kept.map(({ name, url }) => (name === undefined ? { url } : { name, url })) });
}

/** The knobs the configuration sets: an undefined one would override the autoscaler's default. */
function definedKnobs(knobs: ServerConfig['autoscaling']): Partial<AutoscalingKnobs> {
  return Object.fromEntries(Object.entries(knobs ?? {}).filter(([, value]) => value !== undefined)) as Partial<AutoscalingKnobs>;
}
