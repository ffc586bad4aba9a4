import type { AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { readFile } from 'node:fs/promises';
import { buildApp, type MarinaApp } from './app.ts';
import { createAutoscaler, type Autoscaler, type AutoscalingKnobs } from './scaling/autoscaler.ts';
import {
  createSnapshotStore,
  listSnapshots,
  parseSnapshot,
  readLatestSnapshot,
  type Snapshot,
  type SnapshotStore,
} from './snapshot/snapshot-store.ts';
import {
  assertSnapshotArchivesExist,
  registrationsFromSnapshot,
  snapshotPropertiesFromConfigFile,
  type SnapshotRegistration,
} from './snapshot/restore-snapshot.ts';
import { startOpenedModels } from './startup-loading.ts';
import { resourceLimitsOf, type ServerConfig } from './config/server-config.ts';
import { deepFreeze } from './config/load-config.ts';
import { createServerLogs } from './logging/server-logs.ts';
import { createServerPlugins, isSameAddress, type OperatorContext } from './server-plugins.ts';
import { assertAddressesFree, listenTargets, toListenError } from './config/assert-addresses-free.ts';
import type { StartupProgressEvent } from './startup-progress.ts';
import type { GrpcBindError, GrpcServers } from './protocols/grpc-server.ts';
import type { ModelMeshRuntimeServer } from './protocols/modelmesh/modelmesh-runtime-server.ts';
import { createRequestLog, type RequestLog } from './request-log.ts';
import { removeStaleDownloads } from './model-download/resolve-model-url.ts';

/** A server listening on its addresses. */
export interface RunningServer {
  /** One line per API, e.g. `Inference API bound to http://127.0.0.1:8080`. */
  listening: Array<{
    api: 'inference' | 'management' | 'metrics' | 'grpc-inference' | 'grpc-management' | 'modelmesh-runtime';
    url: string;
  }>;
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
  // A port in use fails here, in milliseconds, rather than after the models have loaded.
  await assertAddressesFree(config);
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
  const log = (level: 'info' | 'warn' | 'error', message: string) => {
    logs.ts(level, message);
    options.log?.(level, message);
  };
  const warnings: string[] = [];
  // A server killed during a download leaves its temporary file: nothing else ever removes it.
  if (config.modelStore) {
    const stale = await removeStaleDownloads(config.modelStore);
    if (stale.length > 0)
      log('info', `removed ${stale.length} unfinished download(s) left in the model store by a previous run`);
  }
  // A start without TS_CONFIG_FILE or --ts-config looked in the snapshot folder (loadConfig): report
  // each newer snapshot it skipped as corrupt, and never bury unusable snapshots under a new one.
  const isSnapshotFolderRead =
    config.isSnapshotEnabled &&
    config.configFileOrigin !== 'TS_CONFIG_FILE' &&
    config.configFileOrigin !== '--ts-config';
  const usable = isSnapshotFolderRead
    ? await readLatestSnapshot(config.snapshotDir, { onWarning: (message) => warnings.push(message) }).catch(
        () => undefined,
      )
    : undefined;
  const snapshot = await snapshotOfConfigFile(config.configFile, log);
  const registrations = snapshot ? registrationsFromSnapshot(snapshot, { modelStore: config.modelStore }) : [];
  // TorchServe stops a start whose snapshot names a missing archive; Marina's lenient start is asked for.
  if (!config.snapshotSkipMissingArchives) {
    await assertSnapshotArchivesExist(registrations).catch((error: Error) => {
      log(
        'error',
        `${error.message} (snapshot ${snapshot?.path}): put the archive back in the model store, set snapshot_skip_missing_archives=true to start without that model, or start with --ncs to ignore snapshots`,
      );
      throw error;
    });
  }
  // Writing a snapshot now would put a model-less one on top of snapshots this start could not use.
  let isSnapshotKept = false;
  const snapshotFiles = isSnapshotFolderRead ? await listSnapshots(config.snapshotDir).catch(() => []) : [];
  if (snapshotFiles.length > 0 && usable === undefined) {
    isSnapshotKept = true;
    warnings.push(
      `none of the ${snapshotFiles.length} snapshot files in ${config.snapshotDir} could be read, so no model was restored; they are left as they are (no snapshot is written until the models change through the management API). Fix or remove them, or start with --ncs to ignore snapshots`,
    );
  }
  // TorchServe: a config with model_snapshot restores those models and loads no load_models / --models.
  const effectiveConfig = snapshot ? withoutStartupModels(config, log) : config;
  const operator: OperatorContext = { logs };
  // The terminal's (or marina.log's) request lines; access_log.log is the logs' (buildApp writes it).
  const requestLog: RequestLog | undefined = options.requestLog
    ? createRequestLog({ ...options.requestLog, log: options.log })
    : undefined;
  // First on each listener (inference, management when it is another one, metrics), so it sees every answer.
  const requestLogPlugins = requestLog
    ? (['inference', 'management', 'metrics'] as const)
        .filter(
          (api) =>
            api !== 'management' || !isSameAddress(effectiveConfig.inferenceAddress, effectiveConfig.managementAddress),
        )
        .map((api) => ({ api, plugin: requestLog.plugin }))
    : [];
  let app: MarinaApp;
  try {
    app = await buildApp(effectiveConfig, {
      ...(options.log ? { log: options.log } : {}),
      plugins: [...requestLogPlugins, ...(await createServerPlugins(effectiveConfig, operator))],
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
  let autoscaler: Autoscaler | undefined;
  let snapshots: SnapshotStore | undefined;
  let isChangedSinceStart = false;
  let grpcServers: GrpcServers | undefined;
  let modelMesh: ModelMeshRuntimeServer | undefined;
  let closing: Promise<void> | undefined;
  const close = () => {
    closing ??= (async () => {
      autoscaler?.stop();
      // TorchServe's <timestamp>-shutdown.cfg, while the registry still holds the models; then
      // unsubscribe before the registry empties itself on close: that is not a state to restore.
      await snapshots?.flush();
      // Not on top of snapshots this start kept because it could not use them, unless the models changed since.
      if (!isSnapshotKept || isChangedSinceStart)
        await snapshots?.write('shutdown').catch((error: Error) => log('error', error.message));
      await snapshots?.close();
      const appClosed = app.close();
      await Promise.all([
        grpcServers?.close({ drained: appClosed }),
        modelMesh?.close({ drained: appClosed }),
        appClosed,
      ]);
      logs.ts('info', 'Marina has stopped.');
      await logs.close();
    })();
    return closing;
  };
  try {
    const restored = await restoreSnapshotModels(app, registrations, snapshot?.path);
    const startup = await app.loadStartupModels(options.onProgress ? { onProgress: options.onProgress } : {});
    await restored.start();
    // The snapshot's traffic policies, once their versions are back; a policy whose versions did not all come back is reported and left out (100 % to the default version).
    for (const [modelName, policy] of Object.entries(snapshot?.traffic ?? {})) {
      try {
        app.registry.setTrafficPolicy(modelName, policy);
      } catch (error) {
        warnings.push(
          `the snapshot's traffic policy of model '${modelName}' was not restored: ${(error as Error).message}`,
        );
      }
    }
    const loaded = [
      ...restored.loaded,
      ...startup.loaded.map((model) => `${model.modelName} (version ${model.modelVersion})`),
    ];
    const failed = [
      ...restored.failed,
      ...startup.failed.map((failure) => `${failure.url}: ${failure.error.code}: ${failure.error.message}`),
    ];
    if (registrations.length > 0 && restored.loaded.length === 0) {
      isSnapshotKept = true;
      warnings.push(
        `none of the ${registrations.length} model versions of the snapshot ${snapshot?.path} could be restored (see the failures); the snapshot is left as it is (no snapshot is written until the models change through the management API). Make the archives available and restart, or start with --ncs to ignore snapshots`,
      );
    }

    autoscaler = createAutoscaler({
      registry: app.registry,
      config,
      knobs: definedKnobs(config.autoscaling),
      onScale: (event) =>
        log(
          event.error ? 'warn' : 'info',
          event.error
            ? `autoscaler could not move model ${event.modelName} version ${event.modelVersion} from ${event.from} to ${event.to} workers: ${event.error.message}`
            : `autoscaler: model ${event.modelName} version ${event.modelVersion} ${event.from} -> ${event.to} workers (${event.reason})`,
        ),
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
      if (!isSnapshotKept) await snapshots.write('startup').catch((error: Error) => log('error', error.message));
      app.registry.events.on('changed', () => (isChangedSinceStart = true));
    }

    const targets = [
      { api: 'inference' as const, instance: app.inference, address: config.inferenceAddress },
      { api: 'management' as const, instance: app.management, address: config.managementAddress },
      ...(config.enableMetricsApi
        ? [{ api: 'metrics' as const, instance: app.metrics, address: config.metricsAddress }]
        : []),
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
    if (effectiveConfig.grpc) {
      // Loaded here, not at import: the launcher's other paths (config errors, --stop) never pay for grpc-js.
      const { startGrpcServers } = await import('./protocols/grpc-server.ts');
      grpcServers = await startGrpcServers({
        config: effectiveConfig,
        grpc: effectiveConfig.grpc,
        dataPlane: app.dataPlane,
        management: app.management,
        tokens: operator.tokens,
      }).catch((error: GrpcBindError) => {
        // A port taken after assertAddressesFree looked: the same answer as for HTTP, not grpc-js's sentence.
        const target = listenTargets(effectiveConfig).find((t) => t.key === error.key);
        throw target && error.code ? toListenError(error, target, effectiveConfig) : error;
      });
      const scheme = effectiveConfig.grpc.isSslEnabled ? 'grpcs' : 'grpc';
      listening.push(
        { api: 'grpc-inference', url: `${scheme}://${grpcServers.inferenceUrl}` },
        { api: 'grpc-management', url: `${scheme}://${grpcServers.managementUrl}` },
      );
    }
    if (effectiveConfig.modelMeshRuntime) {
      const { startModelMeshRuntime } = await import('./protocols/modelmesh/modelmesh-runtime-server.ts');
      modelMesh = await startModelMeshRuntime({
        registry: app.registry,
        config: effectiveConfig,
        address: effectiveConfig.modelMeshRuntime,
        log,
      });
      listening.push({ api: 'modelmesh-runtime', url: `grpc://${modelMesh.url}` });
    }
    // ts_log.log only: the launcher prints its own start-up report on the terminal.
    for (const l of listening) logs.ts('info', `${l.api} API bound to ${l.url}`);
    for (const model of loaded) logs.ts('info', `Model loaded: ${model}`);
    for (const failure of failed) logs.ts('error', `Model failed to load: ${failure}`);
    return {
      listening,
      loaded,
      failed,
      startupFailures: startup.failed.length,
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
async function restoreSnapshotModels(
  app: MarinaApp,
  registrations: SnapshotRegistration[],
  snapshotPath: string | undefined,
) {
  const loaded: string[] = [];
  const failed: string[] = [];
  const describeFailure = (r: SnapshotRegistration, error: unknown) =>
    `${r.url} (model ${r.modelName} version ${r.snapshotVersion} from snapshot ${snapshotPath}): ${(error as { code?: string }).code ?? 'MARINA_ERR_INTERNAL'}: ${(error as Error).message}`;
  const opened: Array<{
    registration: SnapshotRegistration;
    version: Awaited<ReturnType<MarinaApp['registry']['open']>>;
  }> = [];
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
      // Under a budget, pinned versions first, then the most recently used: those are what fits.
      const lastUsed = (r: SnapshotRegistration) => (r.lastUsed ? Date.parse(r.lastUsed) || 0 : 0);
      const ordered =
        app.registry.memoryBudgetBytes === undefined
          ? opened
          : [...opened].sort(
              (a, b) =>
                Number(b.registration.pinned === true) - Number(a.registration.pinned === true) ||
                lastUsed(b.registration) - lastUsed(a.registration),
            );
      const byVersion = new Map(ordered.map((o) => [o.version, o.registration]));
      for (const { registration, version } of ordered)
        if (registration.lastUsed) version.lastUsedAt = lastUsed(registration) || undefined;
      await startOpenedModels({
        registry: app.registry,
        versions: ordered.map((o) => o.version),
        reason: 'startup',
        log: (level, message) => app.inference.log[level](message),
        onDone: (version, outcome) => {
          if (outcome.outcome === 'failed') failed.push(describeFailure(byVersion.get(version)!, outcome.error));
          else loaded.push(`${version.modelName} (version ${version.modelVersion})`);
        },
      });
    },
  };
}

/**
 * The snapshot a config file carries in its `model_snapshot` key (a snapshot chosen as the config
 * file, or one named with --ts-config, in Marina's or TorchServe's own format), else undefined.
 */
async function snapshotOfConfigFile(
  configFile: string | undefined,
  log: (level: 'warn', message: string) => void,
): Promise<Snapshot | undefined> {
  if (configFile === undefined) return undefined;
  let text: string;
  try {
    text = await readFile(configFile, 'utf8');
  } catch {
    return undefined; // loadConfig has read it already; a file gone since then holds no snapshot.
  }
  if (!/^\s*model_snapshot\s*[=:\s]/m.test(text)) return undefined;
  try {
    return parseSnapshot(configFile, text);
  } catch (error) {
    log('warn', `${(error as Error).message}; no models were restored`);
    return undefined;
  }
}

/** The configuration without load_models: a restored snapshot replaces them (TorchServe ignores --models then). */
function withoutStartupModels(config: ServerConfig, log: (level: 'info', message: string) => void): ServerConfig {
  if (config.loadModels !== 'all' && config.loadModels.length === 0) return config;
  log(
    'info',
    `load_models/--models are not loaded: the models of the snapshot in ${config.configFile} are restored instead (TorchServe's rule)`,
  );
  return deepFreeze({ ...config, loadModels: [] });
}

/** The knobs the configuration sets: an undefined one would override the autoscaler's default. */
function definedKnobs(knobs: ServerConfig['autoscaling']): Partial<AutoscalingKnobs> {
  return Object.fromEntries(
    Object.entries(knobs ?? {}).filter(([, value]) => value !== undefined),
  ) as Partial<AutoscalingKnobs>;
}
