/**
 * Shared setup of the end-to-end operator tests (ops-*.test.ts): real .mar archives from
 * @marina/model-zoo + @marina/archive, a real server from startServer on 127.0.0.1:0, and a
 * small fetch wrapper returning status, headers and parsed JSON.
 */
import { execFileSync } from 'node:child_process';
import { mkdir, mkdtemp, rename, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { packArchive } from '@marina/archive';
import { writeSlowModel, writeTinyTensorModel } from '@marina/model-zoo';
import type { ServerConfig } from '../src/config/server-config.ts';
import { startServer, type RunningServer } from '../src/start-server.ts';
import { loopbackConfig } from './helpers.ts';

/** A port free on 127.0.0.1 now (the kernel picks it). */
export async function freePort(): Promise<number> {
  const probe = createServer();
  await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve));
  const { port } = probe.address() as { port: number };
  await new Promise<void>((resolve) => probe.close(() => resolve()));
  return port;
}

/** Certificates are made with the openssl CLI; without it (decided at collection) TLS tests are skipped. */
export const hasOpenssl = (() => {
  try {
    execFileSync('openssl', ['version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
})();

/** A self-signed certificate for 127.0.0.1: `key.pem` and `cert.pem` in `dir` (needs `hasOpenssl`). */
export function writeSelfSignedCertificate(dir: string): void {
  execFileSync(
    'openssl',
    [
      'req',
      '-x509',
      '-newkey',
      'rsa:2048',
      '-nodes',
      '-days',
      '1',
      '-subj',
      '/CN=127.0.0.1',
      '-addext',
      'subjectAltName=IP:127.0.0.1',
      '-keyout',
      join(dir, 'key.pem'),
      '-out',
      join(dir, 'cert.pem'),
    ],
    { stdio: 'ignore' },
  );
}

export interface Workspace {
  root: string;
  store: string;
  cleanup(): Promise<void>;
}

export async function createWorkspace(prefix = 'marina-ops-'): Promise<Workspace> {
  const root = await mkdtemp(join(tmpdir(), prefix));
  const store = join(root, 'store');
  await mkdir(store);
  return { root, store, cleanup: () => rm(root, { recursive: true, force: true }) };
}

/**
 * Packs a model into `<store>/<fileName>` (default `<modelName>.mar`) with the built-in tensor
 * handler: the affine model (output = input·2 + 1, input [N,4]) or, with `slowLayers`, a
 * slow model whose run takes roughly slowLayers × 0.04 ms at width 512.
 */
export async function packModel(
  store: string,
  options: {
    modelName: string;
    modelVersion?: string;
    fileName?: string;
    modelConfigYaml?: string;
    slowLayers?: number;
  },
): Promise<string> {
  const work = await mkdtemp(join(tmpdir(), 'marina-ops-pack-'));
  try {
    const onnx = join(work, 'model.onnx');
    if (options.slowLayers !== undefined)
      await writeSlowModel({ outputPath: onnx, layers: options.slowLayers, width: 512 });
    else await writeTinyTensorModel({ outputPath: onnx });
    let configFile: string | undefined;
    if (options.modelConfigYaml !== undefined) {
      configFile = join(work, 'model-config.yaml');
      await writeFile(configFile, options.modelConfigYaml);
    }
    const out = join(work, 'out');
    const result = await packArchive({
      modelName: options.modelName,
      modelVersion: options.modelVersion ?? '1.0',
      handler: 'tensor',
      serializedFile: onnx,
      ...(configFile ? { configFile } : {}),
      exportPath: out,
    });
    const target = join(store, options.fileName ?? `${options.modelName}.mar`);
    await rename(result.outputPath, target);
    return target;
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}

/** A configuration as config.properties would give it, with both APIs on one 127.0.0.1:0 listener. */
export function opsConfig(
  workspace: Workspace,
  properties: Record<string, string> = {},
  overrides: Partial<ServerConfig> = {},
): ServerConfig {
  const config = loopbackConfig(workspace.root, {
    model_store: workspace.store,
    enable_model_api: 'true',
    ...properties,
  });
  return { ...config, extractionCacheDir: join(workspace.root, 'cache'), ...overrides };
}

export interface OpsServer {
  server: RunningServer;
  /** The server's own log messages (what ts_log.log gets), in order. */
  messages: string[];
  /** Base URL of the inference (and management, same listener) API. */
  api: string;
  metrics: string;
  close(): Promise<void>;
}

export async function startOps(config: ServerConfig): Promise<OpsServer> {
  const messages: string[] = [];
  const server = await startServer(config, { log: (_level, message) => messages.push(message) });
  const url = (api: string) => server.listening.find((l) => l.api === api)?.url ?? '';
  return { server, messages, api: url('inference'), metrics: url('metrics'), close: () => server.close() };
}

export interface CallResult {
  status: number;
  headers: Headers;
  text: string;
  json: any;
}

/** One HTTP request; `token` goes in `Authorization: Bearer`, `body` is sent as JSON. */
export async function call(
  base: string,
  method: string,
  path: string,
  options: { token?: string; body?: unknown } = {},
): Promise<CallResult> {
  const headers: Record<string, string> = {};
  if (options.token !== undefined) headers.authorization = `Bearer ${options.token}`;
  if (options.body !== undefined) headers['content-type'] = 'application/json';
  const response = await fetch(`${base}${path}`, {
    method,
    headers,
    ...(options.body !== undefined ? { body: JSON.stringify(options.body) } : {}),
  });
  const text = await response.text();
  let json: unknown;
  try {
    json = text ? JSON.parse(text) : undefined;
  } catch {
    json = undefined;
  }
  return { status: response.status, headers: response.headers, text, json };
}

/** The affine model's input for one row. */
export const affineInput = (row: number[]) => ({ inputs: { input: { shape: [1, 4], data: row } } });

/** Polls `check` every `intervalMs` until it returns true; fails with `what` after `timeoutMs`. */
export async function waitFor(
  what: string,
  check: () => Promise<boolean> | boolean,
  timeoutMs = 20_000,
  intervalMs = 50,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
}
