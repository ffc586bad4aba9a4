import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { join } from 'node:path';
import { buildApp, type MarinaApp } from '../src/index.ts';
import { tempDir, testConfig, writeModelFolder } from './helpers.ts';

// Reports what the handler received for each row, and answers with a cached Buffer for 'cached'
// (a handler may keep the bytes it returns: the hand-off must not detach them).
const inspectHandler = `
const bytes = new TextEncoder().encode('cached-answer');
const cached = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength); // owns its whole ArrayBuffer
export function handle(data, context) {
  return data.map((row, i) => {
    const body = row.body;
    if (body === 'cached') { context.setResponseContentType(i, 'text/plain'); return cached; }
    if (body === 'say') return 'said';
    return {
      kind: Buffer.isBuffer(body) ? 'buffer' : Array.isArray(body) ? 'array' : typeof body,
      value: Buffer.isBuffer(body) ? body.toString('utf8') : body,
      hex: Buffer.isBuffer(body) ? body.toString('hex') : null,
      header: context.getRequestHeader(i, 'x-tag') ?? null,
      requestId: context.requestIds[i],
      batch: data.length,
    };
  });
}
`;

describe('hand-off between the HTTP thread and the worker', () => {
  let dir: { path: string; cleanup: () => Promise<void> };
  let app: MarinaApp;

  beforeAll(async () => {
    dir = await tempDir();
    app = await buildApp(testConfig({}, dir.path));
    const one = await writeModelFolder({
      dir: join(dir.path, 'one'),
      modelName: 'one',
      handler: 'inspect.mjs',
      modelConfigYaml: 'batchSize: 1\n',
      files: { 'inspect.mjs': inspectHandler },
    });
    const eight = await writeModelFolder({
      dir: join(dir.path, 'eight'),
      modelName: 'eight',
      handler: 'inspect.mjs',
      modelConfigYaml: 'batchSize: 8\nmaxBatchDelay: 50\n',
      files: { 'inspect.mjs': inspectHandler },
    });
    for (const [url, archivePath] of [
      ['one', one],
      ['eight', eight],
    ] as const)
      await app.registry.register({ url, archivePath, synchronous: true });
  });

  afterAll(async () => {
    await app?.close();
    await dir?.cleanup();
  });

  const post = (model: string, payload: string | Buffer, contentType: string, tag = 't') =>
    app.inference.inject({
      method: 'POST',
      url: `/predictions/${model}`,
      payload,
      headers: { 'content-type': contentType, 'x-tag': tag },
    });

  it('gives the handler parsed JSON for application/json, as TorchServe does', async () => {
    const res = await post('one', '{"data": [[1, 2, 3, 4]]}', 'application/json; charset=utf-8');
    expect(res.statusCode).toBe(200);
    expect(res.headers['content-type']).toBe('application/json');
    expect(res.json()).toMatchObject({
      kind: 'object',
      value: { data: [[1, 2, 3, 4]] },
      header: 't',
      requestId: res.headers['x-request-id'],
    });
  });

  it('keeps the bytes of a JSON body that does not parse, and gives text/* as a string', async () => {
    expect((await post('one', '{not json', 'application/json')).json()).toMatchObject({
      kind: 'buffer',
      value: '{not json',
    });
    expect((await post('one', 'héllo', 'text/plain')).json()).toMatchObject({ kind: 'string', value: 'héllo' });
    expect((await post('one', 'raw', 'application/octet-stream')).json()).toMatchObject({
      kind: 'buffer',
      value: 'raw',
    });
  });

  it('keeps the exact bytes of a body that is not UTF-8, and decodes text/* as TorchServe does', async () => {
    // A small body the worker decodes travels as text only when it is valid UTF-8; these must not.
    const notUtf8 = Buffer.from([0x7b, 0xff, 0xfe, 0x22, 0xc3]);
    expect((await post('one', notUtf8, 'application/json')).json()).toMatchObject({
      kind: 'buffer',
      hex: '7bfffe22c3',
    });
    expect((await post('one', notUtf8, 'text/plain')).json()).toMatchObject({
      kind: 'string',
      value: notUtf8.toString('utf8'),
    });
    // Valid UTF-8 that is not JSON comes back as exactly its bytes (a BOM too).
    const bom = Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from('ünï')]);
    expect((await post('one', bom, 'application/json')).json()).toMatchObject({
      kind: 'buffer',
      hex: bom.toString('hex'),
    });
  });

  it("answers a handler's string as it is, typed as bytes when the handler gives no type", async () => {
    const res = await post('one', 'say', 'text/plain');
    expect(res.statusCode).toBe(200);
    expect(res.headers['content-type']).toBe('application/octet-stream');
    expect(res.body).toBe('said');
  });

  it('answers each of many concurrent requests with its own result when batches are handed off together', async () => {
    for (const model of ['one', 'eight']) {
      const responses = await Promise.all(
        Array.from({ length: 40 }, (_, i) => post(model, JSON.stringify({ n: i }), 'application/json', `tag-${i}`)),
      );
      responses.forEach((res, i) => {
        expect(res.statusCode).toBe(200);
        expect(res.json()).toMatchObject({
          value: { n: i },
          header: `tag-${i}`,
          requestId: res.headers['x-request-id'],
        });
      });
      if (model === 'eight') expect(Math.max(...responses.map((r) => r.json().batch as number))).toBeGreaterThan(1);
    }
  });

  it('sends a Buffer the handler keeps, again and again, intact', async () => {
    for (let i = 0; i < 3; i++) {
      const res = await post('one', 'cached', 'text/plain');
      expect(res.statusCode).toBe(200);
      expect(res.body).toBe('cached-answer');
    }
  });
});
