import { spawn, type SpawnOptions } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect } from 'vitest';

export const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
export const bins = {
  modelArchiver: path.join(repoRoot, 'packages/model-archiver/bin/model-archiver.js'),
  serve: path.join(repoRoot, 'packages/serve/bin/serve.js'),
  marinaModels: path.join(repoRoot, 'packages/model-zoo/bin/marina-models.js'),
};

export function makeTempDir(prefix: string): string {
  return mkdtempSync(path.join(os.tmpdir(), `marina-e2e-${prefix}-`));
}

export interface RunResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs a CLI (a Node script) to completion and collects its output (never rejects on a non-zero exit). */
export function runCli(bin: string, args: string[], options: SpawnOptions = {}): Promise<RunResult> {
  return runCommand(process.execPath, [bin, ...args], options);
}

/** Runs any command to completion and collects its output (never rejects on a non-zero exit). */
export function runCommand(command: string, args: string[], options: SpawnOptions = {}): Promise<RunResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { ...options, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout!.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

/** A free TCP port on 127.0.0.1 (closed again before returning). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

/** A `serve --start` in the background, on free loopback ports, as a user starts it. */
export interface BackgroundServe {
  inferencePort: number;
  managementPort: number;
  /** The `serve --start` run (exit code and output). */
  started: RunResult;
  /** `serve --stop` for this server (same folder, same TMPDIR). */
  stop(): Promise<RunResult>;
}

/**
 * Writes `config.properties` in `workDir` (free ports for the three REST APIs, gRPC off,
 * `model_store`, `load_models=all`, then `extraProperties`) and runs `serve --start` there with
 * token authorization off and `workDir` as TMPDIR (so the pid file is this test's).
 */
export async function startServeInBackground(
  workDir: string,
  extraProperties: string[] = [],
): Promise<BackgroundServe> {
  const [inferencePort, managementPort, metricsPort] = [await freePort(), await freePort(), await freePort()];
  writeFileSync(
    path.join(workDir, 'config.properties'),
    [
      `inference_address=http://127.0.0.1:${inferencePort}`,
      `management_address=http://127.0.0.1:${managementPort}`,
      `metrics_address=http://127.0.0.1:${metricsPort}`,
      'grpc_inference_port=0',
      'grpc_management_port=0',
      'model_store=model_store',
      'load_models=all',
      ...extraProperties,
    ].join('\n'),
  );
  const env = { ...process.env, TMPDIR: workDir };
  const started = await runCli(bins.serve, ['--start', '--disable-token-auth', '--ts-config', 'config.properties'], {
    cwd: workDir,
    env,
  });
  return { inferencePort, managementPort, started, stop: () => runCli(bins.serve, ['--stop'], { cwd: workDir, env }) };
}

/**
 * The end of a suite that started a server with startServeInBackground: `serve --stop` must exit 0,
 * and the work folder is removed whatever happens.
 */
export async function stopServeAndRemove(
  server: BackgroundServe | undefined,
  workDir: string | undefined,
): Promise<void> {
  try {
    if (server) {
      const stopped = await server.stop();
      expect(stopped.code, stopped.stderr + stopped.stdout).toBe(0);
    }
  } finally {
    if (workDir) rmSync(workDir, { recursive: true, force: true });
  }
}
