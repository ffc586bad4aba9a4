/**
 * A poison request fails its own batch only (issue 16 "Failures stay local", issue 9
 * "Resilience"): real worker threads running a custom handler that blocks on a gate file,
 * exits, throws, or fills its heap. Every wait is on the model version's own state.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGateApp, until, type GateApp } from './gate-harness.ts';
import { writeGateModel } from './fixtures.ts';

let t: GateApp;

beforeAll(async () => {
  t = await startGateApp();
  const models: Array<[string, string, Record<string, unknown>]> = [
    ['exiting', 'minWorkers: 1\nbatchSize: 1\n', {}],
    ['throwing', 'minWorkers: 1\nbatchSize: 2\nmaxBatchDelay: 100000\n', {}],
    ['stuck', 'minWorkers: 1\nbatchSize: 1\n', { responseTimeoutSec: 1 }],
    ['greedy', 'minWorkers: 1\nbatchSize: 1\nmaxWorkerHeapMb: 192\n', {}],
  ];
  for (const [name, yaml, extra] of models) {
    const folder = await writeGateModel(t.dir, name, yaml);
    await t.app.registry.register({ url: name, archivePath: folder, synchronous: true, ...extra });
  }
}, 120_000);

afterAll(async () => {
  await t?.close();
});

const workerIds = (model: string) => t.app.registry.describe(model)[0]!.workers.map((w) => w.id);

describe('a poison request', { timeout: 60_000 }, () => {
  it('that calls process.exit fails its own batch; the batch before it is delivered and the queue waits for the replacement', async () => {
    const version = t.app.registry.getVersion('exiting');
    const gate = t.gate();
    const before = workerIds('exiting');
    const a = t.post('exiting', { gate: gate.path, value: 'a' });
    await until(version, () => version.runningJobs === 1);
    const b = t.post('exiting', { exit: true, value: 'b' });
    await until(version, () => version.queue.waiting === 1);
    const c = t.post('exiting', { value: 'c' });
    await until(version, () => version.queue.waiting === 2);
    await gate.open();

    const [ra, rb, rc] = await Promise.all([a, b, c]);
    expect(ra.status).toBe(200);
    expect(ra.json.value).toBe('a');
    expect(rb.status).toBe(500);
    expect(rb.json).toMatchObject({ code: 500, marinaCode: 'MARINA_ERR_WORKER_DIED' });
    expect(rb.json.message).toContain('Worker died.');
    expect(rb.json.message).toContain('exited unexpectedly with code 7');
    expect(rb.json.details).toBeUndefined();
    // c was handed to the dying worker ahead of time but never started: it went back to the
    // front of the queue and the replacement worker ran it.
    expect(rc.status).toBe(200);
    expect(rc.json.value).toBe('c');
    const after = workerIds('exiting');
    expect(after).toHaveLength(1);
    expect(after[0]).not.toBe(before[0]);
  });

  it("that throws fails its own batch with the handler's error and nothing else; the worker stays", async () => {
    const version = t.app.registry.getVersion('throwing');
    const gate = t.gate();
    const before = workerIds('throwing');
    const a = t.post('throwing', { gate: gate.path, value: 'a' });
    await until(version, () => version.runningJobs === 1);
    const b = t.post('throwing', { throw: 'poison row', value: 'b' });
    const c = t.post('throwing', { value: 'c' });
    await until(version, () => version.queue.waiting === 2 && version.queue.size === 0);
    const d = t.post('throwing', { value: 'd' });
    await until(version, () => version.queue.size === 1);
    await gate.open();

    const [ra, rb, rc, rd] = await Promise.all([a, b, c, d]);
    expect(ra.status).toBe(200);
    // b and c were one batch (batchSize 2): the handler failed it as a whole, as in TorchServe.
    for (const r of [rb, rc]) {
      expect(r.status).toBe(503);
      expect(r.json).toMatchObject({
        marinaCode: 'MARINA_ERR_HANDLER_FAILED',
        message: 'Prediction failed',
        hint: 'poison row',
      });
      expect(r.json.details).toBeUndefined();
    }
    expect(rd.status).toBe(200);
    expect(rd.json.value).toBe('d');
    expect(workerIds('throwing')).toEqual(before);
  });

  it('that blocks past responseTimeout is answered 504 whatever the thread does; the next batch runs on the replacement', async () => {
    const version = t.app.registry.getVersion('stuck');
    const gate = t.gate();
    const before = workerIds('stuck');
    const a = t.post('stuck', { gate: gate.path, value: 'a' });
    await until(version, () => version.runningJobs === 1);
    const b = t.post('stuck', { value: 'b' });
    await until(version, () => version.queue.waiting === 1);

    const ra = await a;
    expect(ra.status).toBe(504);
    expect(ra.json.marinaCode).toBe('MARINA_ERR_RESPONSE_TIMEOUT');
    const rb = await b;
    expect(rb.status).toBe(200);
    expect(rb.json.value).toBe('b');
    expect(workerIds('stuck')).toHaveLength(1);
    expect(workerIds('stuck')[0]).not.toBe(before[0]);
    await gate.open();
  });

  it('that fills its heap ends only its own worker (507), not the server', async () => {
    const before = workerIds('greedy');
    const r = await t.post('greedy', { grow: true });
    expect(r.status).toBe(507);
    expect(r.json.marinaCode).toBe('MARINA_ERR_WORKER_OUT_OF_MEMORY');
    expect(r.json.message).toContain('limit 192 MB');
    const next = await t.post('greedy', { value: 'after' });
    expect(next.status).toBe(200);
    expect(next.json.value).toBe('after');
    expect(workerIds('greedy')[0]).not.toBe(before[0]);
  });
});
