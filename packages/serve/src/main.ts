import type { ServerConfig } from './config/server-config.ts';
import { assertModelStoreConfigured, loadConfig } from './config/load-config.ts';
import type { ServeCliOptions } from './config/serve-cli-options.ts';
import { removePidFile, writePidFile } from './config/pid-file.ts';
import { startServer, type RunningServer } from './start-server.ts';
import {
  assertNoOtherServer,
  notifyLauncher,
  stripAnsi,
  startBackgroundServer,
  stopBackgroundServer,
  writeStartupReport,
} from './launcher.ts';
import type { ServeCommand } from './serve-command.ts';
import { MARINA_VERSION } from './version.ts';
import { configError } from './config/config-errors.ts';
import { createStartupProgress, type StartupProgressEvent } from './startup-progress.ts';
import { formatTerminalLine } from './request-log.ts';
import { cleanModelCaches, defaultExtractionCacheDir, optimizedModelCacheDir } from './cache/model-caches.ts';

/** Seconds a stopping server may take beyond default_response_timeout before it exits regardless. */
const DRAIN_GRACE_SEC = 30;

/** Executes one parsed `serve` command and exits the process: the only process.exit in Marina. */
export async function runServeCommand(command: ServeCommand): Promise<void> {
  try {
    if (command.mode === 'version') {
      process.stdout.write(`Marina Version is ${MARINA_VERSION}\n`);
      exitProcess(0);
    } else if (command.mode === 'stop') exitProcess(await stopBackgroundServer());
    else if (command.mode === 'clean-cache') exitProcess(await cleanCaches());
    else if (command.foreground) await runForeground(command.cliOptions);
    else exitProcess(await startBackgroundServer({ cliOptions: command.cliOptions, loadConfig: loadCheckedConfig }));
  } catch (error) {
    exitWithError(error);
  }
}

/** `serve --clean-cache`: refused while a server runs (its workers read these folders). Returns the exit code. */
async function cleanCaches(): Promise<number> {
  assertNoOtherServer();
  for (const cleaned of await cleanModelCaches({
    extractionCacheDir: defaultExtractionCacheDir(),
    optimizedCacheDir: optimizedModelCacheDir(),
  })) {
    process.stdout.write(`Removed ${cleaned.entries} entries (${cleaned.bytes} bytes) from ${cleaned.dir}\n`);
  }
  return 0;
}

/** process.exit, in one place. */
export function exitProcess(code: number): never {
  process.exit(code);
}

/** Prints `CODE: message` (or the bare message of an error without a code) to stderr and exits 1. */
export function exitWithError(error: unknown): never {
  const code = (error as { code?: string }).code;
  process.stderr.write(`${code ? `${code}: ` : ''}${stripAnsi((error as Error).message)}\n`);
  exitProcess(1);
}

/** The configuration of this invocation, which must name a model store; its warnings go to stderr. */
async function loadCheckedConfig(cliOptions: ServeCliOptions): Promise<ServerConfig> {
  const config = await loadConfig({ cliOptions, env: process.env, cwd: process.cwd() });
  assertModelStoreConfigured(config);
  for (const warning of config.warnings) process.stderr.write(`WARN ${warning}\n`);
  return config;
}

/**
 * `serve --foreground` (also the background child): serves in this process until SIGTERM/SIGINT,
 * which drain in-flight requests; a second signal exits at once.
 */
async function runForeground(cliOptions: ServeCliOptions): Promise<void> {
  const recorded = assertNoOtherServer();
  const config = await loadCheckedConfig(cliOptions);
  writePidFile({
    pid: process.pid,
    ...(config.isKeyFileProvided ? {} : { keyFilePath: config.keyFilePath }),
    ...(recorded?.logFile ? { logFile: recorded.logFile } : {}),
  });
  process.stdout.write(
    `Marina ${MARINA_VERSION} starting (config: ${config.configFile ?? 'defaults'}, model store: ${config.modelStore})\n`,
  );

  let server: RunningServer;
  // On a terminal a live line; in the log (a background child's stdout) a line per step. A
  // background child also hands each step to its launcher, which shows it in the user's terminal.
  const progress = createStartupProgress({ stream: process.stdout, isTty: process.stdout.isTTY === true });
  const onProgress = (event: StartupProgressEvent) => {
    progress.onProgress(event);
    if (process.send && process.connected) process.send({ type: 'marina:progress', event });
  };
  try {
    server = await startServer(config, {
      onProgress,
      // Every line with its time and level; the request lines carry the request id (x-request-id).
      log: (level, message) =>
        (level === 'info' ? process.stdout : process.stderr).write(`${formatTerminalLine(level, message)}\n`),
      // Failed requests here too (every request is in logs/access_log.log); on a terminal, every request.
      requestLog: { isEveryRequestLogged: process.stdout.isTTY === true },
    });
  } catch (error) {
    removePidFile({ onlyIfPid: process.pid });
    throw error;
  } finally {
    progress.stop();
  }
  // Only for load_models / --models: a snapshot none of whose models came back keeps serving, says so and keeps the snapshot.
  if (server.loaded.length === 0 && server.startupFailures > 0) {
    for (const failure of server.failed) process.stderr.write(`Model failed to load: ${failure}\n`);
    await server.close();
    removePidFile({ onlyIfPid: process.pid });
    throw configError.MARINA_ERR_NO_MODEL_LOADED(
      `none of the ${server.failed.length} start-up model(s) loaded (see the lines above), so Marina stopped. Fix load_models / --models or the archives, or start without models and register them later.`,
    );
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
    process.stdout.write(
      `${signal} received: no new connections; finishing in-flight requests (send it again to exit at once).\n`,
    );
    // In-flight jobs end within their response timeout; should closing wait on anything else (a
    // file system that never answers a write), the process still ends. unref: never keeps it alive.
    const drainDeadlineMs = (config.defaultResponseTimeoutSec + DRAIN_GRACE_SEC) * 1000;
    setTimeout(() => {
      process.stderr.write(
        `Marina did not stop within ${drainDeadlineMs / 1000} s of ${signal} (default_response_timeout + ${DRAIN_GRACE_SEC} s); exiting without waiting further.\n`,
      );
      removePidFile({ onlyIfPid: process.pid });
      exitProcess(1);
    }, drainDeadlineMs).unref();
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

  writeStartupReport(server, config);
  process.stdout.write('Marina is ready.\n');
  notifyLauncher(server);
}
