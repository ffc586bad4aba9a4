/**
 * Shared setup of the scheduling failure tests: a real app on 127.0.0.1:0 (real HTTP, real
 * worker threads), JSON posts, and waits on a model version's own 'progress' events (never on
 * the clock).
 */
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { buildApp, type AppPlugin, type MarinaApp } from '../src/index.ts';
import type { ServerConfig } from '../src/config/server-config.ts';
import type { ModelVersion } from '../src/scheduling/model-version.ts';
import { tempDir, testConfig } from './helpers.ts';

interface Reply {
  status: number;
  headers: Headers;
  json: any;
}

export interface GateApp {
  app: MarinaApp;
  dir: string;
  base: string;
  post(model: string, body: Record<string, unknown>): Promise<Reply>;
  call(method: string, path: string): Promise<Reply>;
  /** A fresh gate file path (closed until `open`). */
  gate(): { path: string; open(): Promise<void> };
  close(): Promise<void>;
}

export async function startGateApp(overrides: Partial<ServerConfig> = {}, plugins: AppPlugin[] = []): Promise<GateApp> {
  const dir = await tempDir('marina-sched-');
  const app = await buildApp(testConfig(overrides, dir.path), { plugins });
  const base = await app.inference.listen({ host: '127.0.0.1', port: 0 });
  let gates = 0;
  const gatePaths: string[] = [];
  const call = async (method: string, path: string, body?: unknown): Promise<Reply> => {
    const response = await fetch(`${base}${path}`, {
      method,
      ...(body !== undefined ? { body: JSON.stringify(body), headers: { 'content-type': 'application/json' } } : {}),
    });
    const text = await response.text();
    return { status: response.status, headers: response.headers, json: text ? JSON.parse(text) : undefined };
  };
  return {
    app,
    dir: dir.path,
    base,
    post: (model, body) => call('POST', `/predictions/${model}`, body),
    call: (method, path) => call(method, path),
    gate() {
      const path = join(dir.path, `gate-${gates++}`);
      gatePaths.push(path);
      return { path, open: () => writeFile(path, '') };
    },
    async close() {
      // Open every gate first, so no thread stays blocked after the test.
      await Promise.all(gatePaths.map((p) => writeFile(p, '')));
      await app.close();
      await dir.cleanup();
    },
  };
}

/** Resolves once `check()` holds, re-checked at each of the version's 'progress' events. */
export function until(version: ModelVersion, check: () => boolean): Promise<void> {
  return new Promise((resolve) => {
    const listener = () => {
      if (!check()) return;
      version.off('progress', listener);
      resolve();
    };
    version.on('progress', listener);
    listener();
  });
}
