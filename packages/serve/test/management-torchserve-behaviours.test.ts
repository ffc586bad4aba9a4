/**
 * Management behaviours TorchServe's own suites pin down, against a real server: register
 * without initial_workers starts 0 workers (TorchServe's message); runtime is validated; an
 * archive whose handler cannot load registers when no worker is asked for, and a synchronous
 * scale of it answers 500 "Failed to start workers"; a synchronous scale also waits for workers
 * an earlier asynchronous call is still starting; file:// archives are copied into the model
 * store; a model folder registers by absolute path.
 */
import { access, mkdir, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServer, type RunningServer } from '../src/start-server.ts';
import { writeModelFolder } from './helpers.ts';
import { call, createWorkspace, opsConfig, packModel, type Workspace } from './ops-harness.ts';

let workspace: Workspace;
let server: RunningServer;
let api: string;
let outside: string;

beforeAll(async () => {
  workspace = await createWorkspace('marina-management-ts-');
  await packModel(workspace.store, { modelName: 'affine' });
  await packModel(workspace.store, { modelName: 'second' });
  await packModel(workspace.store, { modelName: 'configured', modelConfigYaml: 'minWorkers: 1\n' });
  outside = join(workspace.root, 'elsewhere');
  await mkdir(outside);
  await packModel(outside, { modelName: 'copied' });
  await writeModelFolder({
    dir: join(workspace.store, 'broken'),
    modelName: 'broken',
    handler: 'broken_handler.mjs',
    files: { 'broken_handler.mjs': 'throw new Error("this handler cannot load");\n' },
  });
  await writeModelFolder({
    dir: join(outside, 'folder-model'),
    modelName: 'folder-model',
    handler: 'h.mjs',
    files: { 'h.mjs': 'export function handle(data) { return data.map(() => ({ ok: true })); }\n' },
  });
  server = await startServer({ ...opsConfig(workspace), logDir: join(workspace.root, 'logs') });
  api = server.listening.find((l) => l.api === 'management')!.url;
}, 60_000);
afterAll(async () => {
  await server?.close();
  await workspace?.cleanup();
});

// Real workers start in these tests: allow well over the default 5 s on a shared machine.
describe('register', { timeout: 60_000 }, () => {
  it("starts 0 workers without initial_workers, with TorchServe's message", async () => {
    const result = await call(api, 'POST', '/models?url=affine.mar');
    expect(result.status).toBe(200);
    expect(result.json).toEqual({
      status:
        'Model "affine" Version: 1.0 registered with 0 initial workers. Use scale workers API to add workers for the model.',
    });
    const [described] = (await call(api, 'GET', '/models/affine')).json;
    expect(described.workers).toEqual([]);
    expect(described.minWorkers).toBe(0);
  });

  it("lets model-config.yaml's minWorkers apply when initial_workers is not given (the documented precedence)", async () => {
    const result = await call(api, 'POST', '/models?url=configured.mar');
    expect(result.status).toBe(200);
    expect(result.json).toEqual({ status: 'Model "configured" Version: 1.0 registered with 1 initial workers' });
    expect((await call(api, 'DELETE', '/models/configured')).status).toBe(200);
  });

  it("validates runtime with TorchServe's message", async () => {
    const result = await call(api, 'POST', '/models?url=second.mar&runtime=InvalidRuntime');
    expect(result.status).toBe(400);
    expect(result.json).toMatchObject({ code: 400, type: 'BadRequestException' });
    expect(result.json.message).toMatch(/^Invalid RuntimeType value: InvalidRuntime/);
  });

  it('answers an empty url= with 404 and a missing url with 400, as TorchServe', async () => {
    const empty = await call(api, 'POST', '/models?url=&model_name=x');
    expect(empty.status).toBe(404);
    expect(empty.json).toMatchObject({
      code: 404,
      type: 'ModelNotFoundException',
      marinaCode: 'MARINA_ERR_MODEL_FILE_NOT_FOUND',
    });
    expect(empty.json.message).toMatch(/^Model not found at: /);
    const missing = await call(api, 'POST', '/models?model_name=x');
    expect(missing.status).toBe(400);
    expect(missing.json).toMatchObject({
      code: 400,
      type: 'BadRequestException',
      message: 'Parameter url is required.',
    });
  });

  it('reads synchronous as TorchServe (only "true", any case, waits): other values are asynchronous, not errors', async () => {
    expect((await call(api, 'POST', '/models?url=second.mar&synchronous=-1')).status).toBe(200);
    const scaled = await call(api, 'PUT', '/models/second?min_worker=0&synchronous=Nan');
    expect(scaled.status).toBe(202);
    expect(scaled.json).toEqual({ status: 'Processing worker updates...' });
    const waited = await call(api, 'PUT', '/models/second?min_worker=0&synchronous=TRUE');
    expect(waited.status).toBe(200);
    expect(waited.json.status).toMatch(/^Workers scaled to 0 for model: second/);
    expect((await call(api, 'DELETE', '/models/second?synchronous=nan')).status).toBe(200);
  });

  it('registers an archive whose handler cannot load when no worker is asked for; a synchronous scale answers 500 "Failed to start workers"', async () => {
    expect((await call(api, 'POST', '/models?url=broken')).status).toBe(200);
    const scaled = await call(api, 'PUT', '/models/broken?min_worker=1&synchronous=true');
    expect(scaled.status).toBe(500);
    expect(scaled.json).toMatchObject({
      code: 500,
      type: 'InternalServerException',
      marinaCode: 'MARINA_ERR_WORKER_START_FAILED',
    });
    expect(scaled.json.message).toMatch(/^Failed to start workers/);
    expect(scaled.json.message).toContain('this handler cannot load');
    expect((await call(api, 'DELETE', '/models/broken')).status).toBe(200);
  });

  it('makes a synchronous scale wait for workers an earlier asynchronous call is still starting', async () => {
    expect((await call(api, 'POST', '/models?url=second.mar')).status).toBe(200);
    expect((await call(api, 'PUT', '/models/second?min_worker=1')).status).toBe(202);
    const synchronous = await call(api, 'PUT', '/models/second?min_worker=1&synchronous=true');
    expect(synchronous.status).toBe(200);
    expect(synchronous.json).toEqual({ status: 'Workers scaled to 1 for model: second' });
    const [described] = (await call(api, 'GET', '/models/second')).json;
    expect(described.workers.map((w: { status: string }) => w.status)).toEqual(['READY']);
  });

  it('copies a file:// archive into the model store, and removes the copy on unregister', async () => {
    const url = pathToFileURL(join(outside, 'copied.mar')).href;
    const result = await call(api, 'POST', `/models?url=${encodeURIComponent(url)}&initial_workers=1&synchronous=true`);
    expect(result.status).toBe(200);
    expect(await readdir(workspace.store)).toContain('copied.mar');
    expect(
      (
        await call(api, 'POST', '/predictions/copied', {
          body: { inputs: { input: { shape: [1, 4], data: [0, 0, 0, 0] } } },
        })
      ).status,
    ).toBe(200);
    expect((await call(api, 'DELETE', '/models/copied')).status).toBe(200);
    expect(await readdir(workspace.store)).not.toContain('copied.mar');
    await access(join(outside, 'copied.mar'));
  });

  it('registers a model folder given by absolute path', async () => {
    const folder = join(outside, 'folder-model');
    const result = await call(
      api,
      'POST',
      `/models?url=${encodeURIComponent(folder)}&initial_workers=1&synchronous=true`,
    );
    expect(result.status).toBe(200);
    expect((await call(api, 'POST', '/predictions/folder-model', { body: {} })).json).toEqual({ ok: true });
  });
});
