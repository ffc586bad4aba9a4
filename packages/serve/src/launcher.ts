import { spawn } from 'node:child_process';
import { closeSync, mkdirSync, openSync, readFileSync, rmSync, statSync } from 'node:fs';
import path from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { MALLOC_MMAP_THRESHOLD_BYTES } from '../bin/malloc-threshold.js';
import type { ServerConfig } from './config/server-config.ts';
import type { ServeCliOptions } from './config/serve-cli-options.ts';
import { configError } from './config/config-errors.ts';
import {
  isServerProcessAlive,
  pidFilePath,
  readPidFile,
  removePidFile,
  writePidFile,
  type PidFileContent,
} from './config/pid-file.ts';
import type { RunningServer } from './start-server.ts';
import { assertAddressesFree } from './config/assert-addresses-free.ts';
import { createStartupProgress, type StartupProgressEvent } from './startup-progress.ts';

/** What a server reports once it listens: in its own terminal, and to the launcher over IPC. */
export type StartupReport = Pick<RunningServer, 'listening' | 'loaded' | 'failed' | 'restoredFrom'> & {
  warnings?: string[];
};

/** IPC message a background child sends its launcher for each step of loading its start-up models. */
interface ProgressMessage {
  type: 'marina:progress';
  event: StartupProgressEvent;
}

/** IPC message a background child sends its launcher once it listens. */
interface ReadyMessage extends Pick<RunningServer, 'listening' | 'loaded' | 'failed' | 'restoredFrom' | 'warnings'> {
  type: 'marina:ready';
}

const LOG_FILE_NAME = 'marina.log';
const STOP_WAIT_MS = 90_000;
const START_WAIT_MS = 600_000;
const LOG_TAIL_LINES = 40;

export interface StartBackgroundServerOptions {
  cliOptions: ServeCliOptions;
  /**
   * Loads and checks the configuration in the launcher, so its errors show in this terminal rather
   * than in the log; called once no other server is running.
   */
  loadConfig: (cliOptions: ServeCliOptions) => Promise<ServerConfig>;
}

/**
 * `serve --start` without --foreground: checks the configuration here, starts `serve --foreground`
 * detached with its output appended to <logDir>/marina.log, records its pid and waits (up to 10 min)
 * for its ready message (IPC, so token auth on /ping is no obstacle). Prints the child's report.
 * Returns the exit code.
 *
 * @throws MARINA_ERR_SERVER_ALREADY_RUNNING when the pid file names a live server;
 *   MARINA_ERR_ADDRESS_IN_USE / MARINA_ERR_ADDRESS_UNAVAILABLE before the child starts;
 *   MARINA_ERR_SERVER_START_FAILED (with the log's last lines) when the child exits during start-up;
 *   the MARINA_ERR_CONFIG_* errors of `loadConfig`.
 */
export async function startBackgroundServer(options: StartBackgroundServerOptions): Promise<number> {
  const { cliOptions } = options;
  if (assertNoOtherServer()) removePidFile();
  const config = await options.loadConfig(cliOptions);
  // Here, so that a port in use is reported in this terminal at once, not after the child loaded its models.
  await assertAddressesFree(config);

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
    env: { ...process.env, MALLOC_MMAP_THRESHOLD_: process.env.MALLOC_MMAP_THRESHOLD_ ?? MALLOC_MMAP_THRESHOLD_BYTES },
  });
  closeSync(logFd);
  if (child.pid === undefined)
    throw configError.MARINA_ERR_SERVER_START_FAILED(`could not start ${process.execPath} ${binPath}`);
  writePidFile({ pid: child.pid, ...(config.isKeyFileProvided ? {} : { keyFilePath: config.keyFilePath }), logFile });

  const progress = createStartupProgress({ stream: process.stdout, isTty: process.stdout.isTTY === true });
  const outcome = await new Promise<
    { ready: ReadyMessage } | { exitCode: number | null; signal: string | null } | { timedOut: true }
  >((resolve) => {
    const timer = setTimeout(() => resolve({ timedOut: true }), START_WAIT_MS);
    child.on('message', (message: ReadyMessage | ProgressMessage) => {
      if (message?.type === 'marina:progress') progress.onProgress(message.event);
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

  progress.stop();
  if ('ready' in outcome) {
    if (child.connected) child.disconnect();
    child.unref();
    writeStartupReport(outcome.ready, config);
    process.stdout.write(
      `Marina is running in the background (pid ${child.pid}); log: ${logFile}. Stop it with serve --stop.\n`,
    );
    return 0;
  }
  if ('timedOut' in outcome) {
    child.disconnect();
    child.unref();
    process.stdout.write(
      `Marina (pid ${child.pid}) is still starting after ${START_WAIT_MS / 1000}s; it keeps running in the background. See ${logFile}.\n`,
    );
    return 0;
  }
  removePidFile({ onlyIfPid: child.pid });
  const tail = readLogTail(logFile, logStart);
  throw configError.MARINA_ERR_SERVER_START_FAILED(
    `Marina exited during start-up (${outcome.signal ? `signal ${outcome.signal}` : `exit code ${outcome.exitCode}`}). Last lines of ${logFile}:\n${tail}`,
  );
}

/**
 * `serve --stop`: SIGTERM, a bounded wait (90 s) for the server to drain, then the pid file and
 * key file go. Returns the exit code (0 also when no server was running).
 *
 * @throws MARINA_ERR_SERVER_STOP_TIMEOUT when the server is still alive after the wait.
 */
export async function stopBackgroundServer(): Promise<number> {
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

/**
 * The pid file's record, after checking that it names no live server other than this process
 * (a background child finds its launcher's record of itself). Undefined without a pid file.
 *
 * @throws MARINA_ERR_SERVER_ALREADY_RUNNING
 */
export function assertNoOtherServer(): PidFileContent | undefined {
  const recorded = readPidFile();
  if (recorded && recorded.pid !== process.pid && isServerProcessAlive(recorded.pid)) {
    throw configError.MARINA_ERR_SERVER_ALREADY_RUNNING(
      `Marina is already running (pid ${recorded.pid}, pid file ${pidFilePath()}), please use serve --stop to stop Marina.`,
    );
  }
  return recorded;
}

/** Prints the start-up report the same way in the foreground and for a background start. */
export function writeStartupReport(report: StartupReport, config: ServerConfig): void {
  const names: Record<string, string> = {
    'grpc-inference': 'gRPC Inference',
    'grpc-management': 'gRPC Management',
    'modelmesh-runtime': 'ModelMesh ModelRuntime',
  };
  for (const { api, url } of report.listening)
    process.stdout.write(`${names[api] ?? `${api[0]!.toUpperCase()}${api.slice(1)}`} API bound to ${url}\n`);
  process.stdout.write(`${tokenNote(config)}\n`);
  process.stdout.write(
    `Every request is logged in ${path.join(config.logDir, 'access_log.log')}; failed ones also in the server's output (${LOG_FILE_NAME} in the background), with their x-request-id\n`,
  );
  if (report.restoredFrom)
    process.stdout.write(
      `Restored the models of the snapshot ${report.restoredFrom} (start with --ncs to ignore snapshots)\n`,
    );
  for (const name of report.loaded) process.stdout.write(`Model loaded: ${name}\n`);
  for (const failure of report.failed) process.stderr.write(`Model failed to load: ${failure}\n`);
  for (const warning of report.warnings ?? []) process.stderr.write(`WARN ${warning}\n`);
}

/** In a background child: tells the waiting launcher the server is ready, then lets the IPC channel go. No-op without one. */
export function notifyLauncher(server: RunningServer): void {
  if (!process.send) return;
  const ready: ReadyMessage = {
    type: 'marina:ready',
    listening: server.listening,
    loaded: server.loaded,
    failed: server.failed,
    warnings: server.warnings,
    ...(server.restoredFrom ? { restoredFrom: server.restoredFrom } : {}),
  };
  process.send(ready, () => process.disconnect?.());
}

function tokenNote(config: ServerConfig): string {
  return config.disableTokenAuthorization
    ? 'Token authorization is disabled.'
    : `Token authorization is on: send 'Authorization: Bearer <key>' with the keys in ${config.keyFilePath}.`;
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
    return (
      stripAnsi(text)
        .trimEnd()
        .split('\n')
        .slice(-LOG_TAIL_LINES)
        .map((line) => `  ${line}`)
        .join('\n') || '  (the log is empty)'
    );
  } catch {
    return '  (the log could not be read)';
  }
}

/** Text without terminal colour and cursor sequences (onnxruntime colours its log lines). */
export function stripAnsi(text: string): string {
  // eslint-disable-next-line no-control-regex
  // biome-ignore lint/suspicious/noControlCharactersInRegex: it removes the terminal's escape sequences, which start with ESC.
  return text.replace(/\x1b\[[0-9;?]*[A-Za-z]/g, '');
}
