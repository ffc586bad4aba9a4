/**
 * TorchServe's smaller forms, each against a real server on loopback with a real handler:
 * - form-urlencoded fields in the body's charset, bytes that are not text as bytes
 *   (Netty's HttpPostRequestDecoder, InputParameter(name, bytes) in NettyUtils.getFormData);
 * - `/invocations` with `model_name` in a multipart body, and 400 "Parameter model_name is required."
 *   (http/api/rest/InferenceRequestHandler.java: handleInvocations, predict);
 * - the legacy `GET /{model}/predict?data=` (handleLegacyPredict takes any method);
 * - `cors_allowed_methods` / `cors_allowed_headers` on every answer (util/NettyUtils.java, sendHttpResponse);
 * - `GET /` answered 405 (http/api/rest/ApiDescriptionRequestHandler.java).
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServer, type RunningServer } from '../src/start-server.ts';
import { writeModelFolder } from './helpers.ts';
import { createWorkspace, opsConfig, type Workspace } from './ops-harness.ts';

/** Answers each request with what its fields were: text as text, bytes as their hex. */
const echoHandler = `
export function handle(data) {
  return data.map((row) => {
    const out = {};
    for (const [k, v] of Object.entries(row)) {
      if (k === 'body' && v.length === 0) continue;
      out[k] = typeof v === 'string' ? { text: v } : { hex: Buffer.from(v).toString('hex') };
    }
    return out;
  });
}
`;

let workspace: Workspace;
let server: RunningServer;
let inference: string;

beforeAll(async () => {
  workspace = await createWorkspace();
  for (const name of ['echo', 'other'])
    await writeModelFolder({
      dir: join(workspace.store, name),
      modelName: name,
      handler: 'echo.mjs',
      files: { 'echo.mjs': echoHandler },
    });
  server = await startServer({
    ...opsConfig(workspace, {
      load_models: 'echo,other',
      cors_allowed_origin: 'http://app.example',
      cors_allowed_methods: 'GET, POST',
      cors_allowed_headers: 'X-Custom',
    }),
    logDir: join(workspace.root, 'logs'),
  });
  inference = server.listening.find((l) => l.api === 'inference')!.url;
}, 60_000);
afterAll(async () => {
  await server?.close();
  await workspace?.cleanup();
});

async function post(path: string, init: RequestInit): Promise<{ status: number; json: any; headers: Headers }> {
  const response = await fetch(`${inference}${path}`, { method: 'POST', ...init });
  const text = await response.text();
  return { status: response.status, json: text ? JSON.parse(text) : undefined, headers: response.headers };
}

describe("TorchServe's smaller forms", { timeout: 60_000 }, () => {
  it('decodes form fields in the body charset and keeps bytes that are not text as bytes', async () => {
    const utf8 = await post('/predictions/echo', {
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: 'data=caf%C3%A9+au+lait&raw=%FF%00%80',
    });
    expect(utf8.status).toBe(200);
    expect(utf8.json).toEqual({ data: { text: 'café au lait' }, raw: { hex: 'ff0080' } });

    // Every byte 0-255 in an ISO-8859-1 form body reaches the handler as the same code point.
    const all = Buffer.from(Array.from({ length: 256 }, (_, i) => i));
    const encoded = [...all].map((b) => `%${b.toString(16).padStart(2, '0')}`).join('');
    const latin1 = await post('/predictions/echo', {
      headers: { 'content-type': 'application/x-www-form-urlencoded; charset=ISO-8859-1' },
      body: `data=${encoded}`,
    });
    expect(latin1.status).toBe(200);
    expect(latin1.json.data.text).toBe(all.toString('latin1'));
  });

  it('takes /invocations model_name from a multipart body, and asks for it when nothing names one', async () => {
    const form = new FormData();
    form.append('model_name', 'other');
    form.append('data', 'x');
    const named = await post('/invocations', { body: form });
    expect(named.status).toBe(200);
    expect(named.headers.get('x-marina-model-version')).toBeTruthy();
    expect(named.json.data).toEqual({ text: 'x' });

    const missing = await post('/invocations', { headers: { 'content-type': 'text/plain' }, body: 'x' });
    expect(missing.status).toBe(400);
    expect(missing.json).toMatchObject({
      code: 400,
      type: 'BadRequestException',
      message: 'Parameter model_name is required.',
    });
    expect(missing.json.hint).toContain('registered: echo, other');
  });

  it('serves the legacy GET /{model}/predict?data= with the query as the input', async () => {
    const response = await fetch(`${inference}/echo/predict?data=hello`);
    expect(response.status).toBe(200);
    expect(await response.json()).toEqual({ data: { text: 'hello' } });
  });

  it('sends cors_allowed_methods and cors_allowed_headers on every answer, and 405 for GET /', async () => {
    const ping = await fetch(`${inference}/ping`, { headers: { origin: 'http://app.example' } });
    expect(ping.headers.get('access-control-allow-origin')).toBe('http://app.example');
    expect(ping.headers.get('access-control-allow-methods')).toBe('GET, POST');
    expect(ping.headers.get('access-control-allow-headers')).toBe('X-Custom');
    const root = await fetch(`${inference}/`);
    expect(root.status).toBe(405);
    expect(await root.json()).toMatchObject({
      code: 405,
      type: 'MethodNotAllowedException',
      message: 'Requested method is not allowed, please refer to API document.',
    });
    expect(root.headers.get('access-control-allow-methods')).toBe('GET, POST');
  });

  // The deliberate differences a TorchServe user may need switched off: TorchServe answers a token
  // failure with 400 InvalidKeyException (TokenAuthorizationHandler.java) and /ping needs the inference key.
  it('answers token failures with 400 and guards /ping when token_failure_status=400 and ping_requires_token=true', async () => {
    const keyFilePath = join(workspace.root, 'strict-keys.json');
    const strict = await startServer({
      ...opsConfig(
        workspace,
        { disable_token_authorization: 'false', token_failure_status: '400', ping_requires_token: 'true' },
        { keyFilePath },
      ),
      logDir: join(workspace.root, 'logs-strict'),
    });
    try {
      const base = strict.listening.find((l) => l.api === 'inference')!.url;
      const denied = await fetch(`${base}/ping`);
      expect(denied.status).toBe(400);
      expect(await denied.json()).toMatchObject({
        code: 400,
        type: 'InvalidKeyException',
        message: 'Token Authorization failed. Token either incorrect, expired, or not provided correctly',
        marinaCode: 'MARINA_ERR_TOKEN_MISSING',
      });
      const keys = JSON.parse(await readFile(keyFilePath, 'utf8')) as { inference: { key: string } };
      const allowed = await fetch(`${base}/ping`, { headers: { authorization: `Bearer ${keys.inference.key}` } });
      expect(allowed.status).toBe(200);
    } finally {
      await strict.close();
    }
  });
});
