/**
 * TorchServe's API descriptions from a real server with three listeners and token authorization
 * on: `OPTIONS /` and `GET /api-description` on each port answer an OpenAPI 3.0.1 document in
 * TorchServe's shape without a token; `OPTIONS /predictions/{m}` and `OPTIONS /models/{m}` describe
 * one model (with the API's key). The documents come from the routes' own schemas.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import Fastify from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { apiExplorerRoutes } from '../src/routes/api-explorer.ts';
import { startServer, type RunningServer } from '../src/start-server.ts';
import { call, createWorkspace, freePort, opsConfig, packModel, type Workspace } from './ops-harness.ts';

let workspace: Workspace;
let server: RunningServer;
let urls: Record<'inference' | 'management' | 'metrics', string>;
let keys: { inference: string; management: string };

beforeAll(async () => {
  workspace = await createWorkspace('marina-api-description-');
  await packModel(workspace.store, { modelName: 'affine' });
  const [i, m, x] = [await freePort(), await freePort(), await freePort()];
  const config = opsConfig(workspace, {
    inference_address: `http://127.0.0.1:${i}`,
    management_address: `http://127.0.0.1:${m}`,
    metrics_address: `http://127.0.0.1:${x}`,
    disable_token_authorization: 'false',
    load_models: 'affine.mar',
  });
  server = await startServer({
    ...config,
    logDir: join(workspace.root, 'logs'),
    keyFilePath: join(workspace.root, 'key_file.json'),
  });
  urls = Object.fromEntries(server.listening.map((l) => [l.api, l.url])) as typeof urls;
  const file = JSON.parse(await readFile(join(workspace.root, 'key_file.json'), 'utf8'));
  keys = { inference: file.inference.key, management: file.management.key };
}, 60_000);
afterAll(async () => {
  await server?.close();
  await workspace?.cleanup();
});

describe('API descriptions', { timeout: 60_000 }, () => {
  it("answers OPTIONS / and GET /api-description on all three ports, without a token, in TorchServe's shape", async () => {
    const expected = {
      inference: [
        '/ping',
        '/predictions/{model_name}',
        '/predictions/{model_name}/{model_version}',
        '/v1/models/{model_name}:predict',
        '/explanations/{model_name}',
        '/invocations',
        '/{model_name}/predict',
        '/api-description',
        '/v2/health/live',
        '/v2/health/ready',
        '/v2',
        '/v2/models/{model_name}',
        '/v2/models/{model_name}/ready',
        '/v2/models/{model_name}/infer',
        '/v2/models/{model_name}/versions/{model_version}/infer',
      ],
      management: [
        '/models',
        '/models/{model_name}',
        '/models/{model_name}/{model_version}',
        '/models/{model_name}/{model_version}/set-default',
        '/token',
        '/api-description',
        '/api-explorer',
      ],
      metrics: ['/metrics', '/api-description'],
    };
    for (const api of ['inference', 'management', 'metrics'] as const) {
      const document = (await call(urls[api], 'GET', '/api-description')).json;
      expect(document).toMatchObject({ openapi: '3.0.1', info: { title: 'TorchServe APIs' } });
      for (const path of expected[api]) expect(Object.keys(document.paths), `${api} ${path}`).toContain(path);
    }
  });

  it("answers OPTIONS / with TorchServe's own paths and methods on each port, exactly", async () => {
    // pytorch/serve frontend/server/src/main/java/org/pytorch/serve/openapi/OpenApiUtils.java: listApis
    // (listInferenceApis / listManagementApis, and /metrics added on every port).
    const torchServe: Record<'inference' | 'management' | 'metrics', Record<string, string[]>> = {
      inference: {
        '/': ['options'],
        '/ping': ['get'],
        '/v1/models/{model_name}:predict': ['post'],
        '/v2/models/{model_name}/infer': ['post'],
        '/predictions/{model_name}': ['post'],
        '/predictions/{model_name}/{model_version}': ['post'],
        '/api-description': ['get'],
        '/metrics': ['get'],
      },
      management: {
        '/': ['options'],
        '/models': ['get', 'post'],
        '/models/{model_name}': ['get', 'put', 'delete'],
        '/models/{model_name}/{model_version}': ['get', 'put', 'delete'],
        '/models/{model_name}/{model_version}/set-default': ['put'],
        '/api-description': ['get'],
        '/metrics': ['get'],
      },
      metrics: { '/metrics': ['get'] },
    };
    for (const api of ['inference', 'management', 'metrics'] as const) {
      const options = await fetch(`${urls[api]}/`, { method: 'OPTIONS' });
      expect(options.status, api).toBe(200);
      const document = await options.json();
      expect(document).toMatchObject({ openapi: '3.0.1', info: { title: 'TorchServe APIs' } });
      const listed = Object.fromEntries(
        Object.entries(document.paths as Record<string, Record<string, unknown>>).map(([path, ops]) => [
          path,
          Object.keys(ops).sort(),
        ]),
      );
      const want = Object.fromEntries(Object.entries(torchServe[api]).map(([path, ops]) => [path, [...ops].sort()]));
      expect(listed, api).toEqual(want);
    }
  });

  it('describes each operation from its route schema: parameters, request body and responses', async () => {
    const document = (await call(urls.management, 'GET', '/api-description')).json;
    const register = document.paths['/models'].post;
    expect(register.description).toMatch(/^Register a new model/);
    expect(register.parameters).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ in: 'query', name: 'url' }),
        expect.objectContaining({
          in: 'query',
          name: 'initial_workers',
          schema: expect.objectContaining({ type: 'integer' }),
        }),
      ]),
    );
    expect(Object.keys(register.responses)).toEqual(expect.arrayContaining(['200', '202', '400', '404', '409', '500']));
    expect(register.responses['400'].content['application/json'].schema.required).toEqual(['code', 'type', 'message']);
    const scale = document.paths['/models/{model_name}'].put;
    expect(scale.parameters).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ in: 'path', name: 'model_name', required: true }),
        expect.objectContaining({ in: 'query', name: 'min_worker' }),
      ]),
    );
    const ping = (await call(urls.inference, 'GET', '/api-description')).json.paths['/ping'].get;
    expect(ping.responses['200'].content['application/json'].schema.properties.status).toEqual({ type: 'string' });
    const infer = (await call(urls.inference, 'GET', '/api-description')).json.paths['/v2/models/{model_name}/infer']
      .post;
    expect(infer.parameters).toEqual(
      expect.arrayContaining([expect.objectContaining({ in: 'path', name: 'model_name', required: true })]),
    );
    expect(infer.responses['400'].content['application/json'].schema.required).toEqual(['error']);
  });

  it("describes one model with OPTIONS /predictions/{m} and OPTIONS /models/{m} (the API's key; 404 for an unknown model)", async () => {
    expect((await fetch(`${urls.inference}/predictions/affine`, { method: 'OPTIONS' })).status).toBe(401);
    const inference = await call(urls.inference, 'OPTIONS', '/predictions/affine', { token: keys.inference });
    expect(inference.status).toBe(200);
    expect(Object.keys(inference.json.paths)).toEqual(
      expect.arrayContaining(['/predictions/affine', '/predictions/affine/{model_version}']),
    );
    expect(inference.json.paths['/predictions/affine'].post.parameters).toEqual([]);
    const management = await call(urls.management, 'OPTIONS', '/models/affine', { token: keys.management });
    expect(management.status).toBe(200);
    expect(Object.keys(management.json.paths)).toEqual(
      expect.arrayContaining(['/models/affine', '/models/affine/{model_version}']),
    );
    expect((await call(urls.inference, 'OPTIONS', '/predictions/nope', { token: keys.inference })).json).toMatchObject({
      code: 404,
      type: 'ModelNotFoundException',
    });
  });
});

describe('the API explorer relay', () => {
  it("reaches only listeners the management address's clients could reach themselves", async () => {
    const { isReachableFrom } = await import('../src/routes/api-explorer.ts');
    expect(isReachableFrom('127.0.0.1', '127.0.0.1')).toBe(true);
    expect(isReachableFrom('127.0.0.1', '10.0.0.5')).toBe(true);
    expect(isReachableFrom('0.0.0.0', '127.0.0.1')).toBe(false);
    expect(isReachableFrom('10.0.0.5', '10.0.0.5')).toBe(true);
    expect(isReachableFrom('10.0.0.5', '0.0.0.0')).toBe(true);
  });

  it('refuses to call itself and answers the explorer page with a strict CSP', async () => {
    const page = await fetch(`${urls.management}/api-explorer`);
    expect(page.status).toBe(200);
    expect(page.headers.get('content-security-policy')).toMatch(/default-src 'none'; script-src 'nonce-[^']+'/);
    const loop = await fetch(`${urls.management}/api-explorer/try`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ api: 'management', method: 'GET', path: '/api-explorer' }),
    });
    expect(loop.status).toBe(400);
    expect(((await loop.json()) as { marinaCode: string }).marinaCode).toBe('MARINA_ERR_BAD_REQUEST');
  });

  it('answers what it does not relay with a code, through the error map', async () => {
    const explorer = Fastify();
    const instances = { inference: Fastify(), management: explorer, metrics: Fastify() };
    // Management public, inference kept on loopback, metrics not served.
    await explorer.register(apiExplorerRoutes, {
      instances,
      apis: ['inference', 'management'],
      hosts: { inference: '127.0.0.1', management: '10.0.0.5', metrics: '127.0.0.1' },
    });
    const tryCall = (api: string) =>
      explorer.inject({ method: 'POST', url: '/api-explorer/try', payload: { api, method: 'GET', path: '/ping' } });
    const unreachable = await tryCall('inference');
    expect(unreachable.statusCode).toBe(403);
    expect(unreachable.headers.connection).toBe('close');
    expect(JSON.parse(unreachable.body)).toMatchObject({
      code: 403,
      type: 'BadRequestException',
      marinaCode: 'MARINA_ERR_API_EXPLORER_UNREACHABLE',
    });
    const notServed = await tryCall('metrics');
    expect(notServed.statusCode).toBe(400);
    expect(JSON.parse(notServed.body)).toMatchObject({ code: 400, marinaCode: 'MARINA_ERR_BAD_REQUEST' });
    await Promise.all(Object.values(instances).map((instance) => instance.close()));
  });
});
