/**
 * Management routes over real HTTP on 127.0.0.1, against the IN-MEMORY STAND-IN registry
 * (management-stand-in-registry.ts), for what real workers cannot show on demand: 206 (some
 * workers failed), the JSON-body form, parameter validation and downloads. Everything else is
 * covered end to end against real workers in ops-management.test.ts.
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

  it('answers 400 "Parameter url is required." and 400 for a mistyped parameter', async () => {
    await start();
    expect((await call('POST', '/models')).json).toMatchObject({ code: 400, type: 'BadRequestException', message: 'Parameter url is required.' });
    const bad = await call('POST', '/models?url=resnet.mar&batch_size=many');
    expect(bad.status).toBe(400);
    expect(bad.json.message).toContain('batch_size');
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
