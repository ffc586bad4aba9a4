/**
 * An unknown route keeps TorchServe's 404 body and its exact sentence as `message`; which routes
 * the API has near the one asked for goes to `hint`, with a stable code. A path that exists with
 * other methods (and `GET /`) is TorchServe's 405. The expected sentences are copied from
 * pytorch/serve: frontend/server/src/main/java/org/pytorch/serve/http/ResourceNotFoundException.java
 * and MethodNotAllowedException.java; `GET /` answering 405 is ApiDescriptionRequestHandler.java.
 * Real Fastify listeners built by buildApp (inject).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp, notFoundHint, type MarinaApp } from '../src/app.ts';
import { testConfig, tempDir } from './helpers.ts';

describe('404 on an unknown route', () => {
  let dir: { path: string; cleanup: () => Promise<void> };
  let app: MarinaApp;

  beforeAll(async () => {
    dir = await tempDir();
    app = await buildApp(testConfig({}, dir.path));
  });

  afterAll(async () => {
    await app?.close();
    await dir?.cleanup();
  });

  async function notFound(
    method: 'GET' | 'POST',
    url: string,
  ): Promise<{ code: number; type: string; message: string; marinaCode: string; hint: string }> {
    const res = await app.inference.inject({ method, url });
    expect(res.statusCode).toBe(404);
    return res.json();
  }

  it('suggests the closest first path segment of the inference API', async () => {
    const body = await notFound('POST', '/prediction/resnet-18');
    expect(body.code).toBe(404);
    expect(body.type).toBe('ResourceNotFoundException');
    expect(body.marinaCode).toBe('MARINA_ERR_ROUTE_NOT_FOUND');
    expect(body.message).toBe('Requested resource is not found, please refer to API document.');
    expect(body.hint).toContain('POST /prediction/resnet-18 is not a route of this API; did you mean /predictions?');
    expect(body.hint).toContain('POST /predictions/{model_name}');
    expect(body.hint).toContain('GET /api-description');
  });

  it('lists the routes under the same first segment when only the rest is wrong', async () => {
    const body = await notFound('GET', '/predictions/resnet-18/1.0/extra/parts');
    expect(body.message).toBe('Requested resource is not found, please refer to API document.');
    expect(body.hint).toContain('its routes under /predictions: ');
    expect(body.hint).toContain('POST /predictions/{model_name}/{model_version}');
  });

  it.each([
    ['inference', 'GET', '/'],
    ['inference', 'DELETE', '/ping'],
    ['management', 'GET', '/'],
    ['management', 'POST', '/models/some-model'],
  ] as const)('answers 405 MethodNotAllowedException on the %s API for %s %s', async (api, method, url) => {
    const res = await app[api].inject({ method, url });
    expect(res.statusCode).toBe(405);
    const body = res.json();
    expect(body).toMatchObject({
      code: 405,
      type: 'MethodNotAllowedException',
      message: 'Requested method is not allowed, please refer to API document.',
      marinaCode: 'MARINA_ERR_METHOD_NOT_ALLOWED',
    });
    expect(body.hint).toContain(`${method} is not accepted on this path`);
    expect(res.headers.allow).toBeTruthy();
    expect(String(res.headers.allow)).not.toContain(method);
  });

  it('lists the first segments the API serves when nothing is close', () => {
    const routes = [
      { method: 'GET', url: '/ping' },
      { method: 'POST', url: '/predictions/:model_name' },
    ];
    expect(notFoundHint('GET', '/zzzzzzzzzz?x=1', routes)).toBe(
      'GET /zzzzzzzzzz is not a route of this API, whose paths start with /ping, /predictions. GET /api-description (or OPTIONS /) on this port describes every route; the management port has a browsable page at /api-explorer.',
    );
  });
});
