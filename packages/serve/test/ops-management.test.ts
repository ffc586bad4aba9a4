/**
 * The management API end to end: a real server from startServer, real .mar archives, real
 * workers, real HTTP. Status codes, messages and JSON shapes as TorchServe's.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  affineInput,
  call,
  createWorkspace,
  opsConfig,
  packModel,
  startOps,
  waitFor,
  type OpsServer,
  type Workspace,
} from './ops-harness.ts';

/** describe's fields, in TorchServe's order (section 4 of the reference). */
const TORCHSERVE_DESCRIBE_KEYS = [
  'modelName',
  'modelVersion',
  'modelUrl',
  'runtime',
  'minWorkers',
  'maxWorkers',
  'batchSize',
  'maxBatchDelay',
  'responseTimeout',
  'startupTimeout',
  'maxRetryTimeoutInSec',
  'clientTimeoutInMills',
  'parallelType',
  'parallelLevel',
  'deviceType',
  'continuousBatching',
  'useJobTicket',
  'useVenv',
  'stateful',
  'sequenceMaxIdleMSec',
  'sequenceTimeoutMSec',
  'maxNumSequence',
  'maxSequenceJobQueueSize',
  'loadedAtStartup',
  'workers',
  'jobQueueStatus',
];

let workspace: Workspace;

beforeAll(async () => {
  workspace = await createWorkspace();
  await packModel(workspace.store, { modelName: 'resnet-152' });
  await packModel(workspace.store, { modelName: 'm', modelVersion: '1.0', fileName: 'm_v1.mar' });
  await packModel(workspace.store, { modelName: 'm', modelVersion: '2.0', fileName: 'm_v2.mar' });
});
afterAll(() => workspace?.cleanup());

describe('management API with the model API on, token auth off', { timeout: 60_000 }, () => {
  let ops: OpsServer;
  beforeAll(async () => {
    ops = await startOps(opsConfig(workspace, { allowed_urls: `file://${workspace.store}/.*` }));
  });
  afterAll(() => ops?.close());

  it('register with initial_workers=1 then PUT min_worker=2 behaves as in TorchServe', async () => {
    const registered = await call(ops.api, 'POST', '/models?url=resnet-152.mar&initial_workers=1&synchronous=true');
    expect(registered.status).toBe(200);
    expect(registered.json).toEqual({ status: 'Model "resnet-152" Version: 1.0 registered with 1 initial workers' });
    expect(registered.text.endsWith('}\n')).toBe(true);

    const scaled = await call(ops.api, 'PUT', '/models/resnet-152?min_worker=2');
    expect(scaled.status).toBe(202);
    expect(scaled.json).toEqual({ status: 'Processing worker updates...' });

    // Settled: exactly two workers, both READY (the first is replaced meanwhile, so the two share the cores).
    await waitFor('two READY workers', async () => {
      const [d] = (await call(ops.api, 'GET', '/models/resnet-152')).json;
      return d.workers.length === 2 && d.workers.every((w: { status: string }) => w.status === 'READY');
    });
    const described = await call(ops.api, 'GET', '/models/resnet-152');
    expect(described.status).toBe(200);
    expect(Array.isArray(described.json)).toBe(true);
    const [d] = described.json;
    expect(Object.keys(d).slice(0, TORCHSERVE_DESCRIBE_KEYS.length)).toEqual(TORCHSERVE_DESCRIBE_KEYS);
    expect(d).toMatchObject({
      modelName: 'resnet-152',
      modelVersion: '1.0',
      modelUrl: 'resnet-152.mar',
      minWorkers: 2,
      maxWorkers: 2,
      batchSize: 1,
      maxBatchDelay: 100,
      deviceType: 'cpu',
    });
    expect(d.workers).toHaveLength(2);
    for (const w of d.workers) {
      expect(w).toMatchObject({ status: 'READY', gpu: false, gpuUsage: 'N/A' });
      expect(w.id).toMatch(/^\d+$/);
      expect(w.startTime).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
    }
    expect(d.jobQueueStatus).toEqual({ remainingCapacity: 100, pendingRequests: 0 });
    expect(d.autoscaling).toMatchObject({
      enabled: false,
      intervalMs: 1000,
      scaleUpQueueDepth: 1,
      scaleUpAfterMs: 3000,
      scaleDownIdleMs: 60_000,
    });

    const predicted = await call(ops.api, 'POST', '/predictions/resnet-152', { body: affineInput([1, 2, 3, 4]) });
    expect(predicted.status).toBe(200);
    expect(predicted.json.outputs.output.data).toEqual([3, 5, 7, 9]);

    const synchronous = await call(ops.api, 'PUT', '/models/resnet-152?min_worker=1&max_worker=1&synchronous=true');
    expect(synchronous.status).toBe(200);
    expect(synchronous.json).toEqual({ status: 'Workers scaled to 1 for model: resnet-152' });
    expect((await call(ops.api, 'GET', '/models/resnet-152')).json[0].workers).toHaveLength(1);
  });

  it("answers 409 for a version registered twice, with TorchServe's message", async () => {
    const again = await call(ops.api, 'POST', '/models?url=resnet-152.mar&initial_workers=0');
    expect(again.status).toBe(409);
    expect(again.json).toMatchObject({
      code: 409,
      type: 'ConflictStatusException',
      marinaCode: 'MARINA_ERR_MODEL_VERSION_CONFLICT',
    });
    expect(again.json.message).toContain('Model version 1.0 is already registered for model resnet-152');
    expect(again.headers.get('connection')).toBe('close');
  });

  it('answers 404 for unknown models, versions and files, and 405 for a wrong method', async () => {
    const unknown = await call(ops.api, 'GET', '/models/nope');
    expect(unknown.status).toBe(404);
    expect(unknown.json).toMatchObject({ code: 404, type: 'ModelNotFoundException' });
    expect(unknown.json.message).toBe('Model not found: nope');
    expect(unknown.json.hint).toMatch(/^registered models: .*resnet-152/);
    const version = await call(ops.api, 'GET', '/models/resnet-152/9.9');
    expect(version.status).toBe(404);
    expect(version.json).toMatchObject({ type: 'ModelVersionNotFoundException' });
    const missing = await call(ops.api, 'POST', '/models?url=missing.mar');
    expect(missing.status).toBe(404);
    expect(missing.json.message).toBe('Model not found at: missing.mar');
    expect((await call(ops.api, 'PUT', '/models/nope?min_worker=1')).status).toBe(404);
    const scaleVersion = await call(ops.api, 'PUT', '/models/resnet-152?min_worker=1&model_version=9.9');
    expect(scaleVersion.status).toBe(404);
    expect(scaleVersion.json.type).toBe('ModelVersionNotFoundException');
    const wrongMethod = await call(ops.api, 'POST', '/models/resnet-152');
    expect(wrongMethod.status).toBe(405);
    expect(wrongMethod.json).toMatchObject({
      code: 405,
      type: 'MethodNotAllowedException',
      message: 'Requested method is not allowed, please refer to API document.',
    });
    expect(wrongMethod.headers.get('allow')).toContain('GET');
    const setDefaultGet = await call(ops.api, 'GET', '/models/resnet-152/1.0/set-default');
    expect(setDefaultGet.status).toBe(405);
    expect(setDefaultGet.headers.get('allow')).toBe('PUT');
    const badRange = await call(ops.api, 'PUT', '/models/resnet-152?min_worker=3&max_worker=1');
    expect(badRange.status).toBe(400);
    expect(badRange.json.message).toBe('max_worker cannot be less than min_worker.');
  });

  it('refuses a URL outside allowed_urls and a relative path with 404', async () => {
    const outside = await call(
      ops.api,
      'POST',
      `/models?url=${encodeURIComponent(pathToFileURL(join(workspace.root, 'elsewhere.mar')).href)}`,
    );
    expect(outside.status).toBe(404);
    expect(outside.json).toMatchObject({ marinaCode: 'MARINA_ERR_URL_NOT_ALLOWED' });
    expect(outside.json.message).toMatch(/^Given URL file:\/\/.*elsewhere\.mar does not match any allowed URL\(s\)$/);
    const remote = await call(ops.api, 'POST', `/models?url=${encodeURIComponent('http://127.0.0.1:1/evil.mar')}`);
    expect(remote.status).toBe(404);
    expect(remote.json.marinaCode).toBe('MARINA_ERR_URL_NOT_ALLOWED');
    const relative = await call(
      ops.api,
      'POST',
      `/models?url=${encodeURIComponent(`file://${workspace.store}/../x.mar`)}`,
    );
    expect(relative.status).toBe(404);
    expect(relative.json.message).toContain('Relative path is not allowed in url');
    const inside = await call(
      ops.api,
      'POST',
      `/models?url=${encodeURIComponent(pathToFileURL(join(workspace.store, 'm_v1.mar')).href)}&model_name=inside&initial_workers=0`,
    );
    expect(inside.status).toBe(200);
    expect((await call(ops.api, 'DELETE', '/models/inside')).status).toBe(200);
  });

  it('keeps versions apart: list shows the default, the default cannot be removed (403) until another is set', async () => {
    expect((await call(ops.api, 'POST', '/models?url=m_v1.mar&initial_workers=1')).status).toBe(200);
    expect((await call(ops.api, 'POST', '/models?url=m_v2.mar&initial_workers=1')).status).toBe(200);
    const list = await call(ops.api, 'GET', '/models');
    expect(list.json).toEqual({
      models: [
        { modelName: 'm', modelUrl: 'm_v1.mar' },
        { modelName: 'resnet-152', modelUrl: 'resnet-152.mar' },
      ],
    });
    const paged = await call(ops.api, 'GET', '/models?limit=1');
    expect(paged.json).toEqual({ nextPageToken: '1', models: [{ modelName: 'm', modelUrl: 'm_v1.mar' }] });

    const removeDefault = await call(ops.api, 'DELETE', '/models/m/1.0');
    expect(removeDefault.status).toBe(403);
    expect(removeDefault.json.message).toContain('Cannot remove default version for model m');

    const setDefault = await call(ops.api, 'PUT', '/models/m/2.0/set-default');
    expect(setDefault.status).toBe(200);
    expect(setDefault.json).toEqual({ status: 'Default version successfully updated for model "m" to "2.0"' });
    expect((await call(ops.api, 'GET', '/models/m')).json[0].modelVersion).toBe('2.0');
    expect((await call(ops.api, 'PUT', '/models/m/7.0/set-default')).status).toBe(404);

    const removed = await call(ops.api, 'DELETE', '/models/m/1.0');
    expect(removed.status).toBe(200);
    expect(removed.json).toEqual({ status: 'Model "m" unregistered' });
    const all = await call(ops.api, 'GET', '/models/m/all');
    expect(all.json.map((d: { modelVersion: string }) => d.modelVersion)).toEqual(['2.0']);
    expect((await call(ops.api, 'POST', '/predictions/m/1.0', { body: affineInput([0, 0, 0, 0]) })).status).toBe(404);
    expect(
      (await call(ops.api, 'POST', '/predictions/m', { body: affineInput([0, 0, 0, 0]) })).json.outputs.output.data,
    ).toEqual([1, 1, 1, 1]);
    expect((await call(ops.api, 'DELETE', '/models/m')).status).toBe(200);
    expect((await call(ops.api, 'GET', '/models/m')).status).toBe(404);
  });

  it('reports KServe readiness', async () => {
    expect((await call(ops.api, 'GET', '/v1/models/resnet-152')).json).toEqual({ name: 'resnet-152', ready: true });
  });
});

describe('management API with the model API off (the default)', { timeout: 30_000 }, () => {
  it('answers 405 to register and unregister but still describes and scales', async () => {
    const ops = await startOps(opsConfig(workspace, { enable_model_api: 'false', load_models: 'resnet-152.mar' }));
    try {
      const register = await call(ops.api, 'POST', '/models?url=m_v1.mar');
      expect(register.status).toBe(405);
      expect(register.json).toMatchObject({
        code: 405,
        type: 'MethodNotAllowedException',
        marinaCode: 'MARINA_ERR_MODEL_API_DISABLED',
      });
      expect((await call(ops.api, 'DELETE', '/models/resnet-152')).status).toBe(405);
      expect((await call(ops.api, 'GET', '/models/resnet-152')).json[0].loadedAtStartup).toBe(true);
      expect((await call(ops.api, 'PUT', '/models/resnet-152?min_worker=1&synchronous=true')).status).toBe(200);
    } finally {
      await ops.close();
    }
  });
});

describe('token authorization on', { timeout: 30_000 }, () => {
  it('needs the management key for /models, the inference key for predictions, none for /ping (probes) and /metrics', async () => {
    const config = opsConfig(workspace, { disable_token_authorization: 'false', load_models: 'resnet-152.mar' });
    const ops = await startOps(config);
    try {
      const keys = JSON.parse(await readFile(config.keyFilePath, 'utf8')) as Record<string, { key: string }>;
      const management = keys.management!.key;
      const inference = keys.inference!.key;

      const anonymous = await call(ops.api, 'GET', '/models');
      expect(anonymous.status).toBe(401);
      expect(anonymous.json).toMatchObject({
        code: 401,
        type: 'InvalidKeyException',
        marinaCode: 'MARINA_ERR_TOKEN_MISSING',
      });
      expect((await call(ops.api, 'GET', '/models', { token: inference })).status).toBe(401);
      expect((await call(ops.api, 'GET', '/models', { token: management })).status).toBe(200);
      expect(
        (await call(ops.api, 'POST', '/models?url=m_v1.mar&initial_workers=0', { token: management })).status,
      ).toBe(200);

      expect((await call(ops.api, 'GET', '/ping')).status).toBe(200);
      expect((await call(ops.api, 'GET', '/ping', { token: inference })).status).toBe(200);
      expect((await call(ops.api, 'POST', '/predictions/resnet-152', { body: affineInput([1, 1, 1, 1]) })).status).toBe(
        401,
      );
      const predicted = await call(ops.api, 'POST', '/predictions/resnet-152', {
        token: inference,
        body: affineInput([1, 1, 1, 1]),
      });
      expect(predicted.status).toBe(200);
      expect(
        (await call(ops.api, 'POST', '/predictions/resnet-152', { token: management, body: affineInput([1, 1, 1, 1]) }))
          .status,
      ).toBe(401);

      expect((await fetch(`${ops.metrics}/metrics`)).status).toBe(200);
    } finally {
      await ops.close();
    }
  });
});
