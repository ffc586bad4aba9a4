import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { benchErrors } from './errors.ts';

export interface JsonChildOptions {
  /** Node script to run (a plain .mjs, so no tsx start-up is measured). */
  scriptPath: string;
  args: readonly string[];
  env?: NodeJS.ProcessEnv;
  /** Called for every JSON line the child prints on stdout. */
  onMessage?: (message: Record<string, unknown>) => void;
  /** Called once the child is spawned, with its pid (to sample it). */
  onSpawn?: (child: ChildProcess) => void;
}

export interface JsonChildResult {
  messages: Record<string, unknown>[];
  /** Spawn to exit, ms. */
  wallMs: number;
}

/**
 * Runs a Node script as a child process and collects the JSON lines it prints.
 *
 * @throws MARINA_ERR_BENCH_CHILD_FAILED when the child exits non-zero or is killed.
 */
export function runJsonChild(options: JsonChildOptions): Promise<JsonChildResult> {
  return new Promise((resolve, reject) => {
    const startMs = performance.now();
    const child = spawn(process.execPath, [options.scriptPath, ...options.args], {
      env: options.env ?? process.env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    options.onSpawn?.(child);
    const messages: Record<string, unknown>[] = [];
    let stderr = '';
    child.stderr!.on('data', (chunk: Buffer) => {
      stderr = (stderr + chunk.toString()).slice(-4000);
    });
    createInterface({ input: child.stdout! }).on('line', (line) => {
      if (!line.startsWith('{')) return;
      try {
        const message = JSON.parse(line) as Record<string, unknown>;
        messages.push(message);
        options.onMessage?.(message);
      } catch {
        // a partial or foreign line; the child's result lines are whole JSON objects
      }
    });
    child.on('error', reject);
    child.on('close', (code, signal) => {
      if (code === 0) resolve({ messages, wallMs: performance.now() - startMs });
      else
        reject(
          benchErrors.create.MARINA_ERR_BENCH_CHILD_FAILED(
            `${options.scriptPath} ${options.args.join(' ').slice(0, 200)} exited with ${signal ?? `code ${code}`}; stderr: ${stderr.trim().slice(-1500) || '(empty)'}`,
          ),
        );
    });
  });
}

/**
 * Starts a Node script that serves on a port of its own and prints `{"port": N}` once listening
 * (a bare baseline server, the tracing experiment's collector); resolves with the child and its port.
 *
 * @throws MARINA_ERR_BENCH_CHILD_FAILED when the child exits before it listens.
 */
export async function startListeningChild(
  scriptPath: string,
  args: readonly string[] = [],
): Promise<{ child: ChildProcess; port: number }> {
  const child = spawn(process.execPath, [scriptPath, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr!.on('data', (chunk: Buffer) => {
    stderr = (stderr + chunk.toString()).slice(-2000);
  });
  const port = await new Promise<number>((resolve, reject) => {
    createInterface({ input: child.stdout! }).once('line', (line) =>
      resolve((JSON.parse(line) as { port: number }).port),
    );
    child.once('exit', (code) =>
      reject(
        benchErrors.create.MARINA_ERR_BENCH_CHILD_FAILED(
          `${scriptPath} exited with code ${code} before listening; stderr: ${stderr || '(empty)'}`,
        ),
      ),
    );
  });
  return { child, port };
}
