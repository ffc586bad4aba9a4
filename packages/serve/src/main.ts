import { spawn } from 'node:child_process';
import { closeSync, mkdirSync, openSync, readFileSync, rmSync, statSync } from 'node:fs';
import path from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import type { FastifyInstance, FastifyPluginAsync } from 'fastify';
import { buildApp, listStartupModels, type AppPlugin, type MarinaApp } from './app.ts';
import { createTokenAuthorization, createTokenHook, tokenRoutes, type TokenAuthorization } from './auth/token-authorization.ts';
import { createServerMetrics, type ServerMetrics } from './metrics/server-metrics.ts';
import { createAutoscaler, type Autoscaler, type AutoscalingKnobs } from './scaling/autoscaler.ts';
import { createSnapshotStore, readLatestSnapshot, type SnapshotStore } from './snapshot/snapshot-store.ts';
import { registrationsFromSnapshot, snapshotPropertiesFromConfigFile, withoutRestored, type SnapshotRegistration } from './snapshot/restore-snapshot.ts';
import { managementRoutes } from './routes/management.ts';
import { metricsRoutes } from './routes/metrics.ts';
import type { ModelRegistryApi } from './registry/model-registry-api.ts';
import type { ServerConfig } from './config/server-config.ts';
import type { ServeCliOptions } from './config/load-config.ts';
import { assertModelStoreConfigured, deepFreeze, loadConfig } from './config/load-config.ts';
import { configError } from './config/config-errors.ts';
import { isServerProcessAlive, pidFilePath, readPidFile, removePidFile, writePidFile } from './config/pid-file.ts';
import { MARINA_VERSION, type ServeCommand } from './cli.ts';

/** A server listening on its addresses. */
export interface RunningServer {
  /** One line per API, e.g. `Inference API bound to http://127.0.0.1:8080`. */
  listening: Array<{ api: 'inference' | 'management' | 'metrics'; url: string }>;
  loaded: string[];
  failed: string[];
  /** The snapshot file whose model versions were registered again, when one was. */
  restoredFrom?: string;
  /** Stops the autoscaler and the snapshot store, then stops accepting connections and drains in-flight requests (app.close()). Idempotent. */
  close(): Promise<void>;
}

/** IPC message a background child sends its launcher once it listens. */
interface ReadyMessage {
  type: 'marina:ready';
  listening: RunningServer['listening'];
  loaded: string[];
  failed: string[];
}

const LOG_FILE_NAME = 'marina.log';
const STOP_WAIT_MS = 90_000;
const START_WAIT_MS = 600_000;
const LOG_TAIL_LINES = 40;

export interface StartServerOptions {
  /** Non-fatal events (snapshot restore and write problems, autoscaler moves); ignored by default. */
  log?: (level: 'info' | 'warn' | 'error', message: string) => void;
}

/** Late-bound parts the plugins reach at request time (they exist only once the registry does). */
export interface OperatorContext {
  autoscaler?: Autoscaler;
  metrics?: ServerMetrics;
}

/**
 * Builds the app, restores the newest config snapshot (unless --ncs / isSnapshotEnabled false),
 * loads the start-up models not already restored (before the ports bind, as TorchServe), starts
 * the autoscaler and the snapshot store (one snapshot now, then one after every change), then
 * listens on each address, once per distinct Fastify instance; metrics only when enable_metrics_api.
 * Library function: prints nothing, never exits.
 */
export async function startServer(config: ServerConfig, options: StartServerOptions = {}): Promise<RunningServer> {
  const log = options.log ?? (() => undefined);
  const snapshot = config.isSnapshotEnabled ? await readLatestSnapshot(config.snapshotDir, { onWarning: (message) => log('warn', message) }) : undefined;
  const registrations = snapshot ? registrationsFromSnapshot(snapshot, { modelStore: config.modelStore }) : [];
  const effectiveConfig = registrations.length > 0 ? await withoutRestoredStartupModels(config, registrations) : config;
  const operator: OperatorContext = {};
  const app = await buildApp(effectiveConfig, { plugins: await createServerPlugins(effectiveConfig, operator) });
  let autoscaler: Autoscaler | undefined;
  let snapshots: SnapshotStore | undefined;
  let closing: Promise<void> | undefined;
  const close = () => {
    closing ??= (async () => {
      autoscaler?.stop();
      // Unsubscribe before the registry empties itself on close: that is not a state to restore.
      await snapshots?.close();
      await app.close();
    })();
    return closing;
  };
  try {
    const restored = await restoreSnapshotModels(app, registrations, snapshot?.path);
    const startup = await app.loadStartupModels();
    await restored.start();
    const loaded = [...restored.loaded, ...startup.loaded.map((model) => `${model.modelName} (version ${model.modelVersion})`)];
    const failed = [...restored.failed, ...startup.failed.map((failure) => `${failure.url}: ${failure.error.code}: ${failure.error.message}`)];

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
      await snapshots.write().catch((error: Error) => log('error', error.message));
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
        await target.instance.listen({ host: target.address.host, port: target.address.port });
        const bound = target.instance.server.address() as AddressInfo;
        const host = bound.family === 'IPv6' ? `[${bound.address}]` : bound.address;
        url = `${target.address.protocol}://${host}:${bound.port}`;
        started.set(target.instance, url);
      }
      listening.push({ api: target.api, url });
    }
    return {
      listening,
      loaded,
      failed,
      ...(snapshot && registrations.length > 0 ? { restoredFrom: snapshot.path } : {}),
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
  const describe = (r: SnapshotRegistration) => `${r.url} (model ${r.modelName} version ${r.snapshotVersion} from snapshot ${snapshotPath})`;
  const opened: Array<{ registration: SnapshotRegistration; version: Awaited<ReturnType<MarinaApp['registry']['open']>> }> = [];
  for (const registration of registrations) {
    try {
      opened.push({ registration, version: await app.registry.open(registration) });
    } catch (error) {
      failed.push(`${describe(registration)}: ${(error as { code?: string }).code ?? 'MARINA_ERR_INTERNAL'}: ${(error as Error).message}`);
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
          failed.push(`${describe(registration)}: ${(error as { code?: string }).code ?? 'MARINA_ERR_INTERNAL'}: ${(error as Error).message}`);
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

function definedKnobs(knobs: ServerConfig['autoscaling']): Partial<AutoscalingKnobs> {
  return Object.fromEntries(Object.entries(knobs ?? {}).filter(([, value]) => value !== undefined)) as Partial<AutoscalingKnobs>;
}

/**
 * The APIs around the core's inference routes: token authorization (unless disabled), the
 * management API with /token (describe shows the autoscaler's policy), /metrics on the metrics
 * listener, and TorchServe's Requests2XX/4XX/5XX counted on the inference and management listeners.
 * `operator` is filled in by startServer once the registry exists.
 */
export async function createServerPlugins(config: ServerConfig, operator: OperatorContext = {}): Promise<AppPlugin[]> {
  const plugins: AppPlugin[] = [];
  if (config.enableMetricsApi) {
    plugins.push({ api: 'inference', plugin: responseCounterPlugin, options: { operator } });
    if (!isSameAddress(config.inferenceAddress, config.managementAddress)) plugins.push({ api: 'management', plugin: responseCounterPlugin, options: { operator } });
  }
  if (!config.disableTokenAuthorization) {
    const tokens = await createTokenAuthorization({ keyFilePath: config.keyFilePath, tokenExpirationMin: config.tokenExpirationMin });
    if (isSameAddress(config.inferenceAddress, config.managementAddress)) {
      // One listener for both APIs: each request needs the key of the API its path belongs to.
      plugins.push({ api: 'inference', plugin: tokenHookPlugin, options: { keyType: 'by-path', tokens } });
    } else {
      plugins.push({ api: 'inference', plugin: tokenHookPlugin, options: { keyType: 'inference', tokens } });
      plugins.push({ api: 'management', plugin: tokenHookPlugin, options: { keyType: 'management', tokens } });
    }
    plugins.push({ api: 'management', plugin: tokenRoutes, options: { tokens } });
  }
  plugins.push({
    api: 'management',
    plugin: managementRoutes,
    options: { autoscaling: (modelName: string, modelVersion: string) => operator.autoscaler?.describe(modelName, modelVersion) },
  });
  if (config.enableMetricsApi) plugins.push({ api: 'metrics', plugin: metricsPlugin, options: { operator } });
  return plugins;
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
const tokenHookPlugin: FastifyPluginAsync<{ keyType: 'inference' | 'management' | 'by-path'; tokens: TokenAuthorization }> = async (app, options) => {
  if (options.keyType !== 'by-path') {
    app.addHook('onRequest', createTokenHook({ keyType: options.keyType, tokens: options.tokens }));
    return;
  }
  const inferenceHook = createTokenHook({ keyType: 'inference', tokens: options.tokens });
  const managementHook = createTokenHook({ keyType: 'management', tokens: options.tokens });
  app.addHook('onRequest', function tokenHookByPath(request, reply, done) {
    const isManagementPath = /^\/(models|token)(\/|\?|$)/.test(request.url);
    return (isManagementPath ? managementHook : inferenceHook).call(this, request, reply, done);
  });
};
(tokenHookPlugin as unknown as Record<symbol, boolean>)[Symbol.for('skip-override')] = true;

const metricsPlugin: FastifyPluginAsync<{ registry: ModelRegistryApi; operator: OperatorContext }> = async (app, options) => {
  const metrics = createServerMetrics({ registry: options.registry, hostname: os.hostname() });
  options.operator.metrics = metrics;
  app.addHook('onClose', async () => metrics.close());
  await app.register(metricsRoutes, { metrics });
};

function isSameAddress(a: ServerConfig['inferenceAddress'], b: ServerConfig['inferenceAddress']): boolean {
  return a.protocol === b.protocol && a.host === b.host && a.port === b.port;
}

/** Executes one parsed `serve` command and exits the process: the only process.exit in Marina. */
export async function runServeCommand(command: ServeCommand): Promise<void> {
  try {
    if (command.mode === 'version') {
      process.stdout.write(`Marina Version is ${MARINA_VERSION}\n`);
      exitProcess(0);
    } else if (command.mode === 'stop') exitProcess(await stopBackgroundServer());
    else if (command.foreground) await runForeground(command.cliOptions);
    else exitProcess(await startBackgroundServer(command.cliOptions));
  } catch (error) {
    const code = (error as { code?: string }).code;
    process.stderr.write(`${code ? `${code}: ` : ''}${(error as Error).message}\n`);
    exitProcess(1);
  }
}

/** process.exit, in one place. */
export function exitProcess(code: number): never {
  process.exit(code);
}

async function loadCheckedConfig(cliOptions: ServeCliOptions): Promise<ServerConfig> {
  const config = await loadConfig({ cliOptions, env: process.env, cwd: process.cwd() });
  assertModelStoreConfigured(config);
  return config;
}

async function runForeground(cliOptions: ServeCliOptions): Promise<void> {
  const recorded = readPidFile();
  if (recorded && recorded.pid !== process.pid && isServerProcessAlive(recorded.pid)) throw alreadyRunning(recorded.pid);
  const config = await loadCheckedConfig(cliOptions);
  for (const warning of config.warnings) process.stderr.write(`WARN ${warning}\n`);
  writePidFile({ pid: process.pid, keyFilePath: config.keyFilePath, ...(recorded?.logFile ? { logFile: recorded.logFile } : {}) });
  process.stdout.write(`Marina ${MARINA_VERSION} starting (config: ${config.configFile ?? 'defaults'}, model store: ${config.modelStore})\n`);

  let server: RunningServer;
  try {
    server = await startServer(config, { log: (level, message) => (level === 'info' ? process.stdout : process.stderr).write(`${level === 'info' ? '' : `${level.toUpperCase()} `}${message}\n`) });
  } catch (error) {
    removePidFile({ onlyIfPid: process.pid });
    throw error;
  }
  // Handlers before the ready line: whoever waits for it may signal at once.
  let isStopping = false;
  const onSignal = (signal: NodeJS.Signals) => {
    if (isStopping) {
      process.stderr.write(`${signal} again: exiting without waiting for in-flight requests.\n`);
      removePidFile({ onlyIfPid: process.pid });
      exitProcess(1);
    }
    isStopping = true;
    process.stdout.write(`${signal} received: no new connections; finishing in-flight requests (send it again to exit at once).\n`);
    server.close().then(
      () => {
        removePidFile({ onlyIfPid: process.pid });
        process.stdout.write('Marina has stopped.\n');
        exitProcess(0);
      },
      (error: unknown) => {
        process.stderr.write(`error while stopping: ${(error as Error).message}\n`);
        removePidFile({ onlyIfPid: process.pid });
        exitProcess(1);
      },
    );
  };
  process.on('SIGTERM', onSignal);
  process.on('SIGINT', onSignal);

  for (const { api, url } of server.listening) process.stdout.write(`${api[0]!.toUpperCase()}${api.slice(1)} API bound to ${url}\n`);
  process.stdout.write(`${tokenNote(config)}\n`);
  if (server.restoredFrom) process.stdout.write(`Restored the models of the snapshot ${server.restoredFrom} (start with --ncs to ignore snapshots)\n`);
  for (const name of server.loaded) process.stdout.write(`Model loaded: ${name}\n`);
  for (const failure of server.failed) process.stderr.write(`Model failed to load: ${failure}\n`);
  process.stdout.write('Marina is ready.\n');

  if (process.send) {
    const ready: ReadyMessage = { type: 'marina:ready', listening: server.listening, loaded: server.loaded, failed: server.failed };
    process.send(ready, () => process.disconnect?.());
  }
}

/**
 * `serve --start` without --foreground: checks the configuration here (errors show in the
 * terminal), starts `serve --foreground` detached with its output appended to <logDir>/marina.log,
 * records its pid and waits for its ready message (IPC, so token auth on /ping is no obstacle).
 */
async function startBackgroundServer(cliOptions: ServeCliOptions): Promise<number> {
  const recorded = readPidFile();
  if (recorded && isServerProcessAlive(recorded.pid)) throw alreadyRunning(recorded.pid);
  if (recorded) removePidFile();
  const config = await loadCheckedConfig(cliOptions);
  for (const warning of config.warnings) process.stderr.write(`WARN ${warning}\n`);

  mkdirSync(config.logDir, { recursive: true });
  const logFile = path.join(config.logDir, LOG_FILE_NAME);
  const logStart = fileSize(logFile);
  const logFd = openSync(logFile, 'a');
  const binPath = fileURLToPath(new URL('../bin/serve.js', import.meta.url));
  const child = spawn(process.execPath, [binPath, ...toChildArgs(cliOptions)], {
    cwd: process.cwd(),
    detached: true,
    stdio: ['ignore', logFd, logFd, 'ipc'],
    // glibc then returns onnxruntime's load-time memory to the OS: about half the RSS per session (measured).
    env: { ...process.env, MALLOC_MMAP_THRESHOLD_: process.env.MALLOC_MMAP_THRESHOLD_ ?? '131072' },
  });
  closeSync(logFd);
  if (child.pid === undefined) throw configError.MARINA_ERR_SERVER_START_FAILED(`could not start ${process.execPath} ${binPath}`);
  writePidFile({ pid: child.pid, keyFilePath: config.keyFilePath, logFile });

  const outcome = await new Promise<{ ready: ReadyMessage } | { exitCode: number | null; signal: string | null } | { timedOut: true }>((resolve) => {
    const timer = setTimeout(() => resolve({ timedOut: true }), START_WAIT_MS);
    child.on('message', (message: ReadyMessage) => {
      if (message?.type === 'marina:ready') {
        clearTimeout(timer);
        resolve({ ready: message });
      }
    });
    child.on('exit', (exitCode, signal) => {
      clearTimeout(timer);
      resolve({ exitCode, signal });
    });
  });

  if ('ready' in outcome) {
    if (child.connected) child.disconnect();
    child.unref();
    for (const { api, url } of outcome.ready.listening) process.stdout.write(`${api[0]!.toUpperCase()}${api.slice(1)} API bound to ${url}\n`);
    process.stdout.write(`${tokenNote(config)}\n`);
    for (const name of outcome.ready.loaded) process.stdout.write(`Model loaded: ${name}\n`);
    for (const failure of outcome.ready.failed) process.stderr.write(`Model failed to load: ${failure}\n`);
    process.stdout.write(`Marina is running in the background (pid ${child.pid}); log: ${logFile}. Stop it with serve --stop.\n`);
    return 0;
  }
  if ('timedOut' in outcome) {
    child.disconnect();
    child.unref();
    process.stdout.write(`Marina (pid ${child.pid}) is still starting after ${START_WAIT_MS / 1000}s; it keeps running in the background. See ${logFile}.\n`);
    return 0;
  }
  removePidFile({ onlyIfPid: child.pid });
  const tail = readLogTail(logFile, logStart);
  throw configError.MARINA_ERR_SERVER_START_FAILED(
    `Marina exited during start-up (${outcome.signal ? `signal ${outcome.signal}` : `exit code ${outcome.exitCode}`}). Last lines of ${logFile}:\n${tail}`,
  );
}

/** `serve --stop`: SIGTERM, bounded wait, then the pid file and key file go. Returns the exit code. */
async function stopBackgroundServer(): Promise<number> {
  const recorded = readPidFile();
  if (!recorded || !isServerProcessAlive(recorded.pid)) {
    if (recorded) removePidFile();
    process.stdout.write('Marina is not currently running.\n');
    return 0;
  }
  process.kill(recorded.pid, 'SIGTERM');
  const deadline = Date.now() + STOP_WAIT_MS;
  while (isServerProcessAlive(recorded.pid)) {
    if (Date.now() > deadline) {
      throw configError.MARINA_ERR_SERVER_STOP_TIMEOUT(
        `Marina (pid ${recorded.pid}) is still running ${STOP_WAIT_MS / 1000}s after SIGTERM, probably still finishing requests. Run serve --stop again, or kill -9 ${recorded.pid}.`,
      );
    }
    await delay(100);
  }
  removePidFile();
  rmSync(recorded.keyFilePath ?? path.join(process.cwd(), 'key_file.json'), { force: true });
  process.stdout.write('Marina has stopped.\n');
  return 0;
}

function tokenNote(config: ServerConfig): string {
  return config.disableTokenAuthorization
    ? 'Token authorization is disabled.'
    : `Token authorization is on: send 'Authorization: Bearer <key>' with the keys in ${config.keyFilePath}.`;
}

function alreadyRunning(pid: number): Error {
  return configError.MARINA_ERR_SERVER_ALREADY_RUNNING(
    `Marina is already running (pid ${pid}, pid file ${pidFilePath()}), please use serve --stop to stop Marina.`,
  );
}

/** The child's flags: the same options, paths made absolute, plus --foreground. */
function toChildArgs(cliOptions: ServeCliOptions): string[] {
  const args = ['--start', '--foreground'];
  if (cliOptions.tsConfig) args.push('--ts-config', path.resolve(cliOptions.tsConfig));
  if (cliOptions.modelStore) args.push('--model-store', path.resolve(cliOptions.modelStore));
  if (cliOptions.models && cliOptions.models.length > 0) args.push('--models', ...cliOptions.models);
  if (cliOptions.ncs) args.push('--ncs');
  if (cliOptions.disableTokenAuth) args.push('--disable-token-auth');
  if (cliOptions.enableModelApi) args.push('--enable-model-api');
  if (cliOptions.logConfig) args.push('--log-config', cliOptions.logConfig);
  return args;
}

function fileSize(filePath: string): number {
  try {
    return statSync(filePath).size;
  } catch {
    return 0;
  }
}

function readLogTail(logFile: string, fromByte: number): string {
  try {
    const text = readFileSync(logFile).subarray(fromByte).toString('utf8');
    return text.trimEnd().split('\n').slice(-LOG_TAIL_LINES).map((line) => `  ${line}`).join('\n') || '  (the log is empty)';
  } catch {
    return '  (the log could not be read)';
  }
}
