/**
 * Versions in production, end to end on a real server (startServer: REST, both gRPC listeners,
 * metrics, snapshots): a weighted split within a binomial tolerance the test computes, weight 0,
 * sticky keys on every protocol, the answering version on every protocol, a shadow whose answers
 * never reach clients and whose agreement matches the one computed here from the two versions'
 * direct answers, a blocked shadow that does not hold live requests (shown with a marker file, not
 * timing), weight changes with requests in flight, refusals with their codes, and a restart from
 * the snapshot that brings the policies back.
 */
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { writeTinyClassifier } from '@marina/model-zoo';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readLatestSnapshot } from '../src/snapshot/snapshot-store.ts';
import { cosineAgreement } from '../src/registry/output-agreement.ts';
import { SHADOW_QUEUE_CAPACITY } from '../src/registry/shadow-traffic.ts';
import type { ServerConfig } from '../src/config/server-config.ts';
import { writeModelFolder } from './helpers.ts';
import { clientPackage } from './oip-harness.ts';
import { call, createWorkspace, opsConfig, startOps, waitFor, type OpsServer, type Workspace } from './ops-harness.ts';

const INPUT_SHAPE = [1, 3, 8, 8];
const INPUT_SIZE = 3 * 8 * 8;
const ROUTE_KEY = 'x-marina-route-key';

/** A custom handler answering its version; it waits for the file named in the body's `gateField`, when given. */
function gatedHandler(version: string, gateField: string): string {
  return `
import { existsSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
export async function handle(data) {
  for (const row of data) {
    const body = row.body;
    const gate = body && typeof body === 'object' && !(body instanceof Uint8Array) ? body[${JSON.stringify(gateField)}] : undefined;
    if (gate) while (!existsSync(gate)) await sleep(5);
  }
  return data.map(() => ({ version: ${JSON.stringify(version)} }));
}
`;
}

let workspace: Workspace;
let config: ServerConfig;
let ops: OpsServer;
let grpcInference: string;
let grpcManagement: string;

/** A seeded pseudo-random input (the same seed, the same input). */
function inputOf(seed: number): number[] {
  let x = seed * 7919 + 17;
  return Array.from({ length: INPUT_SIZE }, () => {
    x = (x * 1103515245 + 12345) % 2147483648;
    return x / 2147483648 - 0.5;
  });
}

const torchServeBody = (data: number[]) => ({ inputs: { input: { shape: INPUT_SHAPE, data } } });
const oipBody = (data: number[]) => ({ inputs: [{ name: 'input', shape: INPUT_SHAPE, datatype: 'FP32', data }] });

async function post(
  path: string,
  body: unknown,
  headers: Record<string, string> = {},
): Promise<{ status: number; version: string | null; json: any }> {
  const response = await fetch(`${ops.api}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });
  const text = await response.text();
  return { status: response.status, version: response.headers.get('x-marina-model-version'), json: JSON.parse(text) };
}

/** Output values of a TorchServe-route answer or an OIP answer. */
function outputOf(json: any): number[] {
  return Array.isArray(json.outputs) ? json.outputs[0].data : json.outputs.output.data;
}

type GrpcClient = grpc.Client & Record<string, (...args: unknown[]) => grpc.ClientUnaryCall>;
function client(file: string, service: string, target: string): GrpcClient {
  let node: unknown = clientPackage(file);
  for (const part of service.split('.')) node = (node as Record<string, unknown>)[part];
  const Ctor = node as new (target: string, credentials: grpc.ChannelCredentials) => GrpcClient;
  return new Ctor(target.replace(/^grpc:\/\//, ''), grpc.credentials.createInsecure());
}

/** A unary call with its response metadata (where the answering version is). */
function unary(
  c: GrpcClient,
  method: string,
  request: unknown,
  headers: Record<string, string> = {},
): Promise<{ value: any; version: string | undefined }> {
  const metadata = new grpc.Metadata();
  for (const [k, v] of Object.entries(headers)) metadata.set(k, v);
  return new Promise((resolve, reject) => {
    let version: string | undefined;
    const rpc = c[method]!.call(c, request, metadata, (error: grpc.ServiceError | null, value: unknown) =>
      error ? reject(error) : resolve({ value, version }),
    );
    rpc.on('metadata', (m: grpc.Metadata) => {
      const v = m.get('x-marina-model-version')[0];
      version = v === undefined ? undefined : String(v);
    });
  });
}

async function describeVersion(model: string, version: string): Promise<any> {
  const result = await call(ops.api, 'GET', `/models/${model}/${version}`);
  expect(result.status).toBe(200);
  return result.json[0];
}

async function metric(name: string, labels: Record<string, string>): Promise<number | undefined> {
  const text = await (await fetch(`${ops.metrics}/metrics`)).text();
  for (const line of text.split('\n')) {
    const match = /^([a-z_]+)\{([^}]*)\} (\S+)$/.exec(line);
    if (!match || match[1] !== name) continue;
    const present = Object.entries(labels).every(([k, v]) => match[2]!.split(',').includes(`${k}="${v}"`));
    if (present) return Number(match[3]);
  }
  return undefined;
}

/**
 * The smallest k with P(|X − n·p| > k) ≤ alpha for X ~ Binomial(n, p), from the exact distribution:
 * the observed count may stray this far from n·p, and a correct router fails the test with
 * probability at most alpha.
 */
function binomialTolerance(n: number, p: number, alpha: number): number {
  const logPmf: number[] = [];
  let logC = 0;
  for (let k = 0; k <= n; k++) {
    if (k > 0) logC += Math.log(n - k + 1) - Math.log(k);
    logPmf.push(logC + k * Math.log(p) + (n - k) * Math.log(1 - p));
  }
  const mean = n * p;
  for (let tolerance = 0; tolerance <= n; tolerance++) {
    let outside = 0;
    for (let k = 0; k <= n; k++) if (Math.abs(k - mean) > tolerance) outside += Math.exp(logPmf[k]!);
    if (outside <= alpha) return tolerance;
  }
  return n;
}

/** Runs `tasks` with at most `width` at once. */
async function pool<T>(count: number, width: number, task: (i: number) => Promise<T>): Promise<T[]> {
  const results: T[] = new Array(count);
  let next = 0;
  await Promise.all(
    Array.from({ length: width }, async () => {
      while (next < count) {
        const i = next++;
        results[i] = await task(i);
      }
    }),
  );
  return results;
}

beforeAll(async () => {
  workspace = await createWorkspace('marina-traffic-');
  for (const [version, seed] of [
    ['1.0', 1],
    ['2.0', 2],
    ['3.0', 3],
  ] as const) {
    await writeModelFolder({
      dir: join(workspace.store, `tiny_v${version}`),
      modelName: 'tiny',
      modelVersion: version,
      handler: 'tensor',
      modelConfigYaml: 'minWorkers: 1\nmaxWorkers: 1\n',
      writeModel: (path) => writeTinyClassifier({ outputPath: path, inputSize: 8, seed }),
    });
  }
  for (const version of ['1.0', '2.0'])
    await writeModelFolder({
      dir: join(workspace.store, `gated_v${version}`),
      modelName: 'gated',
      modelVersion: version,
      handler: 'gated.mjs',
      modelConfigYaml: 'minWorkers: 1\nmaxWorkers: 1\n',
      files: { 'gated.mjs': gatedHandler(version, version === '1.0' ? 'liveGate' : 'shadowGate') },
    });
  config = opsConfig(
    workspace,
    {
      load_models: 'all',
      // The CI machine is shared and its CPU contended: the pressure gate would shed every copy
      // here (test/shadow-traffic.test.ts covers it); this file tests everything else the shadow does.
      shadow_max_cpu_pressure: '100',
      // The models JSON's policy for `gated`: every live request to 1.0, a copy of each to 2.0.
      models: JSON.stringify({
        gated: { $traffic: { weights: { '1.0': 100 }, shadow: { version: '2.0', percent: 100 } } },
      }),
    },
    { isSnapshotEnabled: true },
  );
  ops = await startOps(config);
  expect(ops.server.failed).toEqual([]);
  grpcInference = ops.server.listening.find((l) => l.api === 'grpc-inference')!.url;
  grpcManagement = ops.server.listening.find((l) => l.api === 'grpc-management')!.url;
}, 120_000);

afterAll(async () => {
  await ops?.close();
  await workspace?.cleanup();
});

describe('traffic policies', () => {
  /** The answer of each version, asked for by name, to `inputOf(0)`. */
  const direct = new Map<string, number[]>();

  it('splits unversioned requests by weight within the binomial tolerance; weight 0 gets only requests that name it', async () => {
    for (const version of ['1.0', '2.0', '3.0']) {
      const r = await post(`/predictions/tiny/${version}`, torchServeBody(inputOf(0)));
      expect(r.status).toBe(200);
      expect(r.version).toBe(version);
      direct.set(version, outputOf(r.json));
    }
    // Different seeds: the versions answer differently, so a body tells which version made it.
    expect(direct.get('1.0')).not.toEqual(direct.get('2.0'));
    expect(direct.get('1.0')).not.toEqual(direct.get('3.0'));

    const put = await call(ops.api, 'PUT', '/models/tiny/traffic', {
      body: { weights: { '1.0': 70, '2.0': 30, '3.0': 0 } },
    });
    expect(put.status).toBe(200);
    expect(put.json.weights).toEqual({ '1.0': 70, '2.0': 30, '3.0': 0 });

    const n = 300;
    const answers = await pool(n, 6, () => post('/predictions/tiny', torchServeBody(inputOf(0))));
    const counts = new Map<string, number>();
    for (const a of answers) {
      expect(a.status).toBe(200);
      // The header is the version whose answer the body is.
      expect(outputOf(a.json)).toEqual(direct.get(a.version!));
      counts.set(a.version!, (counts.get(a.version!) ?? 0) + 1);
    }
    expect(counts.get('3.0')).toBeUndefined();
    const tolerance = binomialTolerance(n, 0.7, 1e-6);
    expect(tolerance).toBeGreaterThan(0);
    expect(Math.abs((counts.get('1.0') ?? 0) - n * 0.7)).toBeLessThanOrEqual(tolerance);
    expect((counts.get('1.0') ?? 0) + (counts.get('2.0') ?? 0)).toBe(n);

    // The split per version is what a dashboard reads.
    expect(await metric('marina_traffic_weight', { model_name: 'tiny', model_version: '2.0' })).toBe(30);
    const d = await describeVersion('tiny', '2.0');
    expect(d.traffic.weight).toBe(30);
  });

  it('sends a sticky key to one version on every request and every protocol, and every protocol says which', async () => {
    const put = await call(ops.api, 'PUT', '/models/tiny/traffic', {
      body: { weights: { '1.0': 50, '2.0': 50 }, stickyHeader: 'X-Marina-Route-Key' },
    });
    expect(put.status).toBe(200);
    expect(put.json.stickyHeader).toBe(ROUTE_KEY);
    const oipGrpc = client('grpc_predict_v2.proto', 'inference.GRPCInferenceService', grpcInference);
    const tsGrpc = client('inference.proto', 'org.pytorch.serve.grpc.inference.InferenceAPIsService', grpcInference);
    try {
      const seen = new Set<string>();
      for (let key = 0; key < 16; key++) {
        const headers = { [ROUTE_KEY]: `user-${key}` };
        const versions: Array<string | undefined> = [];
        for (let repeat = 0; repeat < 2; repeat++) {
          const rest = await post('/predictions/tiny', torchServeBody(inputOf(0)), headers);
          versions.push(rest.version!);
          expect(outputOf(rest.json)).toEqual(direct.get(rest.version!));
          const oip = await post('/v2/models/tiny/infer', oipBody(inputOf(0)), headers);
          expect(oip.json.model_version).toBe(oip.version);
          versions.push(oip.version!);
          const g = await unary(
            oipGrpc,
            'ModelInfer',
            {
              model_name: 'tiny',
              inputs: [
                { name: 'input', datatype: 'FP32', shape: INPUT_SHAPE, contents: { fp32_contents: inputOf(0) } },
              ],
            },
            headers,
          );
          expect(g.value.model_version).toBe(g.version);
          versions.push(g.version);
          const t = await unary(
            tsGrpc,
            'Predictions',
            { model_name: 'tiny', input: { data: Buffer.from(JSON.stringify(torchServeBody(inputOf(0)))) } },
            headers,
          );
          expect(outputOf(JSON.parse(Buffer.from(t.value.prediction).toString('utf8')))).toEqual(
            direct.get(t.version!),
          );
          versions.push(t.version);
        }
        expect(new Set(versions).size, `key user-${key}: ${versions.join(' ')}`).toBe(1);
        seen.add(versions[0]!);
      }
      // 16 keys over 50/50 all on one version would have probability 2·2^-16.
      expect(seen).toEqual(new Set(['1.0', '2.0']));
      // A request that names a version goes to it, whatever its key.
      const named = await post('/predictions/tiny/3.0', torchServeBody(inputOf(0)), { [ROUTE_KEY]: 'user-0' });
      expect(named.version).toBe('3.0');
    } finally {
      oipGrpc.close();
      tsGrpc.close();
    }
  });

  it("shadows live requests, keeps the shadow's answers from clients, and measures the agreement the test computes", async () => {
    const k = 12;
    const inputs = Array.from({ length: k }, (_, i) => inputOf(100 + i));
    let expectedSum = 0;
    for (const data of inputs) {
      const one = await post('/v2/models/tiny/versions/1.0/infer', oipBody(data));
      const two = await post('/v2/models/tiny/versions/2.0/infer', oipBody(data));
      expectedSum += cosineAgreement(outputOf(one.json), outputOf(two.json));
    }
    const expected = expectedSum / k;
    const liveCountOf2 = await metric('marina_requests_total', {
      model_name: 'tiny',
      model_version: '2.0',
      status_code: '200',
    });

    const put = await call(ops.api, 'PUT', '/models/tiny/traffic', {
      body: { weights: { '1.0': 100 }, shadow: { version: '2.0' } },
    });
    expect(put.json.shadow).toEqual({ version: '2.0', percent: 100 });
    for (const data of inputs) {
      const live = await post('/v2/models/tiny/infer', oipBody(data));
      expect(live.version).toBe('1.0');
      expect(live.json.model_version).toBe('1.0');
    }
    await waitFor('every shadow copy answered', async () => {
      const d = await describeVersion('tiny', '2.0');
      return d.traffic.shadow.requests + d.traffic.shadow.dropped === k;
    });
    const shadow = (await describeVersion('tiny', '2.0')).traffic.shadow;
    expect(shadow).toMatchObject({ percent: 100, requests: k, failed: 0, dropped: 0, compared: k, method: 'cosine' });
    expect(shadow.agreement).toBeCloseTo(expected, 9);
    expect(expected).toBeLessThan(1);
    expect(await metric('marina_shadow_agreement', { model_name: 'tiny', model_version: '2.0' })).toBeCloseTo(
      expected,
      9,
    );
    expect(
      await metric('marina_shadow_requests_total', { model_name: 'tiny', model_version: '2.0', result: 'ok' }),
    ).toBe(k);
    // Copies are not live requests: 2.0's live count did not move.
    expect(
      await metric('marina_requests_total', { model_name: 'tiny', model_version: '2.0', status_code: '200' }),
    ).toBe(liveCountOf2);
  });

  it('answers live requests while the shadow is blocked, and sheds the copies that do not fit', async () => {
    // The models JSON's policy is in force from the start.
    expect((await call(ops.api, 'GET', '/models/gated/traffic')).json).toEqual({
      weights: { '1.0': 100 },
      shadow: { version: '2.0', percent: 100 },
    });
    const marker = join(workspace.root, 'shadow-may-finish');
    const body = { shadowGate: marker };
    const first = await post('/predictions/gated', body);
    expect(first).toMatchObject({ status: 200, version: '1.0', json: { version: '1.0' } });
    await waitFor('the first copy running in the shadow', async () => {
      const d = await describeVersion('gated', '2.0');
      return d.workers[0].status === 'BUSY';
    });
    const live = 20;
    const answers = await pool(live, 4, () => post('/predictions/gated', body));
    // Every live request was answered by 1.0 while the shadow still waits for its marker.
    for (const a of answers) expect(a).toMatchObject({ status: 200, version: '1.0', json: { version: '1.0' } });
    let d = await describeVersion('gated', '2.0');
    expect(d.workers[0].status).toBe('BUSY');
    expect(d.traffic.shadow.requests).toBe(0);
    await waitFor('every copy queued or dropped', async () => {
      const s = (await describeVersion('gated', '2.0')).traffic.shadow;
      return s.dropped >= live - SHADOW_QUEUE_CAPACITY;
    });
    await writeFile(marker, 'go');
    await waitFor('the queued copies run', async () => {
      const s = (await describeVersion('gated', '2.0')).traffic.shadow;
      return s.requests + s.dropped === live + 1;
    });
    d = await describeVersion('gated', '2.0');
    expect(d.traffic.shadow.dropped).toBeGreaterThanOrEqual(live - SHADOW_QUEUE_CAPACITY);
    expect(d.traffic.shadow.failed).toBe(0);
    // A custom handler's answers are not compared.
    expect(d.traffic.shadow.compared).toBe(0);
    expect(await metric('marina_shadow_dropped_total', { model_name: 'gated', model_version: '2.0' })).toBe(
      d.traffic.shadow.dropped,
    );
  });

  it('keeps requests in flight on their version when the weights change', async () => {
    const marker = join(workspace.root, 'live-may-finish');
    expect((await call(ops.api, 'PUT', '/models/gated/traffic', { body: { weights: { '1.0': 100 } } })).status).toBe(
      200,
    );
    const inFlight = [0, 1, 2].map(() => post('/predictions/gated', { liveGate: marker }));
    await waitFor('three requests held by 1.0', async () => {
      const d = await describeVersion('gated', '1.0');
      return d.workers[0].status === 'BUSY' && d.jobQueueStatus.pendingRequests === 2;
    });
    expect((await call(ops.api, 'PUT', '/models/gated/traffic', { body: { weights: { '2.0': 100 } } })).status).toBe(
      200,
    );
    // The new weights are in force at once, while 1.0 still holds the old requests.
    expect(await post('/predictions/gated', {})).toMatchObject({ status: 200, version: '2.0' });
    await writeFile(marker, 'go');
    for (const r of await Promise.all(inFlight)) expect(r).toMatchObject({ status: 200, version: '1.0' });
    // The version with the most weight is the default (describe, readiness).
    expect((await call(ops.api, 'GET', '/models/gated')).json[0].modelVersion).toBe('2.0');
  });

  it('refuses bad policies and removing a version the policy uses, with their codes', async () => {
    const refused = async (body: unknown, code: string, status = 400) => {
      const r = await call(ops.api, 'PUT', '/models/tiny/traffic', { body });
      expect(r.status, JSON.stringify(body)).toBe(status);
      expect(r.json.marinaCode, JSON.stringify(body)).toBe(code);
      return r.json.message as string;
    };
    expect(await refused({ weights: { '1.0': 60, '2.0': 30 } }, 'MARINA_ERR_TRAFFIC_POLICY_INVALID')).toContain(
      'sum to 90',
    );
    expect(await refused({ weights: { '1.0': 50, '9.9': 50 } }, 'MARINA_ERR_TRAFFIC_POLICY_INVALID')).toContain(
      "'9.9'",
    );
    await refused({ weights: { '1.0': '100' } }, 'MARINA_ERR_TRAFFIC_POLICY_INVALID');
    await refused({ weights: { '1.0': 100 }, canary: true }, 'MARINA_ERR_TRAFFIC_POLICY_INVALID');
    await refused({ weights: { '1.0': 100 }, shadow: { version: '1.0' } }, 'MARINA_ERR_TRAFFIC_POLICY_INVALID');
    await refused({ stickyHeader: 'not a header' }, 'MARINA_ERR_TRAFFIC_POLICY_INVALID');
    const unknown = await call(ops.api, 'PUT', '/models/nope/traffic', { body: { weights: { '1.0': 100 } } });
    expect(unknown.json.marinaCode).toBe('MARINA_ERR_MODEL_NOT_FOUND');

    expect(
      (
        await call(ops.api, 'PUT', '/models/tiny/traffic', {
          body: { weights: { '1.0': 80, '2.0': 20, '3.0': 0 }, shadow: { version: '3.0', percent: 50 } },
        })
      ).status,
    ).toBe(200);
    for (const version of ['2.0', '3.0']) {
      const r = await call(ops.api, 'DELETE', `/models/tiny/${version}`);
      expect(r.status).toBe(409);
      expect(r.json.marinaCode).toBe('MARINA_ERR_VERSION_IN_TRAFFIC_POLICY');
    }
    // The same through management gRPC.
    const management = client('marina_management.proto', 'marina.management.TrafficAPIsService', grpcManagement);
    try {
      const error = await unary(management, 'SetTrafficPolicy', {
        model_name: 'tiny',
        weights: { '1.0': 50 },
      }).catch((e: grpc.ServiceError) => e);
      expect((error as grpc.ServiceError).code).toBe(grpc.status.INVALID_ARGUMENT);
      expect((error as grpc.ServiceError).metadata.get('marina-error-code')).toEqual([
        'MARINA_ERR_TRAFFIC_POLICY_INVALID',
      ]);
      const set = await unary(management, 'SetTrafficPolicy', {
        model_name: 'tiny',
        weights: { '1.0': 90, '3.0': 10 },
        shadow: { version: '2.0', percent: 25 },
        sticky_header: ROUTE_KEY,
      });
      expect(JSON.parse(set.value.msg)).toMatchObject({ weights: { '1.0': 90, '3.0': 10 } });
      const got = await unary(management, 'GetTrafficPolicy', { model_name: 'tiny' });
      expect(JSON.parse(got.value.msg)).toEqual({
        weights: { '1.0': 90, '3.0': 10 },
        shadow: { version: '2.0', percent: 25 },
        stickyHeader: ROUTE_KEY,
      });
    } finally {
      management.close();
    }
    // Once the policy no longer uses it, the version can go.
    expect(
      (
        await call(ops.api, 'PUT', '/models/tiny/traffic', {
          body: { weights: { '1.0': 90, '2.0': 10, '3.0': 0 }, stickyHeader: ROUTE_KEY },
        })
      ).status,
    ).toBe(200);
    expect((await call(ops.api, 'DELETE', '/models/tiny/3.0')).status).toBe(200);
    expect((await call(ops.api, 'GET', '/models/tiny/traffic')).json).toEqual({
      weights: { '1.0': 90, '2.0': 10 },
      stickyHeader: ROUTE_KEY,
    });
  });

  it('restores the policies from the snapshot, and set-default moves every client', async () => {
    const before = {
      tiny: (await call(ops.api, 'GET', '/models/tiny/traffic')).json,
      gated: (await call(ops.api, 'GET', '/models/gated/traffic')).json,
    };
    await ops.close();
    const snapshot = await readLatestSnapshot(config.snapshotDir);
    expect(snapshot?.traffic).toEqual({ tiny: before.tiny, gated: before.gated });
    // Restarted from that snapshot (as --ts-config <snapshot> would), without the models JSON's policy.
    ops = await startOps({ ...config, configFile: snapshot!.path, trafficPolicies: {} });
    expect(ops.server.restoredFrom).toBe(snapshot!.path);
    expect((await call(ops.api, 'GET', '/models/tiny/traffic')).json).toEqual(before.tiny);
    expect((await call(ops.api, 'GET', '/models/gated/traffic')).json).toEqual(before.gated);

    expect((await call(ops.api, 'PUT', '/models/tiny/2.0/set-default')).status).toBe(200);
    expect((await call(ops.api, 'GET', '/models/tiny/traffic')).json).toEqual({
      weights: { '2.0': 100 },
      stickyHeader: ROUTE_KEY,
    });
    for (let i = 0; i < 5; i++)
      expect((await post('/predictions/tiny', torchServeBody(inputOf(0)), { [ROUTE_KEY]: `u${i}` })).version).toBe(
        '2.0',
      );

    // A policy removed through the API stays removed: the snapshot says so ({}), so a restart does
    // not bring back the models JSON's.
    expect((await call(ops.api, 'DELETE', '/models/gated/traffic')).status).toBe(200);
    expect((await call(ops.api, 'GET', '/models/gated/traffic')).json).toEqual({ weights: { '2.0': 100 } });
    await ops.close();
    expect((await readLatestSnapshot(config.snapshotDir))?.traffic.gated).toEqual({});
  });
});
