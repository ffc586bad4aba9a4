/**
 * The APIs that move models in and out of memory, over real HTTP and gRPC on loopback with token
 * authorization on: TorchServe's register with initial_workers=0 (registered, not loaded), the pin
 * on PUT /models/{name}, and the Open Inference Protocol's model repository extension (index with
 * its `ready` filter, load, unload) as Triton and KServe serve it, with the management key.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { writeTinyTensorModel } from '@marina/model-zoo';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp, type MarinaApp } from '../src/app.ts';
import { configFromProperties } from '../src/config/load-config.ts';
import { startGrpcServers, type GrpcServers } from '../src/protocols/grpc-server.ts';
import { createServerPlugins, type OperatorContext } from '../src/server-plugins.ts';
import { tempDir, writeModelFolder } from './helpers.ts';
import { clientPackage, grpcClient, grpcErrorOf, unaryCall } from './oip-harness.ts';

let dir: Awaited<ReturnType<typeof tempDir>>;
let app: MarinaApp;
let grpcServers: GrpcServers;
let oip: ReturnType<typeof grpcClient>;
let inference: string;
let management: string;
let keys: { inference: string; management: string };

beforeAll(async () => {
  dir = await tempDir('marina-repository-');
  const store = join(dir.path, 'store');
  for (const name of ['alpha', 'beta'])
    await writeModelFolder({
      dir: join(store, name),
      modelName: name,
      handler: 'tensor',
      writeModel: (path) => writeTinyTensorModel({ outputPath: path }),
    });
  const config = {
    ...configFromProperties(
      {
        inference_address: 'http://127.0.0.1:0',
        // Another host name than the inference address: two listeners (both bound to 127.0.0.1 below), as by default.
        management_address: 'http://localhost:0',
        grpc_inference_port: '0',
        grpc_management_port: '0',
        enable_metrics_api: 'false',
        enable_model_api: 'true',
        model_store: store,
        allowed_urls: 'file:///nowhere/.*',
      },
      { cwd: dir.path, env: {} },
    ),
    extractionCacheDir: join(dir.path, 'cache'),
  };
  const operator: OperatorContext = {};
  app = await buildApp(config, { plugins: await createServerPlugins(config, operator) });
  await app.inference.listen({ host: '127.0.0.1', port: 0 });
  await app.management.listen({ host: '127.0.0.1', port: 0 });
  const portOf = (i: typeof app.inference) => (i.server.address() as { port: number }).port;
  inference = `http://127.0.0.1:${portOf(app.inference)}`;
  management = `http://127.0.0.1:${portOf(app.management)}`;
  const keyFile = JSON.parse(await readFile(config.keyFilePath, 'utf8')) as {
    inference: { key: string };
    management: { key: string };
  };
  keys = { inference: keyFile.inference.key, management: keyFile.management.key };
  grpcServers = await startGrpcServers({
    config,
    grpc: config.grpc!,
    dataPlane: app.dataPlane,
    management: app.management,
    tokens: operator.tokens,
  });
  oip = grpcClient(clientPackage('grpc_predict_v2.proto'), 'inference.GRPCInferenceService', grpcServers.inferenceUrl);
}, 60_000);

afterAll(async () => {
  oip?.close();
  const closed = app?.close();
  await Promise.all([grpcServers?.close({ drained: closed }), closed]);
  await dir?.cleanup();
});

const post = (url: string, key: string | undefined, body?: unknown) =>
  fetch(url, {
    method: 'POST',
    headers: key ? { authorization: `Bearer ${key}` } : {},
    ...(body === undefined ? {} : { body: typeof body === 'string' ? body : JSON.stringify(body) }),
  });
const index = async (body?: unknown) => {
  const response = await post(`${inference}/v2/repository/index`, keys.management, body);
  expect(response.status).toBe(200);
  return (await response.json()) as Array<{ name: string; version: string; state: string; reason: string }>;
};
const stateOf = (name: string) => app.registry.describe(name)[0]?.state;

describe('register with initial_workers=0 and the pin', () => {
  it("registers without loading, as TorchServe's initial_workers=0: no worker, state registered", async () => {
    const response = await fetch(`${management}/models?url=alpha&initial_workers=0`, {
      method: 'POST',
      headers: { authorization: `Bearer ${keys.management}` },
    });
    expect(response.status).toBe(200);
    expect(((await response.json()) as { status: string }).status).toBe(
      'Model "alpha" Version: 1.0 registered with 0 initial workers. Use scale workers API to add workers for the model.',
    );
    const [alpha] = app.registry.describe('alpha');
    expect(alpha).toMatchObject({ state: 'registered', residentBytes: 0, pinned: false, workers: [] });
    const loaded = await fetch(`${management}/models?url=beta&initial_workers=1`, {
      method: 'POST',
      headers: { authorization: `Bearer ${keys.management}` },
    });
    expect(loaded.status).toBe(200);
    expect(stateOf('beta')).toBe('resident');
  });

  it('pins with PUT /models/{name}?pinned=true (loading it, workers untouched) and unpins with pinned=false', async () => {
    const put = (query: string) =>
      fetch(`${management}/models/alpha?${query}`, {
        method: 'PUT',
        headers: { authorization: `Bearer ${keys.management}` },
      });
    const minWorkers = app.registry.describe('alpha')[0]!.minWorkers;
    const pinned = await put('pinned=true');
    expect(pinned.status).toBe(200);
    expect(((await pinned.json()) as { status: string }).status).toMatch(/^Model "alpha" Version: 1.0 pinned/);
    expect(app.registry.describe('alpha')[0]).toMatchObject({ pinned: true, state: 'resident', minWorkers });
    const unpinned = await put('pinned=false');
    expect(unpinned.status).toBe(200);
    expect(app.registry.describe('alpha')[0]).toMatchObject({ pinned: false, minWorkers });
    const bad = await put('pinned=maybe');
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as { marinaCode: string }).marinaCode).toBe('MARINA_ERR_BAD_REQUEST');
  });
});

describe('OIP model repository extension (REST)', () => {
  it('unloads and loads a model: state, index entries and their ready filter follow, and a loaded model answers', async () => {
    const unloaded = await post(`${inference}/v2/repository/models/alpha/unload`, keys.management);
    expect(unloaded.status).toBe(200);
    expect(await unloaded.json()).toEqual({ name: 'alpha', unload: true });
    expect(stateOf('alpha')).toBe('registered');
    expect(await index()).toEqual([
      {
        name: 'alpha',
        version: '1.0',
        state: 'UNAVAILABLE',
        reason: expect.stringContaining('unloaded'),
      },
      { name: 'beta', version: '1.0', state: 'READY', reason: '' },
    ]);
    expect((await index({ ready: true })).map((e) => e.name)).toEqual(['beta']);

    const loaded = await post(`${inference}/v2/repository/models/alpha/load`, keys.management, {});
    expect(loaded.status).toBe(200);
    expect(await loaded.json()).toEqual({ name: 'alpha', load: true });
    expect(stateOf('alpha')).toBe('resident');
    expect((await index({ ready: true })).map((e) => e.name)).toEqual(['alpha', 'beta']);
    const inferred = await fetch(`${inference}/v2/models/alpha/infer`, {
      method: 'POST',
      headers: { authorization: `Bearer ${keys.inference}` },
      body: JSON.stringify({ inputs: [{ name: 'input', datatype: 'FP32', shape: [1, 4], data: [1, 2, 3, 4] }] }),
    });
    expect(inferred.status).toBe(200);
    expect(((await inferred.json()) as { outputs: Array<{ data: number[] }> }).outputs[0]!.data).toEqual([3, 5, 7, 9]);
    // A second load of a resident model answers at once, as Triton's reload of an unchanged model.
    expect((await post(`${inference}/v2/repository/models/alpha/load`, keys.management)).status).toBe(200);
  });

  it('needs the management key: the inference key and no key are refused', async () => {
    for (const key of [keys.inference, undefined]) {
      const response = await post(`${inference}/v2/repository/index`, key);
      expect(response.status).toBe(401);
      expect(response.headers.get('www-authenticate')).toContain('marina-management');
    }
    expect((await post(`${inference}/v2/repository/models/alpha/unload`, keys.inference)).status).toBe(401);
    expect(stateOf('alpha')).toBe('resident');
  });

  it("answers the protocol's {error} with a stable code: unknown model, bad bodies, unsupported load parameters", async () => {
    const unknown = await post(`${inference}/v2/repository/models/nope/load`, keys.management);
    expect(unknown.status).toBe(404);
    expect(unknown.headers.get('x-marina-error-code')).toBe('MARINA_ERR_MODEL_NOT_FOUND');
    expect(Object.keys((await unknown.json()) as object)).toEqual(['error']);
    const cases: Array<[string, unknown, RegExp]> = [
      ['/v2/repository/index', { ready: 'yes' }, /"ready" must be a boolean/],
      ['/v2/repository/index', '{not json', /not valid JSON/],
      ['/v2/repository/index', [1], /JSON object/],
      ['/v2/repository/models/alpha/load', { parameters: { config: '{}' } }, /parameter "config" is not supported/],
      ['/v2/repository/models/alpha/load', { parameters: { 'file:1/model.py': 'eA==' } }, /is not supported/],
      ['/v2/repository/models/alpha/unload', { parameters: { unload_dependents: 'yes' } }, /must be a boolean/],
      ['/v2/repository/models/alpha/unload', { model: 'x' }, /unknown field "model"/],
    ];
    for (const [path, body, message] of cases) {
      const response = await post(`${inference}${path}`, keys.management, body);
      expect(response.status, path).toBe(400);
      expect(response.headers.get('x-marina-error-code'), path).toBe('MARINA_ERR_BAD_REQUEST');
      expect(((await response.json()) as { error: string }).error, path).toMatch(message);
    }
    expect(stateOf('alpha')).toBe('resident');
    const dependents = await post(`${inference}/v2/repository/models/beta/unload`, keys.management, {
      parameters: { unload_dependents: true },
    });
    expect(dependents.status).toBe(200);
    expect(stateOf('beta')).toBe('registered');
  });
});

describe('OIP model repository extension (gRPC)', () => {
  it("loads and unloads with KServe's RepositoryModelLoad and RepositoryModelUnload", async () => {
    expect(stateOf('beta')).toBe('registered');
    expect(await unaryCall(oip, 'RepositoryModelLoad', { model_name: 'beta' }, keys.management)).toEqual({
      model_name: 'beta',
      isLoaded: true,
    });
    expect(stateOf('beta')).toBe('resident');
    expect(await unaryCall(oip, 'RepositoryModelUnload', { model_name: 'beta' }, keys.management)).toEqual({
      model_name: 'beta',
      isUnloaded: true,
    });
    expect(stateOf('beta')).toBe('registered');
    const denied = await grpcErrorOf(unaryCall(oip, 'RepositoryModelLoad', { model_name: 'beta' }, keys.inference));
    expect(denied.code).toBe(grpc.status.UNAUTHENTICATED);
  });

  it("pins and unpins with Marina's ResidencyAPIsService on the management port", async () => {
    const residency = grpcClient(
      clientPackage('marina_residency.proto'),
      'marina.management.ResidencyAPIsService',
      grpcServers.managementUrl,
    );
    try {
      expect(stateOf('beta')).toBe('registered');
      const pinned = await unaryCall<{ msg: string }>(
        residency,
        'SetPinned',
        { model_name: 'beta', model_version: '1.0', pinned: true },
        keys.management,
      );
      expect((JSON.parse(pinned.msg) as { status: string }).status).toMatch(/^Model "beta" Version: 1.0 pinned/);
      expect(app.registry.describe('beta')[0]).toMatchObject({ pinned: true, state: 'resident' });
      await unaryCall(residency, 'SetPinned', { model_name: 'beta', pinned: false }, keys.management);
      expect(app.registry.describe('beta')[0]!.pinned).toBe(false);
      const unknown = await grpcErrorOf(
        unaryCall(residency, 'SetPinned', { model_name: 'nope', pinned: true }, keys.management),
      );
      expect(unknown.code).toBe(grpc.status.NOT_FOUND);
      const denied = await grpcErrorOf(
        unaryCall(residency, 'SetPinned', { model_name: 'beta', pinned: true }, keys.inference),
      );
      expect(denied.code).toBe(grpc.status.UNAUTHENTICATED);
    } finally {
      residency.close();
    }
  });
});
