/**
 * Priority levels under a real backlog: a real server (REST and gRPC on loopback, real worker
 * threads) whose one worker is held by a request that blocks on a gate file. Requests queue behind
 * it; the handler appends each request's name to a run log as it runs, so the test reads the order
 * in which requests started and which never ran. Every wait is on the model version's own events.
 */
import { existsSync, readFileSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { buildApp, type MarinaApp } from '../src/app.ts';
import { startGrpcServers, type GrpcServers } from '../src/protocols/grpc-server.ts';
import type { ModelVersion } from '../src/scheduling/model-version.ts';
import { until } from './gate-harness.ts';
import { clientPackage, grpcClient } from './oip-harness.ts';
import { loopbackConfig, tempDir, writeModelFolder } from './helpers.ts';

/** Blocks while its request's gate file is missing; appends the request's name to its run log. */
const loggingGateHandler = `
import { appendFileSync, existsSync } from 'node:fs';
const nap = new Int32Array(new SharedArrayBuffer(4));
export function handle(data) {
  return data.map((row) => {
    const b = row.body ?? {};
    const body = b instanceof Uint8Array ? JSON.parse(Buffer.from(b).toString()) : typeof b === 'object' ? b : {};
    const input = body.name ? body : row.data ? JSON.parse(Buffer.from(row.data).toString()) : {};
    if (input.log) appendFileSync(input.log, input.name + '\\n');
    if (input.gate) while (!existsSync(input.gate)) Atomics.wait(nap, 0, 0, 5);
    return { name: input.name };
  });
}
`;

let app: MarinaApp;
let grpcServers: GrpcServers;
let base: string;
let dir: { path: string; cleanup: () => Promise<void> };
let version: ModelVersion;
let gates = 0;
let runs = 0;

beforeAll(async () => {
  dir = await tempDir('marina-priority-');
  const folder = await writeModelFolder({
    dir: join(dir.path, 'prio'),
    modelName: 'prio',
    handler: 'logging_gate.mjs',
    files: { 'logging_gate.mjs': loggingGateHandler },
    modelConfigYaml: [
      'minWorkers: 1',
      'batchSize: 1',
      'intraOpNumThreads: 1',
      'priorityLevels: 2',
      'defaultPriorityLevel: 2',
      'priorityQueuePolicy:',
      '  "1":',
      '    maxQueueSize: 10',
      '',
    ].join('\n'),
  });
  const config = loopbackConfig(dir.path, { enable_metrics_api: 'false' });
  app = await buildApp({ ...config, extractionCacheDir: join(dir.path, 'cache') });
  await app.registry.register({ url: 'prio', archivePath: folder, synchronous: true });
  base = await app.inference.listen({ host: '127.0.0.1', port: 0 });
  grpcServers = await startGrpcServers({
    config,
    grpc: config.grpc!,
    dataPlane: app.dataPlane,
    management: app.management,
    tokens: undefined,
  });
  version = app.registry.getVersion('prio');
}, 60_000);

/** Opens every gate made so far: a failed test never leaves the worker held for the next one. */
async function openAllGates() {
  for (let i = 0; i < gates; i++) await writeFile(join(dir.path, `gate-${i}`), '');
}

afterEach(openAllGates);

afterAll(async () => {
  await openAllGates();
  const closed = app?.close();
  await Promise.all([grpcServers?.close({ drained: closed }), closed]);
  await dir?.cleanup();
});

/** One scenario's run log and a closed gate. */
function scenario() {
  const log = join(dir.path, `runs-${runs++}.log`);
  const gate = join(dir.path, `gate-${gates++}`);
  return {
    log,
    gate,
    open: () => writeFile(gate, ''),
    ran: () => (existsSync(log) ? readFileSync(log, 'utf8').split('\n').filter(Boolean) : []),
  };
}

function post(body: Record<string, unknown>, headers: Record<string, string> = {}, signal?: AbortSignal) {
  return fetch(`${base}/predictions/prio`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
    signal,
  }).then(async (r) => ({ status: r.status, headers: r.headers, json: (await r.json()) as Record<string, any> }));
}

/**
 * Holds the worker: `blocker` runs, blocked on the gate. A model with priority levels gives a busy
 * worker only a batch of its highest level early (nothing can overtake it): lower-level requests
 * sent after it wait in the queue, and the first level-1 request waits in the worker's hands.
 */
async function holdWorker(s: ReturnType<typeof scenario>) {
  // The blocker is a level-1 request, so level 1 counts as active (lower-level batches are then
  // not prefetched; see TOP_LEVEL_QUIET_BATCHES).
  const blocker = post({ name: 'blocker', gate: s.gate, log: s.log }, { 'x-marina-priority': '1' });
  await until(version, () => version.runningJobs === 1);
  return [blocker];
}

const high = { 'x-marina-priority': '1' };

describe('priority levels under a backlog', { timeout: 60_000 }, () => {
  it('starts the higher level first; answers name the level in Server-Timing; describe shows each level', async () => {
    const s = scenario();
    const held = await holdWorker(s);
    const low = [post({ name: 'low-1', log: s.log }), post({ name: 'low-2', log: s.log })];
    await until(version, () => version.queue.sizeOf(2) === 2);
    // The lower level's requests were not handed to the busy worker: they wait in the queue.
    expect(version.queue.waiting).toBe(2);
    const highs = [post({ name: 'high-1', log: s.log }, high), post({ name: 'high-2', log: s.log }, high)];
    // high-1 went to the busy worker as its next batch (the highest level's batch may), high-2 queues.
    await until(version, () => version.queue.waiting === 4 && version.queue.sizeOf(1) === 1);
    expect(app.registry.stats().find((v) => v.modelName === 'prio')!.queueDepthByPriority).toEqual([1, 2]);
    const described = app.registry.describe('prio')[0]!.jobQueueStatus.priorityLevels!;
    expect(described.map((l) => [l.level, l.pendingRequests, l.isDefault, l.maxQueueSize])).toEqual([
      [1, 1, false, 10],
      [2, 2, true, 0],
    ]);
    await s.open();
    const answers = await Promise.all([...held, ...low, ...highs]);
    expect(answers.map((a) => a.status)).toEqual([200, 200, 200, 200, 200]);
    expect(s.ran()).toEqual(['blocker', 'high-1', 'high-2', 'low-1', 'low-2']);
    expect(answers[3]!.headers.get('server-timing')).toContain('priority;desc="1"');
    expect(answers[1]!.headers.get('server-timing')).toContain('priority;desc="2"');
  });

  it('still runs a starved lower level: after 8 batches of the higher one, the lower one goes first', async () => {
    const s = scenario();
    const held = await holdWorker(s);
    const low = post({ name: 'low', log: s.log });
    await until(version, () => version.queue.sizeOf(2) === 1);
    const highs = Array.from({ length: 10 }, (_, i) => post({ name: `high-${i}`, log: s.log }, high));
    // high-0 is in the worker's hands (its next batch), the other nine queue.
    await until(version, () => version.queue.waiting === 11 && version.queue.sizeOf(1) === 9);
    await s.open();
    // After high-7 the lower level's turn comes with nothing prefetched: it starts on the idle
    // worker and high-8 is given behind it (a batch must not be lost between the two).
    await Promise.all([...held, low, ...highs]);
    const ran = s.ran();
    // blocker, then high-0 … high-7 passed the lower level over 8 times; it went next.
    expect(ran.indexOf('low')).toBe(9);
    expect(ran.slice(1, 9).every((name) => name.startsWith('high-'))).toBe(true);
    expect(ran).toHaveLength(12);
  });

  it('refuses a level over its maxQueueSize (503) while the other level still queues', async () => {
    const s = scenario();
    const held = await holdWorker(s);
    // high-0 goes to the busy worker as its next batch; maxQueueSize bounds the ten queued after it.
    const queued = Array.from({ length: 11 }, (_, i) => post({ name: `high-${i}`, log: s.log }, high));
    await until(version, () => version.queue.sizeOf(1) === 10 && version.queue.waiting === 11);
    const refused = await post({ name: 'high-11', log: s.log }, high);
    expect(refused.status).toBe(503);
    expect(refused.json).toMatchObject({
      code: 503,
      type: 'ServiceUnavailableException',
      marinaCode: 'MARINA_ERR_QUEUE_FULL',
    });
    expect(refused.json.hint).toContain('priority 1');
    const low = post({ name: 'low', log: s.log });
    await until(version, () => version.queue.sizeOf(2) === 1);
    await s.open();
    expect((await Promise.all([...held, ...queued, low])).every((a) => a.status === 200)).toBe(true);
    expect(s.ran()).not.toContain('high-11');
  });

  it("answers a request past its own timeout before it runs (504, TorchServe's body), and never runs it", async () => {
    const s = scenario();
    const held = await holdWorker(s);
    const late = await post({ name: 'late', log: s.log }, { 'x-marina-timeout-ms': '200' });
    expect(late.status).toBe(504);
    expect(late.json).toMatchObject({
      code: 504,
      type: 'RequestTimeoutException',
      marinaCode: 'MARINA_ERR_DEADLINE_EXCEEDED',
    });
    expect(version.queue.size).toBe(0);
    await s.open();
    await Promise.all(held);
    await until(version, () => version.pendingJobs === 0);
    expect(s.ran()).toEqual(['blocker']);
  });

  it('drops a queued request whose client went away (REST) or whose gRPC deadline passed', async () => {
    const s = scenario();
    const held = await holdWorker(s);
    const abort = new AbortController();
    const gone = post({ name: 'gone', log: s.log }, {}, abort.signal).catch((error: Error) => error);
    await until(version, () => version.queue.size === 1);
    abort.abort();
    await until(version, () => version.queue.size === 0);
    expect(await gone).toBeInstanceOf(Error);

    const client = grpcClient(
      clientPackage('inference.proto'),
      'org.pytorch.serve.grpc.inference.InferenceAPIsService',
      grpcServers.inferenceUrl,
    );
    // Whichever comes first removes it: the queue's deadline timer (504) or the call's cancellation (499).
    const removed = new Promise<number>((resolve) =>
      app.registry.events.on('request', (e) => {
        if (e.modelName === 'prio' && e.statusCode >= 499) resolve(e.statusCode);
      }),
    );
    const grpcLate = new Promise<grpc.ServiceError | null>((resolve) => {
      const input = { data: Buffer.from(JSON.stringify({ name: 'grpc-late', log: s.log })) };
      (client.Predictions as (...args: unknown[]) => unknown).call(
        client,
        { model_name: 'prio', input },
        new grpc.Metadata(),
        { deadline: Date.now() + 500 },
        (error: grpc.ServiceError | null) => resolve(error),
      );
    });
    expect([499, 504]).toContain(await removed);
    expect(version.queue.size).toBe(0);
    expect((await grpcLate)?.code).toBe(grpc.status.DEADLINE_EXCEEDED);
    client.close();
    await s.open();
    await Promise.all(held);
    await until(version, () => version.pendingJobs === 0);
    expect(s.ran()).toEqual(['blocker']);
  });

  it('refuses a priority the model does not have on REST, OIP parameters and gRPC metadata (MARINA_ERR_PRIORITY_INVALID)', async () => {
    const answer = await post({ name: 'x' }, { 'x-marina-priority': '3' });
    expect(answer.status).toBe(400);
    expect(answer.json.marinaCode).toBe('MARINA_ERR_PRIORITY_INVALID');
    expect(answer.json.message).toContain('1 (highest) to 2');

    const oip = await fetch(`${base}/v2/models/prio/infer`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        parameters: { priority: 7 },
        inputs: [{ name: 'input', datatype: 'BYTES', shape: [1], data: ['{}'] }],
      }),
    });
    expect(oip.status).toBe(400);
    expect(oip.headers.get('x-marina-error-code')).toBe('MARINA_ERR_PRIORITY_INVALID');

    const client = grpcClient(
      clientPackage('inference.proto'),
      'org.pytorch.serve.grpc.inference.InferenceAPIsService',
      grpcServers.inferenceUrl,
    );
    const metadata = new grpc.Metadata();
    metadata.set('x-marina-priority', '9');
    const error = await new Promise<grpc.ServiceError | null>((resolve) =>
      (client.Predictions as (...args: unknown[]) => unknown).call(
        client,
        { model_name: 'prio', input: { data: Buffer.from('{}') } },
        metadata,
        (e: grpc.ServiceError | null) => resolve(e),
      ),
    );
    client.close();
    expect(error?.code).toBe(grpc.status.INVALID_ARGUMENT);
    expect(error?.metadata.get('marina-error-code')).toEqual(['MARINA_ERR_PRIORITY_INVALID']);
  });
});
