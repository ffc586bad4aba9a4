import { spawn, type ChildProcess } from 'node:child_process';
import { createWriteStream } from 'node:fs';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { tmpdir } from 'node:os';
import { benchErrors } from './errors.ts';
import { findFreePort } from './free-port.ts';

/** Per model version settings written into config.properties' `models` JSON (TorchServe's keys). */
export interface ServerModelSettings {
  minWorkers?: number;
  maxWorkers?: number;
  batchSize?: number;
  /** TorchServe's maxBatchDelay, ms. */
  maxBatchDelay?: number;
  /** Marina's per-worker intra-op threads. */
  intraOpNumThreads?: number;
  /** Marina's priority levels (1 the highest) and the level of a request that names none. */
  priorityLevels?: number;
  defaultPriorityLevel?: number;
}

export interface StartServerOptions {
  /** The serve CLI's bin (packages/serve/bin/serve.js). */
  serveBin: string;
  /** Folder holding the archive(s). */
  modelStoreDir: string;
  /** Archive file name inside the store, e.g. resnet-18.mar. */
  archiveFileName: string;
  modelName: string;
  modelVersion: string;
  /** Leave undefined for the server's defaults. */
  settings?: ServerModelSettings;
  /** job_queue_size; undefined keeps the default (100). */
  jobQueueSize?: number;
  /** Extra environment for the server (e.g. MALLOC_MMAP_THRESHOLD_). */
  env?: Record<string, string>;
  /** Fresh folder for config.properties, the server's logs and key file. */
  workDir: string;
  /** grpc_inference_port; undefined = any free port (0). */
  grpcInferencePort?: number;
  /**
   * The server's TMPDIR: its pid file and its extraction and optimised-model caches. Default
   * `$TMPDIR/marina-bench`. runBench passes one under its `serverTmpRoot` (experiment-context.ts's
   * serverTmpDir); a caller whose servers may run beside the bench's (tune) passes its own.
   */
  tmpDir?: string;
  /** More config.properties keys (e.g. model_memory_budget), written as given. */
  properties?: Record<string, string>;
  /** How long to wait for /ping, ms. Default 180000 (ResNet-152 with several workers loads slowly on 2 cores). */
  startTimeoutMs?: number;
  /** load_models as written in config.properties; default `<modelName>=<archiveFileName>`. */
  loadModels?: string;
  /** The whole `models` JSON (several versions, a `$traffic` policy); replaces the one built from `settings`. */
  modelsJson?: Record<string, unknown>;
}

export interface RunningServer {
  pid: number;
  origin: string;
  /** host:port of the gRPC inference API. */
  grpcTarget: string;
  /** Base URL of the management API. */
  managementOrigin: string;
  /** Base URL of the metrics API (answers only when the properties set enable_metrics_api=true). */
  metricsOrigin: string;
  /** Path of the server's combined stdout/stderr. */
  logPath: string;
  /** SIGTERM to the server's process group, SIGKILL after 10 s. */
  stop(): Promise<void>;
}

/** Writes config.properties for one model the way a user would (TorchServe keys, section 2 of the reference). */
export async function writeServerConfig(
  options: StartServerOptions & { ports: [number, number, number] },
): Promise<string> {
  const [inferencePort, managementPort, metricsPort] = options.ports;
  const lines = [
    `inference_address=http://127.0.0.1:${inferencePort}`,
    `management_address=http://127.0.0.1:${managementPort}`,
    `metrics_address=http://127.0.0.1:${metricsPort}`,
    `grpc_inference_port=${options.grpcInferencePort ?? 0}`,
    'grpc_management_port=0',
    'enable_metrics_api=false',
    `model_store=${options.modelStoreDir}`,
    `load_models=${options.loadModels ?? `${options.modelName}=${options.archiveFileName}`}`,
    'disable_token_authorization=true',
  ];
  if (options.jobQueueSize !== undefined) lines.push(`job_queue_size=${options.jobQueueSize}`);
  // A property given here replaces the default above in place (the server warns on a key set twice).
  for (const [key, value] of Object.entries(options.properties ?? {})) {
    const at = lines.findIndex((line) => line.startsWith(`${key}=`));
    if (at >= 0) lines[at] = `${key}=${value}`;
    else lines.push(`${key}=${value}`);
  }
  if (options.modelsJson !== undefined) lines.push(`models=${JSON.stringify(options.modelsJson)}`);
  else if (options.settings !== undefined && Object.keys(options.settings).length > 0) {
    lines.push(`models=${JSON.stringify({ [options.modelName]: { [options.modelVersion]: options.settings } })}`);
  }
  const path = join(options.workDir, 'config.properties');
  await writeFile(path, `${lines.join('\n')}\n`);
  return path;
}

async function waitForExit(child: ChildProcess, timeoutMs: number): Promise<boolean> {
  if (child.exitCode !== null || child.signalCode !== null) return true;
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve(false), timeoutMs);
    child.once('exit', () => {
      clearTimeout(timer);
      resolve(true);
    });
  });
}

/**
 * Starts `serve --start --foreground --ts-config <generated> --disable-token-auth` as a child
 * process (its own process group, so its whole tree can be stopped) and waits until GET /ping
 * answers 200. Only the CLI/HTTP contract is used, never serve's internals.
 *
 * @throws MARINA_ERR_BENCH_SERVER_START_FAILED when the server exits or does not answer in time.
 */
export async function startServer(options: StartServerOptions): Promise<RunningServer> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await startServerOnce(options);
    } catch (error) {
      // The ports were free when chosen, but another process may bind one before the server does
      // (tests and servers on the same machine take ephemeral ports too): choose again.
      if (attempt >= PORT_ATTEMPTS || !String((error as Error).message).includes('MARINA_ERR_ADDRESS_IN_USE'))
        throw error;
    }
  }
}

/** How many times startServer chooses free ports before it gives up on a server that found one taken. */
const PORT_ATTEMPTS = 3;

async function startServerOnce(options: StartServerOptions): Promise<RunningServer> {
  await mkdir(options.workDir, { recursive: true });
  const benchTmpDir = options.tmpDir ?? join(tmpdir(), 'marina-bench');
  await mkdir(benchTmpDir, { recursive: true });
  const ports: [number, number, number] = [await findFreePort(), await findFreePort(), await findFreePort()];
  const grpcInferencePort = options.grpcInferencePort ?? (await findFreePort());
  const configPath = await writeServerConfig({ ...options, ports, grpcInferencePort });
  const logPath = join(options.workDir, 'server.log');
  const log = createWriteStream(logPath);
  const child = spawn(
    process.execPath,
    [options.serveBin, '--start', '--foreground', '--ts-config', configPath, '--disable-token-auth', '--ncs'],
    {
      cwd: options.workDir,
      // Its own TMPDIR: the server's pid file lives there, so a bench never clashes with (or stops)
      // a server the user runs; the extraction and optimised-model caches there are reused across runs.
      env: { ...process.env, TMPDIR: benchTmpDir, ...options.env },
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
    },
  );
  child.stdout!.pipe(log, { end: false });
  child.stderr!.pipe(log, { end: false });
  const origin = `http://127.0.0.1:${ports[0]}`;
  // A 200 from GET /ping proves only that something listens on the port: when another process took
  // it first, this server fails to bind (and exits), yet the other one answers. The server's own
  // start-up report ("Inference API bound to <origin>") proves it is this one.
  const boundLine = `Inference API bound to ${origin}\n`;
  let stdoutTail = '';
  let isBound = false;
  child.stdout!.on('data', (chunk: Buffer) => {
    if (isBound) return;
    // The line may span two chunks: look at the end of the last one and the whole new one.
    const text = stdoutTail + chunk.toString('utf8');
    isBound = text.includes(boundLine);
    stdoutTail = text.slice(-boundLine.length);
  });

  const stop = async (): Promise<void> => {
    if (child.exitCode === null && child.signalCode === null) {
      try {
        process.kill(-child.pid!, 'SIGTERM');
      } catch {
        /* already gone */
      }
      if (!(await waitForExit(child, 10_000))) {
        try {
          process.kill(-child.pid!, 'SIGKILL');
        } catch {
          /* already gone */
        }
        await waitForExit(child, 5_000);
      }
    }
    log.end();
  };

  const deadlineMs = performance.now() + (options.startTimeoutMs ?? 180_000);
  while (performance.now() < deadlineMs) {
    if (child.exitCode !== null || child.signalCode !== null) break;
    try {
      const response = await fetch(`${origin}/ping`, { signal: AbortSignal.timeout(2_000) });
      await response.arrayBuffer();
      if (response.status === 200 && isBound)
        return {
          pid: child.pid!,
          origin,
          managementOrigin: `http://127.0.0.1:${ports[1]}`,
          metricsOrigin: `http://127.0.0.1:${ports[2]}`,
          grpcTarget: `127.0.0.1:${grpcInferencePort}`,
          logPath,
          stop,
        };
    } catch {
      // not listening yet
    }
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  const exited = child.exitCode !== null || child.signalCode !== null;
  await stop();
  const tail = (await readFile(logPath, 'utf8').catch(() => '')).slice(-2000);
  throw benchErrors.create.MARINA_ERR_BENCH_SERVER_START_FAILED(
    `${exited ? `the server exited (${child.exitCode ?? child.signalCode})` : `GET ${origin}/ping did not answer 200 within ${options.startTimeoutMs ?? 180_000} ms`} while loading ${options.archiveFileName} from ${options.modelStoreDir}; log ${logPath}: ${tail.trim() || '(empty)'}`,
  );
}
