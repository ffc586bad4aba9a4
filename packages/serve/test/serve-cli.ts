import { spawn } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/** The `serve` CLI as users run it. */
const SERVE_BIN = fileURLToPath(new URL('../bin/serve.js', import.meta.url));

export interface ServeResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

/**
 * Runs `bin/serve.js` to completion in `cwd`, with its own TMPDIR (`cwd/tmp`) so the pid file is
 * this test's. Resolves when its output has closed (a background `--start` server writes to its log
 * file, never to these pipes).
 */
export function runServe(cwd: string, args: string[], env: NodeJS.ProcessEnv = {}): Promise<ServeResult> {
  return new Promise((resolve, reject) => {
    const childEnv: NodeJS.ProcessEnv = { ...process.env, TMPDIR: path.join(cwd, 'tmp'), ...env };
    delete childEnv.MALLOC_MMAP_THRESHOLD_; // the launcher sets it unless the user did
    const child = spawn(process.execPath, [SERVE_BIN, ...args], {
      cwd,
      env: childEnv,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

/**
 * serve's arguments for a server configured by `config.properties` in its working folder, with no
 * config snapshot and no token authorization: `mode` is `--foreground` or `--start`; `extra` follow.
 */
export function serveArgs(mode: '--foreground' | '--start', ...extra: string[]): string[] {
  return [mode, '--ncs', '--disable-token-auth', '--ts-config', 'config.properties', ...extra];
}
