/**
 * KServe ModelMesh's model-runtime SPI (mmesh.ModelRuntime) through a real grpc-js client built
 * from the repository's copy of model-runtime.proto, against a real server: loadModel of a .mar, of
 * an extracted archive folder and of a bare .onnx (each in the /models/<modelId>/ layout ModelMesh's
 * storage helper leaves), runtimeStatus' capacity and methods, modelSize, predictModelSize, then
 * inference by modelId over the Open Inference Protocol (gRPC and REST), and unloadModel.
 */
import { createServer } from 'node:net';
import { mkdir, symlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { packArchive } from '@marina/archive';
import { writeTinyTensorModel } from '@marina/model-zoo';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp, type MarinaApp } from '../src/app.ts';
import { configFromProperties } from '../src/config/load-config.ts';
import type { ServerConfig } from '../src/config/server-config.ts';
import { startGrpcServers, type GrpcServers } from '../src/protocols/grpc-server.ts';
import {
  startModelMeshRuntime,
  type ModelMeshRuntimeServer,
} from '../src/protocols/modelmesh/modelmesh-runtime-server.ts';
import { createServerPlugins } from '../src/server-plugins.ts';
import { tempDir, writeModelFolder } from './helpers.ts';
import { clientPackage, grpcClient, grpcErrorOf, unaryCall } from './oip-harness.ts';

const BUDGET_BYTES = 1024 ** 3;

let dir: Awaited<ReturnType<typeof tempDir>>;
let store: string;
let config: ServerConfig;
let app: MarinaApp;
let grpcServers: GrpcServers;
let modelMesh: ModelMeshRuntimeServer;
let runtime: ReturnType<typeof grpcClient>;
let oip: ReturnType<typeof grpcClient>;
let rest: string;

beforeAll(async () => {
  dir = await tempDir('marina-modelmesh-');
  store = join(dir.path, 'models');
  // /models/<modelId>/ as ModelMesh's storage helper leaves it: one .mar, an extracted archive, one .onnx.
  for (const folder of ['src', 'outside', 'models/mm-onnx', 'models/two-models'])
    await mkdir(join(dir.path, folder), { recursive: true });
  await writeTinyTensorModel({ outputPath: join(dir.path, 'src', 'model.onnx') });
  await packArchive({
    modelName: 'packed',
    modelVersion: '1.0',
    handler: 'tensor',
    serializedFile: join(dir.path, 'src', 'model.onnx'),
    exportPath: join(store, 'mm-mar'),
    cwd: dir.path,
  });
  await writeModelFolder({
    dir: join(store, 'mm-folder'),
    modelName: 'named-in-manifest',
    handler: 'tensor',
    writeModel: (path) => writeTinyTensorModel({ outputPath: path }),
  });
  await writeTinyTensorModel({ outputPath: join(store, 'mm-onnx', 'model.onnx') });
  await writeTinyTensorModel({ outputPath: join(dir.path, 'outside', 'model.onnx') });
  await writeTinyTensorModel({ outputPath: join(store, 'two-models', 'a.onnx') });
  await writeTinyTensorModel({ outputPath: join(store, 'two-models', 'b.onnx') });
  await writeFile(join(store, 'not-a-model.onnx.txt'), 'text');
  await symlink(join(dir.path, 'outside'), join(store, 'mm-link'));

  config = {
    ...configFromProperties(
      {
        inference_address: 'http://127.0.0.1:0',
        management_address: 'http://127.0.0.1:0',
        grpc_inference_port: '0',
        grpc_management_port: '0',
        modelmesh_runtime_port: '0',
        enable_metrics_api: 'false',
        disable_token_authorization: 'true',
        model_store: store,
        allowed_urls: `file://${store}/.*`,
        model_memory_budget: String(BUDGET_BYTES),
      },
      { cwd: dir.path, env: {} },
    ),
    extractionCacheDir: join(dir.path, 'cache'),
  };
  app = await buildApp(config, { plugins: await createServerPlugins(config, {}) });
  await app.inference.listen({ host: '127.0.0.1', port: 0 });
  rest = `http://127.0.0.1:${(app.inference.server.address() as { port: number }).port}`;
  grpcServers = await startGrpcServers({
    config,
    grpc: config.grpc!,
    dataPlane: app.dataPlane,
    management: app.management,
    tokens: undefined,
  });
  modelMesh = await startModelMeshRuntime({
    registry: app.registry,
    config,
    address: config.modelMeshRuntime!,
  });
  runtime = grpcClient(clientPackage('model-runtime.proto'), 'mmesh.ModelRuntime', modelMesh.url);
  oip = grpcClient(clientPackage('grpc_predict_v2.proto'), 'inference.GRPCInferenceService', grpcServers.inferenceUrl);
}, 60_000);

afterAll(async () => {
  runtime?.close();
  oip?.close();
  const closed = app?.close();
  await Promise.all([grpcServers?.close({ drained: closed }), modelMesh?.close({ drained: closed }), closed]);
  await dir?.cleanup();
});

const spi = <T = any>(method: string, request: unknown) => unaryCall<T>(runtime, method, request);
const modelKey = JSON.stringify({ model_type: { name: 'onnx', version: '1' } });
const load = (modelId: string, modelPath: string) =>
  spi<{ sizeInBytes: string }>('loadModel', { modelId, modelType: 'onnx', modelPath, modelKey });

/** The tiny tensor model answers input·2 + 1; one row through ModelInfer by the model's id. */
async function inferByGrpc(modelId: string): Promise<number[]> {
  const answer = await unaryCall<{ outputs: Array<{ name: string; contents: { fp32_contents: number[] } }> }>(
    oip,
    'ModelInfer',
    {
      model_name: modelId,
      inputs: [{ name: 'input', datatype: 'FP32', shape: [1, 4], contents: { fp32_contents: [1, 2, 3, 4] } }],
    },
  );
  return answer.outputs[0]!.contents.fp32_contents;
}

describe('ModelMesh model-runtime SPI', () => {
  it('reports READY with the budget as capacity and the OIP methods ModelMesh may forward with the id injected', async () => {
    const status = await spi('runtimeStatus', {});
    expect(status.status).toBe('READY');
    expect(Number(status.capacityInBytes)).toBe(BUDGET_BYTES);
    expect(Number(status.defaultModelSizeInBytes)).toBeGreaterThan(0);
    expect(status.modelLoadingTimeoutMs).toBe(2 * config.defaultStartupTimeoutSec * 1000);
    expect(status.maxLoadingConcurrency).toBeGreaterThanOrEqual(1);
    expect(status.limitModelConcurrency).toBe(false);
    expect(status.allowAnyMethod).toBe(false);
    expect(status.methodInfos['inference.GRPCInferenceService/ModelInfer']).toEqual({ idInjectionPath: [1] });
    expect(status.methodInfos['inference.GRPCInferenceService/ModelMetadata']).toEqual({ idInjectionPath: [1] });
  });

  it('predicts a size from disk without loading anything', async () => {
    const predicted = await spi('predictModelSize', {
      modelId: 'mm-predicted',
      modelType: 'onnx',
      modelPath: join(store, 'mm-onnx'),
      modelKey,
    });
    expect(Number(predicted.sizeInBytes)).toBeGreaterThan(0);
    expect(app.registry.list().map((m) => m.modelName)).not.toContain('mm-predicted');
  });

  it('loads a .mar, an extracted archive folder and a bare .onnx under their modelIds, each resident and served over OIP', async () => {
    const cases = [
      ['mm-mar', join(store, 'mm-mar')],
      ['mm-folder', join(store, 'mm-folder')],
      ['mm-onnx', join(store, 'mm-onnx')],
      ['mm-onnx-file', join(store, 'mm-onnx', 'model.onnx')],
    ] as const;
    for (const [modelId, modelPath] of cases) {
      const loaded = await load(modelId, modelPath);
      const [description] = app.registry.describe(modelId);
      expect(description, modelId).toMatchObject({ modelName: modelId, state: 'resident' });
      // What the load reports is what the registry measured for it.
      expect(Number(loaded.sizeInBytes), modelId).toBe(Math.round(description!.residentBytes ?? 0));
      const sized = await spi<{ sizeInBytes: string }>('modelSize', { modelId });
      expect(Number(sized.sizeInBytes), modelId).toBe(
        Math.round(app.registry.describe(modelId)[0]!.residentBytes ?? 0),
      );
      expect(await inferByGrpc(modelId), modelId).toEqual([3, 5, 7, 9]);
    }
    // The modelId is the name for every protocol: OIP REST too.
    const response = await fetch(`${rest}/v2/models/mm-onnx/infer`, {
      method: 'POST',
      body: JSON.stringify({ inputs: [{ name: 'input', datatype: 'FP32', shape: [1, 4], data: [0, 0, 0, 0] }] }),
    });
    expect(response.status).toBe(200);
    expect(((await response.json()) as { outputs: Array<{ data: number[] }> }).outputs[0]!.data).toEqual([1, 1, 1, 1]);
  });

  it('answers a second loadModel of a resident model with its size, and unloads: the model is gone, a second unload is a no-op', async () => {
    await load('mm-twice', join(store, 'mm-onnx'));
    const again = await load('mm-twice', join(store, 'mm-onnx'));
    expect(Number(again.sizeInBytes)).toBe(Math.round(app.registry.describe('mm-twice')[0]!.residentBytes ?? 0));
    expect(await spi('unloadModel', { modelId: 'mm-twice' })).toEqual({});
    expect(app.registry.list().map((m) => m.modelName)).not.toContain('mm-twice');
    const gone = await grpcErrorOf(unaryCall(oip, 'ModelMetadata', { name: 'mm-twice', version: '' }));
    expect(gone.code).toBe(grpc.status.NOT_FOUND);
    expect(await spi('unloadModel', { modelId: 'mm-twice' })).toEqual({});
    expect(await spi('unloadModel', { modelId: 'never-loaded' })).toEqual({});
    const size = await grpcErrorOf(spi('modelSize', { modelId: 'mm-twice' }));
    expect(size.code).toBe(grpc.status.NOT_FOUND);
  });

  it('shares one load between concurrent loadModel calls, and an unloadModel sent during a load leaves nothing loaded', async () => {
    const [first, second] = await Promise.all([
      load('mm-shared', join(store, 'mm-onnx')),
      load('mm-shared', join(store, 'mm-onnx')),
    ]);
    expect(second).toEqual(first);
    expect(app.registry.list().filter((m) => m.modelName === 'mm-shared')).toHaveLength(1);
    await spi('unloadModel', { modelId: 'mm-shared' });
    // ModelMesh cancels a load and at once sends unloadModel: when that answers, the model must be gone.
    const started = new Promise<void>((resolve) => {
      const onResidency = (e: { modelName: string; state: string }) => {
        if (e.modelName !== 'mm-cancelled' || e.state !== 'loading') return;
        app.registry.events.off('residency', onResidency);
        resolve();
      };
      app.registry.events.on('residency', onResidency);
    });
    const loading = load('mm-cancelled', join(store, 'mm-onnx')).catch((error: unknown) => error);
    await started;
    await spi('unloadModel', { modelId: 'mm-cancelled' });
    expect(app.registry.list().map((m) => m.modelName)).not.toContain('mm-cancelled');
    await loading;
    expect(app.registry.list().map((m) => m.modelName)).not.toContain('mm-cancelled');
  });

  it('refuses paths outside the model store, paths that are not a model, and bad ids, before registering anything', async () => {
    const before = app.registry.list().length;
    const outside = await grpcErrorOf(load('mm-outside', join(dir.path, 'outside', 'model.onnx')));
    expect(outside.code).toBe(grpc.status.FAILED_PRECONDITION);
    expect(outside.metadata.get('marina-error-code')).toEqual(['MARINA_ERR_URL_NOT_ALLOWED']);
    // A link inside the store to a model outside it is judged where it leads, and the answer does not say where.
    const linked = await grpcErrorOf(load('mm-link', join(store, 'mm-link')));
    expect(linked.metadata.get('marina-error-code')).toEqual(['MARINA_ERR_URL_NOT_ALLOWED']);
    expect(linked.details).not.toContain(join(dir.path, 'outside'));
    const escaped = await grpcErrorOf(load('mm-escape', '../outside/model.onnx'));
    expect(escaped.code).toBe(grpc.status.FAILED_PRECONDITION);
    expect(escaped.metadata.get('marina-error-code')).toEqual(['MARINA_ERR_URL_RELATIVE_PATH']);
    const two = await grpcErrorOf(load('mm-two', join(store, 'two-models')));
    expect(two.code).toBe(grpc.status.INVALID_ARGUMENT);
    expect(two.metadata.get('marina-error-code')).toEqual(['MARINA_ERR_MODEL_PATH_INVALID']);
    expect(two.details).not.toMatch(/a\.onnx|b\.onnx/);
    const text = await grpcErrorOf(load('mm-text', join(store, 'not-a-model.onnx.txt')));
    expect(text.metadata.get('marina-error-code')).toEqual(['MARINA_ERR_MODEL_PATH_INVALID']);
    const missing = await grpcErrorOf(load('mm-missing', join(store, 'nothing-here')));
    expect(missing.metadata.get('marina-error-code')).toEqual(['MARINA_ERR_MODEL_FILE_NOT_FOUND']);
    const badId = await grpcErrorOf(load('../bad id', join(store, 'mm-onnx')));
    expect(badId.code).toBe(grpc.status.INVALID_ARGUMENT);
    expect(badId.metadata.get('marina-error-code')).toEqual(['MARINA_ERR_ARCHIVE_MODEL_NAME_INVALID']);
    expect(app.registry.list().length).toBe(before);
  });

  it('purges the models it loaded when runtimeStatus is called again (ModelMesh restarted)', async () => {
    await load('mm-purged', join(store, 'mm-onnx'));
    expect(app.registry.list().map((m) => m.modelName)).toContain('mm-purged');
    expect((await spi('runtimeStatus', {})).status).toBe('READY');
    const names = app.registry.list().map((m) => m.modelName);
    expect(names.filter((name) => name.startsWith('mm-'))).toEqual([]);
  });

  it('is configured with modelmesh_runtime_port (needs model_memory_budget) and warns when off loopback', () => {
    const base = { model_store: store, modelmesh_runtime_port: '8085' };
    expect(() => configFromProperties(base, { cwd: dir.path, env: {} })).toThrow(
      expect.objectContaining({
        code: 'MARINA_ERR_CONFIG_VALUE_INVALID',
        message: expect.stringMatching(/model_memory_budget/),
      }),
    );
    const exposed = configFromProperties(
      { ...base, model_memory_budget: '1GB', modelmesh_runtime_address: '0.0.0.0' },
      { cwd: dir.path, env: {} },
    );
    expect(exposed.modelMeshRuntime).toEqual({ host: '0.0.0.0', port: 8085 });
    expect(exposed.warnings.join('\n')).toMatch(/ModelMesh model-runtime SPI .* listens on 0\.0\.0\.0/);
    expect(configFromProperties({ model_store: store }, { cwd: dir.path, env: {} }).modelMeshRuntime).toBeUndefined();
  });

  it('fails with MARINA_ERR_ADDRESS_IN_USE when its port is taken', async () => {
    const blocker = createServer();
    await new Promise<void>((resolve) => blocker.listen({ host: '127.0.0.1', port: 0 }, resolve));
    const port = (blocker.address() as { port: number }).port;
    try {
      await expect(
        startModelMeshRuntime({ registry: app.registry, config, address: { host: '127.0.0.1', port } }),
      ).rejects.toMatchObject({ code: 'MARINA_ERR_ADDRESS_IN_USE' });
    } finally {
      await new Promise((resolve) => blocker.close(resolve));
    }
  });
});
