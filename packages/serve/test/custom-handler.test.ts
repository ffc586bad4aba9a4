import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { join } from 'node:path';
import { buildApp, type MarinaApp } from '../src/index.ts';
import { tempDir, testConfig, writeModelFolder } from './helpers.ts';

const classHandler = `
export default class EchoHandler {
  async initialize(context) {
    this.info = { model: context.modelName, batchSize: context.batchSize, hasManifest: !!context.manifest.model, modelDir: context.modelDir, yaml: context.modelYamlConfig.custom };
  }
  preprocess(data, context) { return data.map((row) => row.body); }
  inference(inputs) { return inputs.map((x) => ({ upper: String(x).toUpperCase() })); }
  postprocess(outputs, context) {
    context.setResponseStatus(201, 'Created', 0);
    context.setResponseHeader(0, 'x-handler', 'echo');
    return outputs.map((o) => ({ ...o, ...this.info }));
  }
}
`;
const wrongCount = `
// ES module syntax in a .js file, as users write it
export function handle(data) { return [...data, 'extra']; }
`;
const rawBytes = `
exports.handle = (data, context) => data.map((row, i) => { context.setResponseContentType(i, 'application/octet-stream'); return Buffer.from([1, 2, 3]); });
`;

describe('custom JavaScript handlers in the archive', () => {
  let dir: { path: string; cleanup: () => Promise<void> };
  let app: MarinaApp;

  beforeAll(async () => {
    dir = await tempDir();
    app = await buildApp(testConfig({}, dir.path));
    const echo = await writeModelFolder({
      dir: join(dir.path, 'echo'),
      modelName: 'echo',
      handler: 'echo_handler.mjs',
      modelConfigYaml: 'custom: 42\nbatchSize: 2\n',
      files: { 'echo_handler.mjs': classHandler },
    });
    const wrong = await writeModelFolder({
      dir: join(dir.path, 'wrong'),
      modelName: 'wrong',
      handler: 'wrong_handler',
      files: { 'wrong_handler.js': wrongCount },
    });
    const raw = await writeModelFolder({
      dir: join(dir.path, 'raw'),
      modelName: 'raw',
      handler: 'raw_handler.cjs:handle',
      files: { 'raw_handler.cjs': rawBytes },
    });
    for (const [url, archivePath] of [
      ['echo', echo],
      ['wrong', wrong],
      ['raw', raw],
    ] as const)
      await app.registry.register({ url, archivePath, synchronous: true });
  });

  afterAll(async () => {
    await app?.close();
    await dir?.cleanup();
  });

  it('runs initialize once and preprocess → inference → postprocess with the TorchServe context', async () => {
    const res = await app.inference.inject({
      method: 'POST',
      url: '/predictions/echo',
      payload: 'hello',
      headers: { 'content-type': 'text/plain' },
    });
    expect(res.statusCode).toBe(201);
    expect(res.headers['x-handler']).toBe('echo');
    expect(res.json()).toEqual({
      upper: 'HELLO',
      model: 'echo',
      batchSize: 2,
      hasManifest: true,
      modelDir: join(dir.path, 'echo'),
      yaml: 42,
    });
  });

  it('fails every request of the batch when the handler returns the wrong number of results', async () => {
    const res = await app.inference.inject({ method: 'POST', url: '/predictions/wrong', payload: 'x' });
    expect(res.statusCode).toBe(503);
    expect(res.json().marinaCode).toBe('MARINA_ERR_HANDLER_RESULT_COUNT');
    expect(res.json().message).toContain('number of batch response mismatched');
    expect(res.json().message).toContain('returned 2 results for a batch of 1');
  });

  it('sends Buffers raw with the content type the handler set (file.cjs:fn form)', async () => {
    const res = await app.inference.inject({ method: 'POST', url: '/predictions/raw', payload: 'x' });
    expect(res.statusCode).toBe(200);
    expect(res.headers['content-type']).toBe('application/octet-stream');
    expect([...res.rawPayload]).toEqual([1, 2, 3]);
  });

  it('refuses to register an archive whose handler file is missing, naming the handler', async () => {
    const missing = await writeModelFolder({
      dir: join(dir.path, 'missing'),
      modelName: 'missing',
      handler: 'nowhere.js',
    });
    await expect(
      app.registry.register({ url: 'missing', archivePath: missing, synchronous: true }),
    ).rejects.toMatchObject({
      code: 'MARINA_ERR_WORKER_START_FAILED',
      message: expect.stringContaining("handler 'nowhere.js'"),
    });
    expect(() => app.registry.describe('missing')).toThrow(/Model not found/);
  });
});
