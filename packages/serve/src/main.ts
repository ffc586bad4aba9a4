import { spawn } from 'node:child_process';
import { closeSync, mkdirSync, openSync, readFileSync, rmSync, statSync } from 'node:fs';
import path from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import type { FastifyInstance, FastifyPluginAsync } from 'fastify';
import { buildApp, type AppPlugin } from './app.ts';
import { createTokenAuthorization, createTokenHook, tokenRoutes, type TokenAuthorization } from './auth/token-authorization.ts';
import { createServerMetrics } from './metrics/server-metrics.ts';
import { managementRoutes } from './routes/management.ts';
import { metricsRoutes } from './routes/metrics.ts';
import type { ModelRegistryApi } from './registry/model-registry-api.ts';
import type { ServerConfig } from './config/server-config.ts';
import type { ServeCliOptions } from './config/load-config.ts';
import { assertModelStoreConfigured, loadConfig } from './config/load-config.ts';
import { configError } from './config/config-errors.ts';
import { isServerProcessAlive, pidFilePath, readPidFile, removePidFile, writePidFile } from './config/pid-file.ts';
import { MARINA_VERSION, type ServeCommand } from './cli.ts';

/** A server listening on its addresses. */
export interface RunningServer {
  /** One line per API, e.g. `Inference API bound to http://127.0.0.1:8080`. */
  listening: Array<{ api: 'inference' | 'management' | 'metrics'; url: string }>;
  loaded: string[];
  failed: string[];
  /** Stops accepting connections and drains in-flight requests (app.close()). */
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

/**
 * Builds the app, loads the start-up models (before the ports bind, as TorchServe), then listens
 * on each address, once per distinct Fastify instance; metrics only when enable_metrics_api.
 * Library function: prints nothing, never exits.
 */
export async function startServer(config: ServerConfig): Promise<RunningServer> {
  const app = await buildApp(config, { plugins: await createServerPlugins(config) });
  try {
    const { loaded, failed } = await app.loadStartupModels();
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
      loaded: loaded.map((model) => `${model.modelName} (version ${model.modelVersion})`),
      failed: failed.map((failure) => `${failure.url}: ${failure.error.code}: ${failure.error.message}`),
      close: () => app.close(),
    };
  } catch (error) {
    await app.close().catch(() => undefined);
    throw error;
  }
}

/**
 * The APIs around the core's inference routes: token authorization (unless disabled), the
 * management API with /token, and /metrics on the metrics listener.
 */
export async function createServerPlugins(config: ServerConfig): Promise<AppPlugin[]> {
  const plugins: AppPlugin[] = [];
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
  plugins.push({ api: 'management', plugin: managementRoutes });
  if (config.enableMetricsApi) plugins.push({ api: 'metrics', plugin: metricsPlugin });
  return plugins;
}

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

const metricsPlugin: FastifyPluginAsync<{ registry: ModelRegistryApi }> = async (app, options) => {
  const metrics = createServerMetrics({ registry: options.registry, hostname: os.hostname() });
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
    server = await startServer(config);
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
