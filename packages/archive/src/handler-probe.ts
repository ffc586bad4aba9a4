import { Worker } from 'node:worker_threads';

/** What importing a custom handler module in a worker found. */
export type HandlerProbeResult =
  | { status: 'ok'; shape: string }
  | { status: 'contract'; message: string }
  | { status: 'import-failed'; message: string };

export interface ProbeHandlerOptions {
  /** Absolute path of the .mjs/.js/.cjs module. */
  modulePath: string;
  /** The `:fn` suffix of the manifest's handler, when any. */
  functionName?: string;
  /** How long the import may take before the worker is terminated. Default 10000. */
  timeoutMs?: number;
}

const WORKER_URL = new URL('./handler-probe-worker.mjs', import.meta.url);

/**
 * Imports a custom handler module in a `worker_thread` (it is user code: a throw, a hang
 * or a crash stays there) and checks that it exports the handler contract. The module's
 * console output is discarded. Never throws: failures come back as results.
 */
export async function probeHandler(options: ProbeHandlerOptions): Promise<HandlerProbeResult> {
  const timeoutMs = options.timeoutMs ?? 10_000;
  const worker = new Worker(WORKER_URL, {
    workerData: { modulePath: options.modulePath, functionName: options.functionName },
    stdout: true,
    stderr: true,
    resourceLimits: { maxOldGenerationSizeMb: 512 },
  });
  worker.stdout.resume();
  worker.stderr.resume();
  return new Promise<HandlerProbeResult>((resolvePromise) => {
    let isSettled = false;
    const settle = (result: HandlerProbeResult): void => {
      if (isSettled) return;
      isSettled = true;
      clearTimeout(timer);
      // The module may hold timers or sockets open; the answer is in, so stop it.
      void worker.terminate();
      resolvePromise(result);
    };
    const timer = setTimeout(
      () => settle({ status: 'import-failed', message: `importing it did not finish within ${timeoutMs} ms` }),
      timeoutMs,
    );
    worker.once('message', (message: HandlerProbeResult) => settle(message));
    worker.once('error', (error) => settle({ status: 'import-failed', message: `${error.name}: ${error.message}` }));
    worker.once('exit', (code) =>
      settle({
        status: 'import-failed',
        message: `the module ended its thread (exit code ${code}) while being imported`,
      }),
    );
  });
}
