import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { writeCorruptJpeg, writeSampleJpeg } from '@marina/model-zoo';
import { buildApp, type MarinaApp } from '../src/index.ts';
import { tempDir, testConfig } from './helpers.ts';
import { writeClassifierModel } from './fixtures.ts';

describe('bad request bodies', () => {
  let dir: { path: string; cleanup: () => Promise<void> };
  let app: MarinaApp;
  let good: Buffer;
  let corrupt: Buffer;
  const post = (payload: Buffer | string, contentType = 'application/octet-stream') =>
    app.inference.inject({
      method: 'POST',
      url: '/predictions/classifier',
      payload,
      headers: { 'content-type': contentType },
    });

  beforeAll(async () => {
    dir = await tempDir();
    await writeSampleJpeg({ outputPath: join(dir.path, 'good.jpg'), width: 160, height: 120 });
    await writeCorruptJpeg(join(dir.path, 'bad.jpg'));
    good = await readFile(join(dir.path, 'good.jpg'));
    corrupt = await readFile(join(dir.path, 'bad.jpg'));
    app = await buildApp(testConfig({ maxRequestBytes: 200_000 }, dir.path));
    const folder = await writeClassifierModel(dir.path, 'classifier', {
      modelConfigYaml: 'batchSize: 4\nmaxBatchDelay: 20\n',
    });
    await app.registry.register({ url: 'classifier', archivePath: folder, synchronous: true });
  });

  afterAll(async () => {
    await app?.close();
    await dir?.cleanup();
  });

  it('answers a corrupt JPEG with 400 and a clear message, and the worker keeps serving', async () => {
    const workersBefore = app.registry.describe('classifier')[0]!.workers.map((w) => w.id);
    const res = await post(corrupt);
    expect(res.statusCode).toBe(400);
    expect(res.json()).toMatchObject({ code: 400, marinaCode: 'MARINA_ERR_IMAGE_DECODE_FAILED' });
    expect(res.json().message).toMatch(/not a decodable image/);
    expect((await post(good)).statusCode).toBe(200);
    expect(app.registry.describe('classifier')[0]!.workers.map((w) => w.id)).toEqual(workersBefore);
  });

  it('answers a text body with 400', async () => {
    const res = await post('hello, I am not a picture', 'text/plain');
    expect(res.statusCode).toBe(400);
    expect(res.json().marinaCode).toBe('MARINA_ERR_IMAGE_DECODE_FAILED');
  });

  it('fails only the bad request of a batch; the good ones in it get their answers', async () => {
    const responses = await Promise.all([post(good), post(corrupt), post(good), post(Buffer.alloc(0))]);
    expect(responses.map((r) => r.statusCode)).toEqual([200, 400, 200, 400]);
    expect(Object.keys(responses[0]!.json())).toHaveLength(5);
  });

  it('answers a body over max_request_size with 413', async () => {
    const res = await post(Buffer.alloc(300_000, 1));
    expect(res.statusCode).toBe(413);
    expect(res.json()).toMatchObject({ code: 413, marinaCode: 'MARINA_ERR_REQUEST_TOO_LARGE' });
  });

  it('answers 404 for an unknown model or version, with x-request-id', async () => {
    const res = await app.inference.inject({ method: 'POST', url: '/predictions/nope', payload: good });
    expect(res.statusCode).toBe(404);
    expect(res.json()).toMatchObject({
      code: 404,
      type: 'ModelNotFoundException',
      marinaCode: 'MARINA_ERR_MODEL_NOT_FOUND',
    });
    // TorchServe's exact message (wlm/ModelManager.java: "Model not found: " + name); what is registered in `hint`.
    expect(res.json().message).toBe('Model not found: nope');
    expect(res.json().hint).toBe('registered models: classifier');
    expect(res.headers['x-request-id']).toBeTruthy();
    const typo = await app.inference.inject({ method: 'POST', url: '/predictions/clasifier', payload: good });
    expect(typo.json().message).toBe('Model not found: clasifier');
    expect(typo.json().hint).toBe("registered models: classifier; did you mean 'classifier'?");
    const v = await app.inference.inject({ method: 'POST', url: '/predictions/classifier/9.9', payload: good });
    expect(v.statusCode).toBe(404);
    // TorchServe's ModelVersionNotFoundException text; the versions there are in `hint`.
    expect(v.json().message).toBe('Model version: 9.9 does not exist for model: classifier');
    expect(v.json().hint).toContain('available: 1.0');
  });
});
