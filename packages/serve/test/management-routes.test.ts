/**
 * Management routes over real HTTP on 127.0.0.1, against the real ModelRegistry with real
 * archives and workers: 206 (a handler that loads in one worker only), the JSON-body form,
 * parameter validation, downloads and a 409 from the registry's own duplicate check.
 * More is covered end to end through startServer in ops-management.test.ts.
 */
import { createServer, type Server } from 'node:http';
import { cp, mkdtemp, readFile, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { AddressInfo } from 'node:net';
import Fastify, { type FastifyInstance } from 'fastify';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { managementRoutes, type ManagementRoutesOptions } from '../src/routes/management.ts';
import { ModelRegistry } from '../src/registry/model-registry.ts';
import type { ServerConfig } from '../src/config/server-config.ts';
import { testConfig, writeModelFolder } from './helpers.ts';
import { packModel } from './ops-harness.ts';

let sources: string;
let store: string;
let registry: ModelRegistry;
let app: FastifyInstance;
let base: string;
let archiveServer: Server;
let archiveBase: string;
let remoteArchive: Buffer;

/** Loads in the first worker only: every later worker finds the lock folder and fails to start. */
const onceHandler = `
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
export function initialize(context) { mkdirSync(join(context.modelDir, 'loaded-once')); }
export function handle(data) { return data.map(() => 'ok'); }
`;

beforeAll(async () => {
  sources = await mkdtemp(join(tmpdir(), 'marina-mgmt-src-'));
  await packModel(sources, { modelName: 'resnet' });
  await packModel(sources, { modelName: 'squeeze' });
  await packModel(sources, { modelName: 'm', modelVersion: '1.0', fileName: 'm_v1.0.mar' });
  await packModel(sources, { modelName: 'remote' });
  await writeModelFolder({
    dir: join(sources, 'partial'),
    modelName: 'partial',
    handler: 'once.mjs',
    files: { 'once.mjs': onceHandler },
  });
  remoteArchive = await readFile(join(sources, 'remote.mar'));
  await rm(join(sources, 'remote.mar'));
  archiveServer = createServer((req, res) => {
    if (req.url === '/dl/remote.mar') return void res.end(remoteArchive);
    res.writeHead(404);
    res.end();
  });
  await new Promise<void>((resolve) => archiveServer.listen(0, '127.0.0.1', resolve));
  archiveBase = `http://127.0.0.1:${(archiveServer.address() as AddressInfo).port}`;
}, 60_000);
afterAll(async () => {
  await new Promise((resolve) => archiveServer.close(resolve));
  await rm(sources, { recursive: true, force: true });
});

function configFor(overrides: Partial<ServerConfig> = {}): ServerConfig {
  return testConfig(
    { modelStore: store, cpuCount: 4, extractionCacheDir: join(store, '..', 'cache'), ...overrides },
    store,
  );
}

async function start(config: Partial<ServerConfig> = {}, extra: Partial<ManagementRoutesOptions> = {}) {
  app = Fastify();
  await app.register(managementRoutes, { registry, config: configFor(config), ...extra });
  base = await app.listen({ host: '127.0.0.1', port: 0 });
}

async function call(method: string, path: string, body?: unknown) {
  const response = await fetch(`${base}${path}`, {
    method,
    ...(body !== undefined && { body: JSON.stringify(body), headers: { 'content-type': 'application/json' } }),
  });
  const text = await response.text();
  return { status: response.status, headers: response.headers, text, json: text ? JSON.parse(text) : undefined };
}

let root: string;
beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), 'marina-mgmt-'));
  store = join(root, 'store');
  await cp(sources, store, { recursive: true });
  registry = new ModelRegistry({ config: configFor() });
});
afterEach(async () => {
  await app?.close();
  await registry.close();
  await rm(root, { recursive: true, force: true });
});

describe('register (POST /models)', { timeout: 60_000 }, () => {
  it("registers from the query string with TorchServe's message and common headers", async () => {
    await start();
    const r = await call('POST', '/models?url=resnet.mar&initial_workers=2&batch_size=4&max_batch_delay=50');
    expect(r.status).toBe(200);
    expect(r.json).toEqual({ status: 'Model "resnet" Version: 1.0 registered with 2 initial workers' });
    expect(r.text).toBe(`${JSON.stringify(r.json, null, 2)}\n`);
    expect(r.headers.get('content-type')).toContain('application/json');
    expect(r.headers.get('cache-control')).toBe('no-cache; no-store, must-revalidate, private');
    expect(r.headers.get('pragma')).toBe('no-cache');
    expect(r.headers.get('x-request-id')).toBeTruthy();
    expect(r.headers.get('connection')).not.toBe('close');
    expect(registry.describe('resnet')[0]).toMatchObject({ batchSize: 4, maxBatchDelay: 50, minWorkers: 2 });
    expect(registry.describe('resnet')[0]!.workers).toHaveLength(2);
  });

  it('takes the same parameters from a JSON body', async () => {
    await start();
    const r = await call('POST', '/models', { url: 'squeeze.mar', model_name: 'sq', initial_workers: 1 });
    expect(r.status).toBe(200);
    expect(r.json.status).toContain('Model "sq" Version: 1.0');
  });

  it('answers 202 when asynchronous, 206 when only some workers came up, and the 0-worker message', async () => {
    await start();
    expect((await call('POST', '/models?url=resnet.mar&synchronous=false&initial_workers=1')).json).toEqual({
      status: 'Processing worker updates...',
    });
    const partial = await call('POST', '/models?url=partial&initial_workers=2');
    expect(partial.json).toEqual({ status: 'Workers scaling in progress...' });
    expect(partial.status).toBe(206);
    const zero = await call('POST', '/models?url=m_v1.0.mar&initial_workers=0');
    expect(zero.json.status).toBe(
      'Model "m" Version: 1.0 registered with 0 initial workers. Use scale workers API to add workers for the model.',
    );
  });

  it('answers 400 "Parameter url is required." and 400 for a mistyped parameter', async () => {
    await start();
    expect((await call('POST', '/models')).json).toMatchObject({
      code: 400,
      type: 'BadRequestException',
      message: 'Parameter url is required.',
    });
  });

  it('with strict_parameters=true, answers 400 naming a mistyped or out-of-range parameter', async () => {
    await start({ strictParameters: true });
    for (const query of ['batch_size=many', 'max_batch_delay=1.5', 'initial_workers=-1', 'startup_timeout=0']) {
      const bad = await call('POST', `/models?url=resnet.mar&${query}`);
      expect(bad.status, query).toBe(400);
      expect(bad.json.message, query).toContain(query.split('=')[0]);
    }
    const badScale = await call('PUT', '/models/resnet?min_worker=one');
    expect(badScale.status).toBe(400);
  });

  // TorchServe's ManagementRequestHandler reads them with NettyUtils.getIntParameter: a value that
  // is not an integer is the default; a negative initial_workers starts no worker.
  it('by default reads numbers as TorchServe does: a non-integer is the default, a negative initial_workers is none', async () => {
    await start();
    const registered = await call(
      'POST',
      '/models?url=resnet.mar&batch_size=many&max_batch_delay=1.5&initial_workers=-1&startup_timeout=0&response_timeout=x',
    );
    expect(registered.status).toBe(200);
    expect(registered.json.status).toBe(
      'Model "resnet" Version: 1.0 registered with 0 initial workers. Use scale workers API to add workers for the model.',
    );
    const [described] = (await call('GET', '/models/resnet')).json;
    expect(described).toMatchObject({ batchSize: 1, maxBatchDelay: 100, minWorkers: 0 });
    expect(described.startupTimeout).toBeGreaterThan(0);
    // Scale: a min_worker that is not an integer is TorchServe's default (1), asynchronously (202).
    const scaled = await call('PUT', '/models/resnet?min_worker=one&synchronous=true');
    expect(scaled.status).toBe(200);
    expect((await call('GET', '/models/resnet')).json[0].minWorkers).toBe(1);
    expect((await call('DELETE', '/models/resnet')).status).toBe(200);
  });

  it('downloads an allowed http archive into the store and deletes it when register fails', async () => {
    await start({ allowedUrls: ['http://127\\.0\\.0\\.1:\\d+/dl/.*'] });
    const url = encodeURIComponent(`${archiveBase}/dl/remote.mar`);
    expect((await call('POST', `/models?url=${url}`)).status).toBe(200);
    expect(await readdir(store)).toContain('remote.mar');
    await app.close();
    await rm(join(store, 'remote.mar'));
    // Same name and version registered again: the real registry refuses, the fresh download goes.
    await start({ allowedUrls: ['http://127\\.0\\.0\\.1:\\d+/dl/.*'] });
    const conflict = await call('POST', `/models?url=${url}`);
    expect(conflict.status).toBe(409);
    expect(conflict.json).toMatchObject({ code: 409, marinaCode: 'MARINA_ERR_MODEL_VERSION_CONFLICT' });
    expect(conflict.json.message).toContain('Model version 1.0 is already registered for model remote');
    expect(await readdir(store)).not.toContain('remote.mar');
  });
});
