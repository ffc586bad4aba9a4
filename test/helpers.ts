import { spawn, type SpawnOptions } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { createServer } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

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

/** Runs a CLI to completion and collects its output (never rejects on a non-zero exit). */
export function runCli(bin: string, args: string[], options: SpawnOptions = {}): Promise<RunResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [bin, ...args], { ...options, stdio: ['ignore', 'pipe', 'pipe'] });
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
