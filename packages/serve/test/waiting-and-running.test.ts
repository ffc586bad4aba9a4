/**
 * One definition each of "waiting" and "running" (issue 16 "One owner"): queue admission
 * (job_queue_size), describe's jobQueueStatus, the Prometheus gauges and the autoscaler all see
 * the same load. And manual scaling stays within the thread budget (issue 9). Real workers,
 * real HTTP; the autoscaler runs on a fake clock so its window is a step, not a wait.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createServerMetrics, type ServerMetrics } from '../src/metrics/server-metrics.ts';
import { managementRoutes } from '../src/routes/management.ts';
import { createAutoscaler, type AutoscalerClock } from '../src/scaling/autoscaler.ts';
import { startGateApp, until, type GateApp } from './gate-harness.ts';
import { writeGateModel } from './fixtures.ts';

const sameListener = { protocol: 'http' as const, host: '127.0.0.1', port: 0, raw: 'http://127.0.0.1:0' };
let t: GateApp;
let metrics: ServerMetrics;

beforeAll(async () => {
  t = await startGateApp({ cpuCount: 2, managementAddress: sameListener }, [
    { api: 'management', plugin: managementRoutes },
  ]);
  const folder = await writeGateModel(
    t.dir,
    'counted',
    'minWorkers: 1\nmaxWorkers: 2\nbatchSize: 1\njobQueueSize: 3\n',
  );
  await t.app.registry.register({ url: 'counted', archivePath: folder, synchronous: true });
  metrics = createServerMetrics({ registry: t.app.registry, hostname: 'test', collectProcessMetrics: false });
}, 120_000);

afterAll(async () => {
  metrics?.close();
  await t?.close();
});

function fakeClock(): AutoscalerClock & { advance(ms: number): void } {
  let now = 1_000_000;
  return {
    now: () => now,
    setInterval: () => 1,
    clearInterval: () => undefined,
    advance: (ms) => {
      now += ms;
    },
  };
}

const gauge = (text: string, name: string) =>
  Number(new RegExp(`^${name}\\{model_name="counted",model_version="1.0"\\} (\\S+)$`, 'm').exec(text)?.[1]);

describe('waiting and running, counted once', { timeout: 60_000 }, () => {
  it('admission, describe, metrics and the autoscaler agree on the same load', async () => {
    const version = t.app.registry.getVersion('counted');
    const gate = t.gate();
    const a = t.post('counted', { gate: gate.path, value: 'a' });
    await until(version, () => version.runningJobs === 1);
    // b becomes the worker's prefetched batch, c and d stay queued: three waiting.
    const rest = ['b', 'c', 'd'].map((value) => t.post('counted', { value }));
    await until(version, () => version.queue.waiting === 3);

    const full = await t.post('counted', { value: 'e' });
    expect(full.status).toBe(503);
    expect(full.json.marinaCode).toBe('MARINA_ERR_QUEUE_FULL');

    const described = (await t.call('GET', '/models/counted')).json[0];
    expect(described.jobQueueStatus).toEqual({ remainingCapacity: 0, pendingRequests: 3 });

    const text = await metrics.render();
    expect(gauge(text, 'marina_queue_depth')).toBe(3);
    expect(gauge(text, 'marina_queue_capacity')).toBe(3);
    expect(gauge(text, 'marina_busy_workers')).toBe(1);
    expect(gauge(text, 'marina_workers')).toBe(1);

    expect(t.app.registry.stats()).toEqual([
      expect.objectContaining({ queueDepth: 3, runningJobs: 1, busyWorkers: 1, workers: 1 }),
    ]);

    const clock = fakeClock();
    const scaled: Array<{ from: number; to: number; reason: string }> = [];
    const autoscaler = createAutoscaler({
      registry: t.app.registry,
      config: t.app.config,
      clock,
      knobs: { scaleUpAfterMs: 1000 },
      onScale: (e) => scaled.push(e),
    });
    await autoscaler.tick();
    clock.advance(1000);
    await autoscaler.tick();
    expect(scaled).toEqual([{ modelName: 'counted', modelVersion: '1.0', from: 1, to: 2, reason: 'behind' }]);

    // The new worker takes the queued c and d while a still blocks the first one.
    const [rb, rc, rd] = rest;
    expect((await rc!).json.value).toBe('c');
    expect((await rd!).json.value).toBe('d');
    await gate.open();
    expect((await a).json.value).toBe('a');
    expect((await rb!).json.value).toBe('b');
    await until(version, () => version.pendingJobs === 0);
    expect(t.app.registry.describe('counted')[0]!.jobQueueStatus).toEqual({ remainingCapacity: 3, pendingRequests: 0 });
    expect(gauge(await metrics.render(), 'marina_queue_depth')).toBe(0);
  });

  // '1e3' is not an integer to TorchServe's getIntParameter: without strict_parameters it is ignored
  // (management-routes.test.ts), so only the plain spelling reaches the thread budget.
  it('caps an absurd manual scale (min_worker=1000) at the thread budget with a clear 400', async () => {
    for (const spelling of ['1000']) {
      const r = await t.call('PUT', `/models/counted?min_worker=${spelling}&synchronous=true`);
      expect(r.status).toBe(400);
      expect(r.json.marinaCode).toBe('MARINA_ERR_THREAD_BUDGET_EXCEEDED');
      expect(r.json.message).toContain('at most 8 workers');
    }
    expect(t.app.registry.describe('counted')[0]!.minWorkers).toBe(1);
  });
});
