import { buildApp, type MarinaApp } from './app.ts';
import { assertAddressesFree } from './config/assert-addresses-free.ts';
import { resourceLimitsOf, type ServerConfig } from './config/server-config.ts';
import { createServerLogs, type ServerLogs } from './logging/server-logs.ts';
import { removeStaleDownloads } from './model-download/resolve-model-url.ts';
import { createRequestLog } from './request-log.ts';
import { type Autoscaler, type AutoscalingKnobs, createAutoscaler } from './scaling/autoscaler.ts';
import { createServerPlugins, isSameAddress, type OperatorContext } from './server-plugins.ts';
import { snapshotPropertiesFromConfigFile } from './snapshot/restore-snapshot.ts';
import { createSnapshotStore, type SnapshotStore } from './snapshot/snapshot-store.ts';
import {
  readStartupSnapshot,
  restoreSnapshotModels,
  restoreTrafficPolicies,
  type StartupSnapshot,
  withoutStartupModels,
} from './snapshot/startup-snapshot.ts';
import { keepTickObjectShape } from './keep-tick-object-shape.ts';
import { type Listening, type StartedListeners, startListeners } from './start-listeners.ts';
import type { StartupProgressEvent } from './startup-progress.ts';

type Log = (level: 'info' | 'warn' | 'error', message: string) => void;

/** A server listening on its addresses. */
export interface RunningServer {
  /** One line per API, e.g. `Inference API bound to http://127.0.0.1:8080`. */
  listening: Listening[];
  /** `name (version v)` of every model version serving after start-up. */
  loaded: string[];
  /** `url: code: message` of every model version that could not be loaded; the server runs without it. */
  failed: string[];
  /** How many of the start-up models (load_models / --models) failed; snapshot restores are not counted. */
  startupFailures: number;
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
  /** Request lines in `log`: the failed requests, or every one with isEveryRequestLogged (access_log.log always has every one). */
  requestLog?: { isEveryRequestLogged?: boolean };
}

/**
 * Builds the app; when the config file read is a snapshot (the newest one, chosen by loadConfig
 * when no --ts-config is given, or one named with --ts-config) restores its models instead of
 * load_models, else loads load_models (before the ports bind, as TorchServe); starts
 * the autoscaler and the snapshot store (`-startup.cfg` now, `-snapshot.cfg` after every change, `-shutdown.cfg` on close), then
 * listens on each address, once per distinct Fastify instance; metrics only when enable_metrics_api.
 * Library function: prints nothing, never exits. A model that fails to load is listed in `failed`
 * and does not stop the server.
 *
 * @throws MARINA_ERR_ADDRESS_IN_USE / MARINA_ERR_ADDRESS_UNAVAILABLE before anything loads when an
 *   address cannot be bound; else the first error of building the app or binding a port. What was
 *   started by then is closed first.
 */
export async function startServer(config: ServerConfig, options: StartServerOptions = {}): Promise<RunningServer> {
  // The command line did this first thing already; a server started from code does it here.
  keepTickObjectShape();
  // A port in use fails here, in milliseconds, rather than after the models have loaded.
  await assertAddressesFree(config);
  const { logs, log } = openServerLogs(config, options);
  const warnings: string[] = [];
  // A server killed during a download leaves its temporary file: nothing else ever removes it.
  if (config.modelStore) {
    const stale = await removeStaleDownloads(config.modelStore);
    if (stale.length > 0)
      log('info', `removed ${stale.length} unfinished download(s) left in the model store by a previous run`);
  }
  const restore = await readStartupSnapshot({ config, log, warnings });
  // TorchServe: a config with model_snapshot restores those models and loads no load_models / --models.
  const effectiveConfig = restore.snapshot ? withoutStartupModels(config, log) : config;
  const operator: OperatorContext = { logs };
  const app = await buildServerApp({ config: effectiveConfig, options, logs, operator });
  const started: Started = { isSnapshotKept: restore.isKept, isChangedSinceStart: false };
  let closing: Promise<void> | undefined;
  const close = () => {
    closing ??= closeServer({ app, logs, log, started });
    return closing;
  };
  try {
    const models = await loadServerModels({ app, restore, options, warnings });
    if (models.isSnapshotUnused) started.isSnapshotKept = true;
    started.autoscaler = createServerAutoscaler({ app, config, log });
    operator.autoscaler = started.autoscaler;
    started.autoscaler.start();
    if (config.isSnapshotEnabled) await startSnapshotStore({ app, config, log, operator, started });
    const listening = await startListeners({ app, config, effectiveConfig, operator, log, started });
    // ts_log.log only: the launcher prints its own start-up report on the terminal.
    for (const l of listening) logs.ts('info', `${l.api} API bound to ${l.url}`);
    for (const model of models.loaded) logs.ts('info', `Model loaded: ${model}`);
    for (const failure of models.failed) logs.ts('error', `Model failed to load: ${failure}`);
    return {
      listening,
      loaded: models.loaded,
      failed: models.failed,
      startupFailures: models.startupFailures,
      ...(restore.snapshot && restore.registrations.length > 0 && !started.isSnapshotKept
        ? { restoredFrom: restore.snapshot.path }
        : {}),
      warnings,
      close,
    };
  } catch (error) {
    await close().catch(() => undefined);
    throw error;
  }
}

/** What a start has started so far, for close() (which also runs after a failure half-way). */
interface Started extends StartedListeners {
  autoscaler?: Autoscaler;
  snapshots?: SnapshotStore;
  /** Leave the snapshots on disk as they are (see StartupSnapshot.isKept), unless the models changed since. */
  isSnapshotKept: boolean;
  isChangedSinceStart: boolean;
}

/** TorchServe's log files under LOG_LOCATION, and the log that writes ts_log.log and tells the caller. */
function openServerLogs(config: ServerConfig, options: StartServerOptions): { logs: ServerLogs; log: Log } {
  const limits = resourceLimitsOf(config);
  const logs = createServerLogs({
    logDir: config.logDir,
    ...(config.metricsLogDir ? { metricsLogDir: config.metricsLogDir } : {}),
    limits: {
      maxLineBytes: limits.logMaxLineBytes,
      maxFileBytes: limits.logMaxFileBytes,
      maxBackupFiles: limits.logMaxBackupFiles,
    },
  });
  const log: Log = (level, message) => {
    logs.ts(level, message);
    options.log?.(level, message);
  };
  return { logs, log };
}

/**
 * Builds the app with the request log first on each listener (inference, management when it is
 * another one, metrics), so it sees every answer, and the operator's plugins. The logs are closed
 * when the build fails.
 */
async function buildServerApp(options: {
  config: ServerConfig;
  options: StartServerOptions;
  logs: ServerLogs;
  operator: OperatorContext;
}): Promise<MarinaApp> {
  const { config, logs } = options;
  // The terminal's (or marina.log's) request lines; access_log.log is the logs' (buildApp writes it).
  const requestLog = options.options.requestLog
    ? createRequestLog({ ...options.options.requestLog, log: options.options.log })
    : undefined;
  const requestLogPlugins = requestLog
    ? (['inference', 'management', 'metrics'] as const)
        .filter((api) => api !== 'management' || !isSameAddress(config.inferenceAddress, config.managementAddress))
        .map((api) => ({ api, plugin: requestLog.plugin }))
    : [];
  let app: MarinaApp;
  try {
    app = await buildApp(config, {
      ...(options.options.log ? { log: options.options.log } : {}),
      plugins: [...requestLogPlugins, ...(await createServerPlugins(config, options.operator))],
      logs,
    });
  } catch (error) {
    await logs.close();
    throw error;
  }
  // model_log.log: each worker's model load, as TorchServe's backend workers log theirs.
  app.registry.events.on('workerLoaded', (e) =>
    logs.model(
      'info',
      `W-${e.workerId}-${e.modelName}_${e.modelVersion}: model ${e.modelName} version ${e.modelVersion} loaded in ${Math.round(e.loadMs)} ms`,
    ),
  );
  return app;
}

/**
 * Loads the start-up models: the snapshot's versions and load_models are all opened before any
 * starts (so the thread split counts every worker), then started; then the snapshot's traffic.
 */
async function loadServerModels(options: {
  app: MarinaApp;
  restore: StartupSnapshot;
  options: StartServerOptions;
  warnings: string[];
}): Promise<{ loaded: string[]; failed: string[]; startupFailures: number; isSnapshotUnused: boolean }> {
  const { app, restore, warnings } = options;
  const { onProgress } = options.options;
  const restored = await restoreSnapshotModels(app, restore.registrations, restore.snapshot?.path);
  const startup = await app.loadStartupModels(onProgress ? { onProgress } : {});
  await restored.start();
  restoreTrafficPolicies({ app, snapshot: restore.snapshot, warnings });
  const loaded = [
    ...restored.loaded,
    ...startup.loaded.map((model) => `${model.modelName} (version ${model.modelVersion})`),
  ];
  const failed = [
    ...restored.failed,
    ...startup.failed.map((failure) => `${failure.url}: ${failure.error.code}: ${failure.error.message}`),
  ];
  const isSnapshotUnused = restore.registrations.length > 0 && restored.loaded.length === 0;
  if (isSnapshotUnused)
    warnings.push(
      `none of the ${restore.registrations.length} model versions of the snapshot ${restore.snapshot?.path} could be restored (see the failures); the snapshot is left as it is (no snapshot is written until the models change through the management API). Make the archives available and restart, or start with --ncs to ignore snapshots`,
    );
  return { loaded, failed, startupFailures: startup.failed.length, isSnapshotUnused };
}

/** The autoscaler, each move (or failed move) logged. Not started yet. */
function createServerAutoscaler(options: { app: MarinaApp; config: ServerConfig; log: Log }): Autoscaler {
  const { log } = options;
  return createAutoscaler({
    registry: options.app.registry,
    config: options.config,
    knobs: definedKnobs(options.config.autoscaling),
    onScale: (event) =>
      log(
        event.error ? 'warn' : 'info',
        event.error
          ? `autoscaler could not move model ${event.modelName} version ${event.modelVersion} from ${event.from} to ${event.to} workers: ${event.error.message}`
          : `autoscaler: model ${event.modelName} version ${event.modelVersion} ${event.from} -> ${event.to} workers (${event.reason})`,
      ),
  });
}

/**
 * The snapshot store (`-startup.cfg` now unless the snapshots on disk are kept, `-snapshot.cfg`
 * after every change, `-shutdown.cfg` on close), carrying the config file's settings.
 */
async function startSnapshotStore(options: {
  app: MarinaApp;
  config: ServerConfig;
  log: Log;
  operator: OperatorContext;
  started: Started;
}): Promise<void> {
  const { app, config, log, started } = options;
  let properties: Record<string, string> = {};
  try {
    properties = await snapshotPropertiesFromConfigFile(config.configFile);
  } catch (error) {
    log('warn', `snapshots will not carry the settings of ${config.configFile}: ${(error as Error).message}`);
  }
  const snapshots = createSnapshotStore({
    registry: app.registry,
    snapshotDir: config.snapshotDir,
    modelStore: config.modelStore,
    properties,
    onError: (error) => log('error', error.message),
  });
  started.snapshots = snapshots;
  options.operator.snapshots = snapshots;
  if (!started.isSnapshotKept) await snapshots.write('startup').catch((error: Error) => log('error', error.message));
  app.registry.events.on('changed', () => {
    started.isChangedSinceStart = true;
  });
}

/**
 * Stops the autoscaler, writes TorchServe's `<timestamp>-shutdown.cfg` while the registry still
 * holds the models (then unsubscribes the store: the registry emptying itself on close is not a
 * state to restore), closes the app and the gRPC servers as its requests drain, then the logs.
 */
async function closeServer(options: { app: MarinaApp; logs: ServerLogs; log: Log; started: Started }): Promise<void> {
  const { started, log } = options;
  started.autoscaler?.stop();
  await started.snapshots?.flush();
  // Not on top of snapshots this start kept because it could not use them, unless the models changed since.
  if (!started.isSnapshotKept || started.isChangedSinceStart)
    await started.snapshots?.write('shutdown').catch((error: Error) => log('error', error.message));
  await started.snapshots?.close();
  const appClosed = options.app.close();
  await Promise.all([
    started.grpcServers?.close({ drained: appClosed }),
    started.modelMesh?.close({ drained: appClosed }),
    appClosed,
  ]);
  options.logs.ts('info', 'Marina has stopped.');
  await options.logs.close();
}

/** The knobs the configuration sets: an undefined one would override the autoscaler's default. */
function definedKnobs(knobs: ServerConfig['autoscaling']): Partial<AutoscalingKnobs> {
  return Object.fromEntries(
    Object.entries(knobs ?? {}).filter(([, value]) => value !== undefined),
  ) as Partial<AutoscalingKnobs>;
}
