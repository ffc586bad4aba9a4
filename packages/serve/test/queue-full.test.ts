import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGateApp, until, type GateApp } from './gate-harness.ts';
import { writeGateModel } from './fixtures.ts';

describe('a full job queue', { timeout: 60_000 }, () => {
  let t: GateApp;

  beforeAll(async () => {
    t = await startGateApp();
    const folder = await writeGateModel(t.dir, 'busy', 'minWorkers: 1\nbatchSize: 1\njobQueueSize: 2\n');
    await t.app.registry.register({ url: 'busy', archivePath: folder, synchronous: true });
  }, 60_000);

  afterAll(async () => {
    await t?.close();
  });

  it('answers 503 at once with Retry-After and a message naming the queue, while queued requests still succeed', async () => {
    const version = t.app.registry.getVersion('busy');
    const gate = t.gate();
    const first = t.post('busy', { gate: gate.path, value: 0 });
    await until(version, () => version.runningJobs === 1);
    // The running request does not count; the queue's two places (one of them the worker's
    // prefetched batch) are what is left.
    const accepted = [1, 2].map((value) => t.post('busy', { value }));
    await until(version, () => version.queue.waiting === 2);
    const rejected = await Promise.all([3, 4, 5].map((value) => t.post('busy', { value })));
    for (const r of rejected) {
      expect(r.status).toBe(503);
      expect(r.headers.get('retry-after')).toBe('1');
      expect(r.json).toMatchObject({
        code: 503,
        type: 'ServiceUnavailableException',
        marinaCode: 'MARINA_ERR_QUEUE_FULL',
      });
      // TorchServe's own sentence for a full queue (protocols/torchserve-texts.ts); Marina's, naming the queue, in the hint.
      expect(r.json.message).toBe(
        'Model "busy" has no worker to serve inference request. Please use scale workers API to add workers.',
      );
      expect(r.json.hint).toContain("model 'busy'");
      expect(r.json.hint).toContain('queue is full (2 requests waiting');
    }
    await gate.open();
    const ok = await Promise.all([first, ...accepted]);
    expect(ok.map((r) => [r.status, r.json.value])).toEqual([
      [200, 0],
      [200, 1],
      [200, 2],
    ]);
  });
});
