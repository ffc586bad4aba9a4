/**
 * TorchServe's other inference routes against a real server: form-urlencoded bodies decoded into
 * fields, KServe v1 `:predict`, SageMaker's /invocations and /models/{m}/invoke, the legacy
 * /{m}/predict (query parameters as fields), /explanations answering 503 as TorchServe does for a
 * handler without explain, the workflow routes' 501, CORS keys, trailing slashes and empty query values.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { join } from 'node:path';
import { startServer, type RunningServer } from '../src/start-server.ts';
import { writeModelFolder } from './helpers.ts';
import { call, createWorkspace, opsConfig, type Workspace } from './ops-harness.ts';

/** Answers each request with its input fields (bytes as text), so a test sees what the handler got. */
const echoHandler = `
export function handle(data) {
  return data.map((row) => Object.fromEntries(Object.entries(row).map(([k, v]) => [k, v instanceof Uint8Array ? Buffer.from(v).toString() : v])));
}
`;

let workspace: Workspace;
let server: RunningServer;
let api: string;

beforeAll(async () => {
  workspace = await createWorkspace('marina-inference-routes-');
  await writeModelFolder({
    dir: join(workspace.store, 'echo'),
    modelName: 'echo',
    handler: 'echo_handler.mjs',
    files: { 'echo_handler.mjs': echoHandler },
  });
  const config = opsConfig(workspace, {
    load_models: 'echo',
    cors_allowed_origin: 'http://app.example',
    cors_allowed_methods: 'GET, POST',
    cors_allowed_headers: 'X-Custom-Header',
  });
  server = await startServer({ ...config, logDir: join(workspace.root, 'logs') });
  api = server.listening.find((l) => l.api === 'inference')!.url;
}, 60_000);
afterAll(async () => {
  await server?.close();
  await workspace?.cleanup();
});

describe('inference routes TorchServe serves', { timeout: 60_000 }, () => {
  it('decodes a form-urlencoded body into one field per form field', async () => {
    const response = await fetch(`${api}/predictions/echo`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: 'data=hello+world&n=3',
    });
    expect(response.status).toBe(200);
    expect(await response.json()).toEqual({ data: 'hello world', n: '3' });
  });

  it('serves KServe v1 /v1/models/{m}:predict like /predictions/{m}', async () => {
    const result = await call(api, 'POST', '/v1/models/echo:predict', { body: { instances: [1, 2] } });
    expect(result.status).toBe(200);
    expect(result.json).toEqual({ body: { instances: [1, 2] } });
    expect((await call(api, 'POST', '/v1/models/nope:predict', { body: {} })).json).toMatchObject({
      code: 404,
      type: 'ModelNotFoundException',
    });
  });

  it('serves SageMaker /invocations (model_name or the only model; query as fields) and /models/{m}/invoke', async () => {
    const named = await call(api, 'POST', '/invocations?model_name=echo&topk=2', { body: { x: 1 } });
    expect(named.status).toBe(200);
    expect(named.json).toEqual({ body: { x: 1 }, model_name: 'echo', topk: '2' });
    const only = await call(api, 'POST', '/invocations', { body: { x: 2 } });
    expect(only.json).toEqual({ body: { x: 2 } });
    const invoke = await call(api, 'POST', '/models/echo/invoke', { body: { x: 3 } });
    expect(invoke.status).toBe(200);
    expect(invoke.json).toEqual({ body: { x: 3 } });
  });

  it('serves the legacy /{m}/predict and /{m}/{v}/predict with query parameters as fields', async () => {
    const legacy = await call(api, 'POST', '/echo/predict?flag=on', { body: { y: 1 } });
    expect(legacy.status).toBe(200);
    expect(legacy.json).toEqual({ body: { y: 1 }, flag: 'on' });
    expect((await call(api, 'POST', '/echo/1.0/predict', { body: { y: 2 } })).json).toEqual({ body: { y: 2 } });
    expect((await call(api, 'POST', '/echo/9.9/predict', { body: {} })).json).toMatchObject({
      code: 404,
      type: 'ModelVersionNotFoundException',
    });
  });

  it('answers /explanations as TorchServe does for a handler without explain: 503, InternalServerException, "Prediction failed" first', async () => {
    for (const path of ['/explanations/echo', '/v1/models/echo:explain']) {
      const result = await call(api, 'POST', path, { body: {} });
      expect(result.status).toBe(503);
      expect(result.json).toMatchObject({
        code: 503,
        type: 'InternalServerException',
        marinaCode: 'MARINA_ERR_EXPLAIN_NOT_SUPPORTED',
      });
      expect(result.json.message).toBe('Prediction failed');
      expect(result.json.hint).toMatch(/has no explain/);
    }
    expect((await call(api, 'POST', '/explanations/nope', { body: {} })).json).toMatchObject({
      code: 404,
      type: 'ModelNotFoundException',
    });
  });

  it('answers the workflow routes with 501 MARINA_ERR_WORKFLOWS_NOT_IMPLEMENTED', async () => {
    for (const [method, path] of [
      ['POST', '/wfpredict/flow'],
      ['GET', '/workflows'],
      ['POST', '/workflows?url=flow.war'],
      ['GET', '/workflows/flow'],
      ['DELETE', '/workflows/flow'],
    ] as const) {
      const result = await call(api, method, path);
      expect(result.status, `${method} ${path}`).toBe(501);
      expect(result.json.marinaCode).toBe('MARINA_ERR_WORKFLOWS_NOT_IMPLEMENTED');
    }
  });

  it('treats a trailing slash as the same route and empty query values as absent', async () => {
    expect((await call(api, 'GET', '/ping/')).status).toBe(200);
    const list = await call(api, 'GET', '/models/?limit=&next_page_token=');
    expect(list.status).toBe(200);
    expect(list.json).toEqual({ models: [{ modelName: 'echo', modelUrl: 'echo' }] });
    expect((await call(api, 'GET', '/models?limit=1&next_page_token=')).json.models).toHaveLength(1);
  });

  it('applies the cors_* keys: preflight answered with the allowed methods and headers, the origin echoed on answers', async () => {
    const preflight = await fetch(`${api}/predictions/echo`, {
      method: 'OPTIONS',
      headers: { origin: 'http://app.example', 'access-control-request-method': 'POST' },
    });
    expect(preflight.status).toBe(200);
    expect(preflight.headers.get('access-control-allow-origin')).toBe('http://app.example');
    expect(preflight.headers.get('access-control-allow-methods')).toBe('GET, POST');
    expect(preflight.headers.get('access-control-allow-headers')).toBe('X-Custom-Header');
    const ping = await fetch(`${api}/ping`, { headers: { origin: 'http://app.example' } });
    expect(ping.headers.get('access-control-allow-origin')).toBe('http://app.example');
    const other = await fetch(`${api}/ping`, { headers: { origin: 'http://evil.example' } });
    expect(other.headers.get('access-control-allow-origin')).toBeNull();
  });
});
