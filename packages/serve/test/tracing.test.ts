/**
 * OpenTelemetry traces, end to end: a real server (REST and both gRPC services on loopback, a real
 * worker thread) exports to a local OTLP receiver over real HTTP, which decodes what arrives
 * (protobuf for one server, JSON for the other). Checks the span tree, the parent taken from a
 * caller's traceparent on each protocol, the attributes, the batch span's links, that probes are
 * not traced, and that a sampled parent is traced even when the sampler says always_off.
 * Waits: the tracer's forceFlush (which resolves once the receiver has answered the export).
 */
import { setImmediate } from 'node:timers/promises';
import { randomBytes } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp, type MarinaApp } from '../src/app.ts';
import { startGrpcServers, type GrpcServers } from '../src/protocols/grpc-server.ts';
import { tracingSettingsFrom } from '../src/tracing/tracing.ts';
import { until } from './gate-harness.ts';
import { clientPackage, grpcClient } from './oip-harness.ts';
import { startOtlpReceiver, type OtlpReceiver, type ReceivedSpan } from './otlp-receiver.ts';
import { loopbackConfig, tempDir, writeModelFolder } from './helpers.ts';

/** A handler with separate stages (so the worker reports preprocess, inference and postprocess); preprocess holds while a row's gate file is missing. */
const stagedHandler = `
import { existsSync } from 'node:fs';
const nap = new Int32Array(new SharedArrayBuffer(4));
function inputOf(row) {
  const b = row.body ?? row.data;
  if (b && typeof b === 'object' && !(b instanceof Uint8Array)) return b;
  try { return JSON.parse(Buffer.from(b).toString()); } catch { return {}; }
}
export function preprocess(rows) {
  return rows.map((row) => {
    const input = inputOf(row);
    if (input.gate) while (!existsSync(input.gate)) Atomics.wait(nap, 0, 0, 5);
    return input;
  });
}
export function inference(inputs) { return inputs; }
export function postprocess(inputs, context) { return inputs.map((_, i) => ({ ok: true, batch: inputs.length })); }
`;

let dir: { path: string; cleanup: () => Promise<void> };
let receiver: OtlpReceiver;

interface Server {
  app: MarinaApp;
  base: string;
  grpc?: GrpcServers;
}
let traced: Server;
let sampledOnly: Server;

async function startServer(env: Record<string, string>, withGrpc: boolean): Promise<Server> {
  const name = withGrpc ? 'staged' : 'staged2';
  const folder = await writeModelFolder({
    dir: join(dir.path, name),
    modelName: 'staged',
    handler: 'staged.mjs',
    files: { 'staged.mjs': stagedHandler },
    modelConfigYaml: 'minWorkers: 1\nbatchSize: 2\nmaxBatchDelay: 50\nintraOpNumThreads: 1\n',
  });
  const config = loopbackConfig(dir.path, { enable_metrics_api: 'false' });
  const app = await buildApp({ ...config, extractionCacheDir: join(dir.path, `cache-${name}`) }, { env });
  await app.registry.register({ url: name, archivePath: folder, synchronous: true });
  const base = await app.inference.listen({ host: '127.0.0.1', port: 0 });
  const grpcServers = withGrpc
    ? await startGrpcServers({
        config,
        grpc: config.grpc!,
        dataPlane: app.dataPlane,
        management: app.management,
        tokens: undefined,
      })
    : undefined;
  return { app, base, ...(grpcServers ? { grpc: grpcServers } : {}) };
}

beforeAll(async () => {
  dir = await tempDir('marina-tracing-');
  receiver = await startOtlpReceiver(dir.path);
  traced = await startServer(
    {
      OTEL_TRACES_EXPORTER: 'otlp',
      OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
      OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'http/protobuf',
      OTEL_SERVICE_NAME: 'marina-under-test',
      OTEL_RESOURCE_ATTRIBUTES: 'deployment.environment.name=ci,team=inference',
    },
    true,
  );
  sampledOnly = await startServer(
    {
      OTEL_TRACES_EXPORTER: 'otlp',
      OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: `${receiver.url}/v1/traces`,
      OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'http/json',
      OTEL_TRACES_SAMPLER: 'always_off',
      OTEL_SERVICE_NAME: 'marina-sampled-only',
    },
    false,
  );
}, 90_000);

afterAll(async () => {
  for (const s of [traced, sampledOnly]) {
    if (!s) continue;
    const closed = s.app.close();
    await Promise.all([s.grpc?.close({ drained: closed }), closed]);
  }
  await receiver?.close();
  await dir?.cleanup();
});

function newParent(flags = '01') {
  const traceId = randomBytes(16).toString('hex');
  const spanId = randomBytes(8).toString('hex');
  return { traceId, spanId, traceparent: `00-${traceId}-${spanId}-${flags}` };
}

/**
 * The spans of one trace that reached the receiver, once its server span has: a REST request's
 * span ends in the listener's onResponse hook, which may run just after the client has read the
 * answer, so the export is asked for again until that span has arrived (the test's own timeout
 * bounds the wait; no count of tries stands in for the machine's speed).
 */
async function spansOf(server: Server, traceId: string): Promise<ReceivedSpan[]> {
  await server.app.tracing!.forceFlush();
  while (!receiver.spans.some((s) => s.traceId === traceId && s.kind === 2)) {
    await setImmediate();
    await server.app.tracing!.forceFlush();
  }
  return receiver.spans.filter((s) => s.traceId === traceId);
}

/** The request span under `parentSpanId` and its children by name; fails when a stage is missing. */
function tree(spans: ReceivedSpan[], parentSpanId: string) {
  const request = spans.find((s) => s.parentSpanId === parentSpanId && s.kind === 2);
  expect(request, 'the request span, a child of the given parent').toBeDefined();
  const children = new Map(spans.filter((s) => s.parentSpanId === request!.spanId).map((s) => [s.name, s]));
  for (const name of ['admission', 'queue', 'preprocess', 'inference', 'postprocess'])
    expect(children.has(name), `${request!.name} has a ${name} span`).toBe(true);
  for (const child of children.values()) {
    expect(child.startNs >= request!.startNs).toBe(true);
    expect(child.endNs <= request!.endNs).toBe(true);
  }
  return { request: request!, children };
}

function grpcCall(service: string, method: string, request: unknown, metadata: grpc.Metadata) {
  const [file, name] =
    service === 'oip'
      ? ['grpc_predict_v2.proto', 'inference.GRPCInferenceService']
      : ['inference.proto', 'org.pytorch.serve.grpc.inference.InferenceAPIsService'];
  const client = grpcClient(clientPackage(file), name, traced.grpc!.inferenceUrl);
  return new Promise<{ error: grpc.ServiceError | null; headers: grpc.Metadata }>((resolve) => {
    let headers = new grpc.Metadata();
    const call = (client[method] as (...args: unknown[]) => grpc.ClientUnaryCall).call(
      client,
      request,
      metadata,
      (error: grpc.ServiceError | null) => {
        client.close();
        resolve({ error, headers });
      },
    );
    call.on('metadata', (m: grpc.Metadata) => (headers = m));
  });
}

describe('OpenTelemetry tracing', { timeout: 60_000 }, () => {
  it('joins a caller traceparent on TorchServe REST: request span, admission, queue and stages, with HTTP and model attributes', async () => {
    const parent = newParent();
    const response = await fetch(`${traced.base}/predictions/staged`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', traceparent: parent.traceparent, tracestate: 'vendor=1' },
      body: JSON.stringify({ value: 1 }),
    });
    expect(response.status).toBe(200);
    const spans = await spansOf(traced, parent.traceId);
    const { request, children } = tree(spans, parent.spanId);
    expect(response.headers.get('traceparent')).toBe(`00-${parent.traceId}-${request.spanId}-01`);
    expect(request.name).toBe('POST /predictions/:model_name');
    expect(request.encoding).toBe('protobuf');
    expect(request.attributes).toMatchObject({
      'http.request.method': 'POST',
      'http.route': '/predictions/:model_name',
      'url.path': '/predictions/staged',
      'http.response.status_code': 200,
      'marina.protocol': 'torchserve-rest',
      'marina.model.name': 'staged',
      'marina.model.version': '1.0',
    });
    expect(request.attributes['marina.request.id']).toBe(response.headers.get('x-request-id'));
    expect(children.get('queue')!.attributes['marina.priority']).toBe(1);
    expect(children.get('inference')!.attributes).toMatchObject({ 'marina.batch.size': 1 });
    // The stages around it ran in the same batch on the same worker: only the inference span says so.
    expect(children.get('preprocess')!.attributes).toEqual({});
    expect(children.get('postprocess')!.attributes).toEqual({});
    expect(typeof children.get('inference')!.attributes['marina.worker.id']).toBe('string');
    expect(request.resource).toMatchObject({
      'service.name': 'marina-under-test',
      'deployment.environment.name': 'ci',
      team: 'inference',
    });
  });

  it('joins the traceparent on OIP REST, OIP gRPC and TorchServe gRPC (metadata), with RPC attributes', async () => {
    const rest = newParent();
    const oipRest = await fetch(`${traced.base}/v2/models/staged/infer`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', traceparent: rest.traceparent },
      body: JSON.stringify({ inputs: [{ name: 'input', datatype: 'BYTES', shape: [1], data: ['{"value":2}'] }] }),
    });
    expect(oipRest.status).toBe(200);

    const oip = newParent();
    const oipMetadata = new grpc.Metadata();
    oipMetadata.set('traceparent', oip.traceparent);
    const oipCall = await grpcCall(
      'oip',
      'ModelInfer',
      {
        model_name: 'staged',
        inputs: [{ name: 'input', datatype: 'BYTES', shape: [1], contents: { bytes_contents: [Buffer.from('{}')] } }],
      },
      oipMetadata,
    );
    expect(oipCall.error).toBeNull();

    const ts = newParent();
    const tsMetadata = new grpc.Metadata();
    tsMetadata.set('traceparent', ts.traceparent);
    const tsCall = await grpcCall(
      'torchserve',
      'Predictions',
      { model_name: 'staged', input: { data: Buffer.from('{"value":3}') } },
      tsMetadata,
    );
    expect(tsCall.error).toBeNull();

    const restTree = tree(await spansOf(traced, rest.traceId), rest.spanId);
    expect(restTree.request.attributes).toMatchObject({
      'http.route': '/v2/models/:model_name/infer',
      'marina.protocol': 'oip-rest',
      'marina.model.name': 'staged',
    });
    expect(oipRest.headers.get('traceparent')).toBe(`00-${rest.traceId}-${restTree.request.spanId}-01`);

    const oipTree = tree(await spansOf(traced, oip.traceId), oip.spanId);
    expect(oipTree.request.name).toBe('inference.GRPCInferenceService/ModelInfer');
    expect(oipTree.request.attributes).toMatchObject({
      'rpc.system': 'grpc',
      'rpc.service': 'inference.GRPCInferenceService',
      'rpc.method': 'ModelInfer',
      'rpc.grpc.status_code': 0,
      'marina.protocol': 'oip-grpc',
      'marina.model.name': 'staged',
    });
    expect(oipCall.headers.get('traceparent')[0]).toBe(`00-${oip.traceId}-${oipTree.request.spanId}-01`);

    const tsTree = tree(await spansOf(traced, ts.traceId), ts.spanId);
    expect(tsTree.request.attributes).toMatchObject({
      'rpc.method': 'Predictions',
      'marina.protocol': 'torchserve-grpc',
    });
    expect(tsCall.headers.get('traceparent')[0]).toBe(`00-${ts.traceId}-${tsTree.request.spanId}-01`);
  });

  it('gives a batch one span, a child of its first request, linked to every request it ran', async () => {
    const version = traced.app.registry.getVersion('staged');
    const gate = join(dir.path, 'gate');
    const post = (body: unknown, traceparent: string) =>
      fetch(`${traced.base}/predictions/staged`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', traceparent },
        body: JSON.stringify(body),
      });
    const blocker = post({ gate }, newParent().traceparent);
    await until(version, () => version.runningJobs === 1);
    const [a, b] = [newParent(), newParent()];
    const both = [post({ value: 'a' }, a.traceparent), post({ value: 'b' }, b.traceparent)];
    // batchSize 2 with the worker busy: the two go as one (prefetched) batch.
    await until(version, () => version.queue.waiting === 2 && version.queue.size === 0);
    await writeFile(gate, '');
    expect((await Promise.all([blocker, ...both])).map((r) => r.status)).toEqual([200, 200, 200]);
    const aSpans = await spansOf(traced, a.traceId);
    const bSpans = await spansOf(traced, b.traceId);
    const aRequest = tree(aSpans, a.spanId).request;
    const bRequest = tree(bSpans, b.spanId).request;
    const batch = [...aSpans, ...bSpans].find((s) => s.name === 'batch');
    expect(batch, 'a batch span in the first request’s trace').toBeDefined();
    expect(batch!.attributes['marina.batch.size']).toBe(2);
    expect(batch!.links.map((l) => l.spanId).sort()).toEqual([aRequest.spanId, bRequest.spanId].sort());
  });

  it('traces each message of a TorchServe StreamPredictions2 stream: the call span with rpc.message events, a span per message with its job spans', async () => {
    const SERVICE = 'org.pytorch.serve.grpc.inference.InferenceAPIsService';
    const parent = newParent();
    const metadata = new grpc.Metadata();
    metadata.set('traceparent', parent.traceparent);
    const client = grpcClient(clientPackage('inference.proto'), SERVICE, traced.grpc!.inferenceUrl);
    const duplex = (
      client.StreamPredictions2 as (
        m: grpc.Metadata,
      ) => grpc.ClientDuplexStream<unknown, { sequence_id?: string; status?: { code: number } }>
    ).call(client, metadata);
    let headers: grpc.Metadata | undefined;
    duplex.on('metadata', (m: grpc.Metadata) => (headers = m));
    duplex.write({ model_name: 'staged', input: { data: Buffer.from('{"value":1}') }, sequence_id: 's1' });
    duplex.write({ model_name: 'staged', input: { data: Buffer.from('{"value":2}') }, sequence_id: 's2' });
    duplex.write({ model_name: 'nope', input: { data: Buffer.from('{}') }, sequence_id: 's3' });
    duplex.end();
    const answers = [];
    for await (const m of duplex) answers.push(m);
    client.close();
    expect(answers.map((a) => [a.sequence_id, a.status?.code ?? 0]).sort()).toEqual([
      ['s1', 0],
      ['s2', 0],
      ['s3', grpc.status.NOT_FOUND],
    ]);

    const spans = await spansOf(traced, parent.traceId);
    const call = spans.find((s) => s.parentSpanId === parent.spanId && s.kind === 2);
    expect(call, 'the call span, a child of the given parent').toBeDefined();
    expect(call!.name).toBe(`${SERVICE}/StreamPredictions2`);
    expect(call!.attributes).toMatchObject({
      'rpc.system': 'grpc',
      'rpc.service': SERVICE,
      'rpc.method': 'StreamPredictions2',
      'rpc.grpc.status_code': 0,
      'marina.protocol': 'torchserve-grpc',
    });
    expect(headers?.get('traceparent')[0]).toBe(`00-${parent.traceId}-${call!.spanId}-01`);
    const events = (type: string) =>
      call!.events
        .filter((e) => e.name === 'rpc.message' && e.attributes['rpc.message.type'] === type)
        .map((e) => e.attributes['rpc.message.id']);
    expect(events('RECEIVED')).toEqual([1, 2, 3]);
    expect(events('SENT')).toEqual([1, 2, 3]);

    const messages = new Map(
      spans.filter((s) => s.parentSpanId === call!.spanId).map((s) => [s.attributes['marina.sequence.id'], s]),
    );
    expect([...messages.keys()].sort()).toEqual(['s1', 's2', 's3']);
    for (const id of ['s1', 's2']) {
      const message = messages.get(id)!;
      expect(message.name).toBe(`${SERVICE}/StreamPredictions2 message`);
      expect(message.attributes).toMatchObject({
        'rpc.method': 'StreamPredictions2',
        'rpc.grpc.status_code': 0,
        'marina.model.name': 'staged',
        'marina.protocol': 'torchserve-grpc',
      });
      expect(typeof message.attributes['marina.request.id']).toBe('string');
      expect(message.startNs >= call!.startNs && message.endNs <= call!.endNs).toBe(true);
      const children = new Map(spans.filter((s) => s.parentSpanId === message.spanId).map((s) => [s.name, s]));
      for (const name of ['admission', 'queue', 'preprocess', 'inference', 'postprocess']) {
        const child = children.get(name);
        expect(child, `message ${id} has a ${name} span`).toBeDefined();
        expect(child!.startNs >= message.startNs && child!.endNs <= message.endNs).toBe(true);
      }
    }
    // The unknown model's message: its own span with the status its answer carried, and no job under it.
    const failed = messages.get('s3')!;
    expect(failed.attributes['rpc.grpc.status_code']).toBe(grpc.status.NOT_FOUND);
    expect(spans.some((s) => s.parentSpanId === failed.spanId && s.name === 'inference')).toBe(false);
  });

  it('does not trace health, readiness or probe routes on REST or gRPC', async () => {
    const before = receiver.spans.length;
    for (const path of ['/ping', '/v2/health/live', '/v2/health/ready', '/v2/models/staged/ready']) {
      const response = await fetch(`${traced.base}${path}`, { headers: { traceparent: newParent().traceparent } });
      expect(response.status).toBe(200);
      expect(response.headers.get('traceparent')).toBeNull();
    }
    const live = await grpcCall('oip', 'ServerLive', {}, new grpc.Metadata());
    expect(live.error).toBeNull();
    // A traced request after the probes: its spans arriving shows the export ran.
    const control = newParent();
    await fetch(`${traced.base}/predictions/staged`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', traceparent: control.traceparent },
      body: '{}',
    });
    expect((await spansOf(traced, control.traceId)).length).toBeGreaterThan(0);
    const names = receiver.spans.slice(before).map((s) => String(s.attributes['http.route'] ?? s.name));
    expect(names.filter((n) => /ping|health|ready|ServerLive/.test(n))).toEqual([]);
  });

  it('traces a request with a sampled parent even when OTEL_TRACES_SAMPLER=always_off (OTLP/JSON), and nothing else', async () => {
    const sampled = newParent('01');
    const unsampled = newParent('00');
    const post = (traceparent?: string) =>
      fetch(`${sampledOnly.base}/predictions/staged`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...(traceparent ? { traceparent } : {}) },
        body: '{}',
      });
    const [withSampled, withUnsampled, without] = await Promise.all([
      post(sampled.traceparent),
      post(unsampled.traceparent),
      post(),
    ]);
    expect([withSampled.status, withUnsampled.status, without.status]).toEqual([200, 200, 200]);
    const spans = await spansOf(sampledOnly, sampled.traceId);
    const { request } = tree(spans, sampled.spanId);
    expect(request.encoding).toBe('json');
    expect(request.resource['service.name']).toBe('marina-sampled-only');
    expect(receiver.contentTypes).toContain('application/json');
    // The others are answered with a traceparent of an unsampled span, and nothing of theirs is exported.
    expect(withUnsampled.headers.get('traceparent')).toMatch(new RegExp(`^00-${unsampled.traceId}-[0-9a-f]{16}-00$`));
    const otherTrace = without.headers.get('traceparent')!.split('-')[1]!;
    expect(receiver.spans.filter((s) => s.traceId === unsampled.traceId || s.traceId === otherTrace)).toEqual([]);
  });

  it('reads the standard variables, off unless asked, and refuses what it does not support', () => {
    expect(tracingSettingsFrom({ env: {}, isEnabled: false, serviceVersion: '0' })).toBeUndefined();
    expect(
      tracingSettingsFrom({ env: { OTEL_TRACES_EXPORTER: 'none' }, isEnabled: true, serviceVersion: '0' }),
    ).toBeUndefined();
    expect(tracingSettingsFrom({ env: {}, isEnabled: true, serviceVersion: '0' })).toMatchObject({
      exporter: 'otlp',
      protocol: 'http/protobuf',
      endpoint: 'http://localhost:4318/v1/traces',
      sampler: 'parentbased_always_on',
      serviceName: 'marina',
    });
    expect(() =>
      tracingSettingsFrom({
        env: { OTEL_TRACES_EXPORTER: 'otlp', OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'grpc' },
        isEnabled: false,
        serviceVersion: '0',
      }),
    ).toThrow(/MARINA_ERR_TRACING_CONFIG_INVALID|http\/protobuf or http\/json/);
  });
});
