/**
 * Management routes over real HTTP on 127.0.0.1, against the IN-MEMORY STAND-IN registry
 * (management-stand-in-registry.ts). Phase 2 adds end-to-end tests against the real registry.
 */
import { createServer, type Server } from 'node:http';
import { mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { AddressInfo } from 'node:net';
import Fastify, { type FastifyInstance } from 'fastify';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { managementRoutes, type ManagementRoutesOptions } from '../src/routes/management.ts';
import { StandInRegistry, testConfig } from './management-stand-in-registry.ts';

let store: string;
let registry: StandInRegistry;
let app: FastifyInstance;
let base: string;
let archiveServer: Server;
let archiveBase: string;

beforeAll(async () => {
  archiveServer = createServer((req, res) => {
    if (req.url === '/dl/remote.mar') return void res.end(Buffer.concat([Buffer.from('PK\x03\x04'), Buffer.alloc(32)]));
    res.writeHead(404);
    res.end();
  });
  await new Promise<void>((resolve) => archiveServer.listen(0, '127.0.0.1', resolve));
  archiveBase = `http://127.0.0.1:${(archiveServer.address() as AddressInfo).port}`;
});
afterAll(() => new Promise((resolve) => archiveServer.close(resolve)));

async function start(config: Parameters<typeof testConfig>[0] = {}, extra: Partial<ManagementRoutesOptions> = {}) {
  app = Fastify();
  await app.register(managementRoutes, { registry, config: testConfig({ modelStore: store, ...config }), ...extra });
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

beforeEach(async () => {
  store = await mkdtemp(join(tmpdir(), 'marina-mgmt-'));
  for (const name of ['resnet.mar', 'squeeze.mar', 'm_v1.0.mar', 'm_v2.0.mar']) await writeFile(join(store, name), 'PK\x03\x04');
  registry = new StandInRegistry();
});
afterEach(async () => {
  await app?.close();
  await rm(store, { recursive: true, force: true });
});

describe('register (POST /models)', () => {
  it('registers from the query string with TorchServe\'s message and common headers', async () => {
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
    expect(registry.entry('resnet')).toMatchObject({ workers: 2, batchSize: 4, maxBatchDelay: 50 });
  });

  it('takes the same parameters from a JSON body', async () => {
    await start();
    const r = await call('POST', '/models', { url: 'squeeze.mar', model_name: 'sq', initial_workers: 1 });
    expect(r.status).toBe(200);
    expect(r.json.status).toContain('Model "sq" Version: 1.0');
  });

  it('answers 202 when asynchronous, 206 when only some workers came up, and the 0-worker message', async () => {
    await start();
    expect((await call('POST', '/models?url=resnet.mar&synchronous=false&initial_workers=1')).json)
      .toEqual({ status: 'Processing worker updates...' });
    registry.readyLimit = 1;
    const partial = await call('POST', '/models?url=squeeze.mar&initial_workers=3');
    expect(partial.status).toBe(206);
    const zero = await call('POST', '/models?url=m_v1.0.mar&initial_workers=0');
    expect(zero.json.status).toBe('Model "m" Version: 1.0 registered with 0 initial workers. Use scale workers API to add workers for the model.');
  });

  it('answers 405 MethodNotAllowedException while the model API is off', async () => {
    await start({ enableModelApi: false });
    const r = await call('POST', '/models?url=resnet.mar');
    expect(r.status).toBe(405);
    expect(r.json).toMatchObject({ code: 405, type: 'MethodNotAllowedException', marinaCode: 'MARINA_ERR_MODEL_API_DISABLED' });
    expect(r.json.message).toContain('--enable-model-api');
    expect(r.headers.get('connection')).toBe('close');
    expect((await call('DELETE', '/models/resnet')).status).toBe(405);
  });

  it('answers 400 "Parameter url is required." and 400 for a mistyped parameter', async () => {
    await start();
    expect((await call('POST', '/models')).json).toMatchObject({ code: 400, type: 'BadRequestException', message: 'Parameter url is required.' });
    const bad = await call('POST', '/models?url=resnet.mar&batch_size=many');
    expect(bad.status).toBe(400);
    expect(bad.json.message).toContain('batch_size');
  });

  it('answers 409 for a version already registered', async () => {
    await start();
    await call('POST', '/models?url=resnet.mar');
    const r = await call('POST', '/models?url=resnet.mar');
    expect(r.status).toBe(409);
    expect(r.json).toMatchObject({ type: 'ConflictStatusException', message: 'Model version 1.0 is already registered for model resnet' });
  });

  it('answers 404 for URLs refused by allowed_urls or containing ..', async () => {
    await start({ allowedUrls: ['https://models\\.example\\.com/.*'] });
    const r = await call('POST', `/models?url=${encodeURIComponent(`${archiveBase}/dl/remote.mar`)}`);
    expect(r.status).toBe(404);
    expect(r.json.message).toBe(`Given URL ${archiveBase}/dl/remote.mar does not match any allowed URL(s)`);
    expect((await call('POST', '/models?url=..%2Fetc%2Fpasswd')).json.message).toBe('Relative path is not allowed in url: ../etc/passwd');
  });

  it('downloads an allowed http archive into the store and deletes it when register fails', async () => {
    await start({ allowedUrls: ['http://127\\.0\\.0\\.1:\\d+/dl/.*'] });
    const url = encodeURIComponent(`${archiveBase}/dl/remote.mar`);
    expect((await call('POST', `/models?url=${url}`)).status).toBe(200);
    expect(await readdir(store)).toContain('remote.mar');
    await app.close();
    await rm(join(store, 'remote.mar'));
    // Same name and version registered again: the registry refuses, the fresh download goes.
    await start({ allowedUrls: ['http://127\\.0\\.0\\.1:\\d+/dl/.*'] });
    expect((await call('POST', `/models?url=${url}`)).status).toBe(409);
    expect(await readdir(store)).not.toContain('remote.mar');
  });
});

describe('scale (PUT /models/{name}[/{version}])', () => {
  beforeEach(async () => {
    await start();
    await call('POST', '/models?url=resnet.mar&initial_workers=1');
  });

  it('answers 202 asynchronously by default and 200 with TorchServe\'s message when synchronous', async () => {
    expect((await call('PUT', '/models/resnet?min_worker=2')).json).toEqual({ status: 'Processing worker updates...' });
    const r = await call('PUT', '/models/resnet/1.0?min_worker=3&max_worker=4&synchronous=true');
    expect(r.status).toBe(200);
    expect(r.json).toEqual({ status: 'Workers scaled to 3 for model: resnet, version: 1.0' });
    expect(registry.entry('resnet')).toMatchObject({ minWorkers: 3, maxWorkers: 4 });
  });

  it('refuses max_worker below min_worker with TorchServe\'s message', async () => {
    const r = await call('PUT', '/models/resnet?min_worker=3&max_worker=2');
    expect(r.status).toBe(400);
    expect(r.json.message).toBe('max_worker cannot be less than min_worker.');
  });

  it('answers 404 for an unknown model or version', async () => {
    expect((await call('PUT', '/models/nope?min_worker=1')).status).toBe(404);
    const r = await call('PUT', '/models/resnet?min_worker=1&model_version=9.9');
    expect(r.status).toBe(404);
    expect(r.json.type).toBe('ModelVersionNotFoundException');
  });
});

describe('describe, list, set-default, unregister', () => {
  beforeEach(async () => {
    await start({}, { autoscaling: () => ({ enabled: true, scaleUpQueueDepth: 1 }) });
    await call('POST', '/models?url=squeeze.mar');
    await call('POST', '/models?url=resnet.mar&initial_workers=2');
    await call('POST', '/models?url=m_v1.0.mar');
    await call('POST', '/models?url=m_v2.0.mar');
  });

  it('describes a model as an array with workers, jobQueueStatus and the autoscaling policy', async () => {
    const r = await call('GET', '/models/resnet');
    expect(r.status).toBe(200);
    expect(r.json).toHaveLength(1);
    expect(r.json[0]).toMatchObject({ modelName: 'resnet', modelVersion: '1.0', jobQueueStatus: { remainingCapacity: 100, pendingRequests: 0 }, autoscaling: { enabled: true } });
    expect(r.json[0].workers.map((w: { id: string }) => w.id)).toEqual(['9000', '9001']);
    expect((await call('GET', '/models/m/all')).json.map((d: { modelVersion: string }) => d.modelVersion)).toEqual(['1.0', '2.0']);
    expect((await call('GET', '/models/m/2.0')).json[0].modelVersion).toBe('2.0');
    expect((await call('GET', '/models/nope')).status).toBe(404);
  });

  it('lists default versions sorted by name, paged by limit and next_page_token', async () => {
    const first = await call('GET', '/models?limit=2');
    expect(first.json).toEqual({ nextPageToken: '2', models: [{ modelName: 'm', modelUrl: 'm_v1.0.mar' }, { modelName: 'resnet', modelUrl: 'resnet.mar' }] });
    const last = await call('GET', '/models?limit=2&next_page_token=2');
    expect(last.json).toEqual({ models: [{ modelName: 'squeeze', modelUrl: 'squeeze.mar' }] });
    expect((await call('GET', '/models?limit=500')).json.models).toHaveLength(3);
  });

  it('sets the default version with TorchServe\'s message', async () => {
    const r = await call('PUT', '/models/m/2.0/set-default');
    expect(r.json).toEqual({ status: 'Default version successfully updated for model "m" to "2.0"' });
    expect((await call('GET', '/models')).json.models[0]).toEqual({ modelName: 'm', modelUrl: 'm_v2.0.mar' });
    expect((await call('PUT', '/models/m/7.0/set-default')).status).toBe(404);
  });

  it('unregisters, refusing the default version while others exist (403)', async () => {
    const refused = await call('DELETE', '/models/m/1.0');
    expect(refused.status).toBe(403);
    expect(refused.json.message).toBe('Cannot remove default version for model m');
    expect((await call('DELETE', '/models/m/2.0')).json).toEqual({ status: 'Model "m" unregistered' });
    expect((await call('DELETE', '/models/resnet')).status).toBe(200);
    expect((await call('GET', '/models/resnet')).status).toBe(404);
  });

  it('answers 405 for a method the path does not support', async () => {
    const r = await call('POST', '/models/resnet');
    expect(r.status).toBe(405);
    expect(r.json).toMatchObject({ type: 'MethodNotAllowedException', message: 'Requested method is not allowed, please refer to API document.' });
  });

  it('reports KServe v1 readiness', async () => {
    expect((await call('GET', '/v1/models/resnet')).json).toEqual({ name: 'resnet', ready: true });
  });
});
