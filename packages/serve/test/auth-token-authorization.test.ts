import { mkdtemp, readFile, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import Fastify, { type FastifyInstance } from 'fastify';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  createTokenAuthorization,
  createTokenHook,
  readKeyFile,
  tokenRoutes,
  type TokenAuthorization,
} from '../src/auth/token-authorization.ts';

let dir: string;
let keyFilePath: string;
let nowMs: number;
let tokens: TokenAuthorization;
let app: FastifyInstance;
let base: string;

async function startApp(keyType: 'inference' | 'management'): Promise<void> {
  app = Fastify();
  app.addHook('onRequest', createTokenHook({ listenerKeys: [keyType], tokens }));
  app.get('/ping', { config: { auth: keyType } }, async () => ({ status: 'Healthy' }));
  app.options('/', { config: { auth: 'none' } }, async () => ({ openapi: '3.0.1' }));
  if (keyType === 'management') await app.register(tokenRoutes, { tokens });
  base = await app.listen({ host: '127.0.0.1', port: 0 });
}

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'marina-auth-'));
  keyFilePath = join(dir, 'key_file.json');
  nowMs = Date.parse('2025-01-01T00:00:00Z');
  tokens = await createTokenAuthorization({ keyFilePath, tokenExpirationMin: 60, now: () => nowMs });
});
afterEach(async () => {
  await app?.close();
  await rm(dir, { recursive: true, force: true });
});

describe('key_file.json', () => {
  it("is written in TorchServe's format with mode 0600", async () => {
    const file = JSON.parse(await readFile(keyFilePath, 'utf8'));
    expect(Object.keys(file)).toEqual(['management', 'inference', 'API']);
    expect(file.management['expiration time']).toBe('2025-01-01T01:00:00.000Z');
    expect(file.inference['expiration time']).toBe('2025-01-01T01:00:00.000Z');
    expect(file.API).toEqual({ key: expect.stringMatching(/^[A-Za-z0-9_-]{32}$/) });
    expect(new Set([file.management.key, file.inference.key, file.API.key]).size).toBe(3);
    expect((await stat(keyFilePath)).mode & 0o777).toBe(0o600);
    await expect(readKeyFile(keyFilePath)).resolves.toEqual(file);
  });

  it("readKeyFile reports a file that is not TorchServe's format", async () => {
    await rm(keyFilePath);
    await expect(readKeyFile(keyFilePath)).rejects.toMatchObject({ code: 'MARINA_ERR_KEY_FILE_INVALID' });
  });
});

describe('the token hook', () => {
  it('lets a request with the right bearer key through', async () => {
    await startApp('inference');
    const response = await fetch(`${base}/ping`, {
      headers: { authorization: `Bearer ${tokens.keyFile().inference.key}` },
    });
    expect(response.status).toBe(200);
  });

  it("answers 401 with TorchServe's body and says the token is missing and where the key file is", async () => {
    await startApp('inference');
    const response = await fetch(`${base}/ping`);
    expect(response.status).toBe(401);
    expect(response.headers.get('www-authenticate')).toMatch(/^Bearer/);
    expect(response.headers.get('connection')).toBe('close');
    const text = await response.text();
    expect(text.endsWith('}\n')).toBe(true);
    const body = JSON.parse(text);
    expect(body).toMatchObject({ code: 401, type: 'InvalidKeyException', marinaCode: 'MARINA_ERR_TOKEN_MISSING' });
    // TorchServe's exact text (TokenAuthorizationHandler.java) as the message; Marina's guidance in
    // hint: the key file by name, never its path.
    expect(body.message).toBe('Token Authorization failed. Token either incorrect, expired, or not provided correctly');
    expect(body.hint).toContain('no token was provided');
    expect(body.hint).toContain(basename(keyFilePath));
    expect(JSON.stringify(body)).not.toContain(keyFilePath);
  });

  it('refuses the management key on the inference API as a wrong token', async () => {
    await startApp('inference');
    const response = await fetch(`${base}/ping`, {
      headers: { authorization: `Bearer ${tokens.keyFile().management.key}` },
    });
    expect(response.status).toBe(401);
    expect(await response.json()).toMatchObject({ marinaCode: 'MARINA_ERR_TOKEN_INVALID' });
  });

  it('matches the Bearer scheme case-insensitively (RFC 7235)', async () => {
    await startApp('inference');
    for (const scheme of ['bearer', 'BEARER', 'BeArEr']) {
      const response = await fetch(`${base}/ping`, {
        headers: { authorization: `${scheme} ${tokens.keyFile().inference.key}` },
      });
      expect(response.status).toBe(200);
    }
  });

  it("asks a request that matches no route for the listener's key before answering 404", async () => {
    await startApp('inference');
    expect((await fetch(`${base}/no-such-route`)).status).toBe(401);
    const response = await fetch(`${base}/no-such-route`, {
      headers: { authorization: `Bearer ${tokens.keyFile().inference.key}` },
    });
    expect(response.status).toBe(404);
  });

  it('treats a header that is not "Bearer <token>" as missing', async () => {
    await startApp('inference');
    const response = await fetch(`${base}/ping`, {
      headers: { authorization: `Basic ${tokens.keyFile().inference.key}` },
    });
    expect(await response.json()).toMatchObject({ marinaCode: 'MARINA_ERR_TOKEN_MISSING' });
  });

  it('says when the key has expired', async () => {
    await startApp('inference');
    nowMs += 61 * 60_000;
    const response = await fetch(`${base}/ping`, {
      headers: { authorization: `Bearer ${tokens.keyFile().inference.key}` },
    });
    expect(response.status).toBe(401);
    const body = await response.json();
    expect(body).toMatchObject({ marinaCode: 'MARINA_ERR_TOKEN_EXPIRED' });
    expect(body.message).toBe('Token Authorization failed. Token either incorrect, expired, or not provided correctly');
    expect(body.hint).toContain('/token?type=inference');
  });

  it('does not protect a route declared open (OPTIONS /, the API description)', async () => {
    await startApp('inference');
    const response = await fetch(`${base}/`, { method: 'OPTIONS' });
    expect(response.status).toBe(200);
  });
});

describe('/token rotation', () => {
  it('needs the API key, not the management key', async () => {
    await startApp('management');
    const response = await fetch(`${base}/token?type=inference`, {
      headers: { authorization: `Bearer ${tokens.keyFile().management.key}` },
    });
    expect(response.status).toBe(401);
    expect(await response.json()).toMatchObject({
      marinaCode: 'MARINA_ERR_TOKEN_INVALID',
      message: 'Token Authorization failed. Token either incorrect, expired, or not provided correctly',
      hint: expect.stringContaining('API key'),
    });
  });

  it('gives the inference key a new value and expiry and rewrites the file', async () => {
    await startApp('management');
    const before = await readKeyFile(keyFilePath);
    nowMs += 30 * 60_000;
    const response = await fetch(`${base}/token?type=inference`, {
      headers: { authorization: `Bearer ${before.API.key}` },
    });
    expect(response.status).toBe(200);
    expect(await response.text()).toBe('');
    const after = await readKeyFile(keyFilePath);
    expect(after.inference.key).not.toBe(before.inference.key);
    expect(after.inference['expiration time']).toBe('2025-01-01T01:30:00.000Z');
    expect(after.management).toEqual(before.management);
    expect(tokens.check('inference', `Bearer ${before.inference.key}`)).toBe('wrong');
    expect(tokens.check('inference', `Bearer ${after.inference.key}`)).toBe('ok');
  });

  it('answers 400 InvalidKeyException for a missing or unknown type', async () => {
    await startApp('management');
    const response = await fetch(`${base}/token?type=API`, {
      headers: { authorization: `Bearer ${tokens.keyFile().API.key}` },
    });
    expect(response.status).toBe(400);
    expect(await response.json()).toMatchObject({
      code: 400,
      type: 'InvalidKeyException',
      marinaCode: 'MARINA_ERR_TOKEN_TYPE_INVALID',
    });
  });
});
