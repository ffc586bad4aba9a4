import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGateApp, until, type GateApp } from './gate-harness.ts';
import { writeGateModel } from './fixtures.ts';

describe('close()', { timeout: 60_000 }, () => {
  let t: GateApp;

  beforeAll(async () => {
    t = await startGateApp();
    const folder = await writeGateModel(t.dir, 'closing', 'minWorkers: 1\nbatchSize: 1\n');
    await t.app.registry.register({ url: 'closing', archivePath: folder, synchronous: true });
  }, 60_000);

  afterAll(async () => {
    await t?.close();
  });

  it('lets running and queued requests finish, then refuses new ones and stops the workers', async () => {
    const version = t.app.registry.getVersion('closing');
    const gate = t.gate();
    const running = t.post('closing', { gate: gate.path, value: 1 });
    await until(version, () => version.runningJobs === 1);
    const queued = t.post('closing', { value: 2 });
    await until(version, () => version.queue.waiting === 1);
    const closed = t.app.close();
    await gate.open();
    const responses = await Promise.all([running, queued]);
    expect(responses.map((r) => [r.status, r.json.value])).toEqual([
      [200, 1],
      [200, 2],
    ]);
    await closed;
    await expect(
      t.app.registry.predict({ modelName: 'closing', requestId: 'x', input: { body: {} } }),
    ).rejects.toMatchObject({ code: 'MARINA_ERR_SERVER_CLOSING' });
    await version.pool.exited();
    expect(version.pool.threadCount).toBe(0);
  });
});
