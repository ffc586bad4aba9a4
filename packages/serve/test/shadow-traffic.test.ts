/**
 * The shadow's own queue with stand-in versions (only what ShadowTraffic reads: idle workers,
 * waiting jobs, submit, 'progress'): copies run only with room, the oldest is dropped when the
 * queue is full, and the CPU-pressure gate holds copies while the machine is contended. The PSI
 * reader parses the kernel's file and turns itself off where there is none.
 */
import { EventEmitter } from 'node:events';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { createCpuPressureReader } from '../src/registry/cpu-pressure.ts';
import type { ModelVersion } from '../src/scheduling/model-version.ts';
import type { ShadowOutcome } from '../src/registry/model-registry-api.ts';
import { SHADOW_QUEUE_CAPACITY, ShadowTraffic } from '../src/registry/shadow-traffic.ts';
import { TextJobResult } from '../src/scheduling/job.ts';
import { resolveQueueSettings } from '../src/scheduling/queue-policy.ts';
import type { Job } from '../src/scheduling/job.ts';

/** A version with `workers` idle workers; submitted jobs wait until `answer()` settles them. */
function standIn(name: string, version: string, workers: number) {
  const emitter = new EventEmitter();
  const jobs: Job[] = [];
  const stand = Object.assign(emitter, {
    modelName: name,
    modelVersion: version,
    label: `model '${name}' version '${version}'`,
    handler: 'tensor',
    settings: {
      clientTimeoutMs: 0,
      queue: resolveQueueSettings({ where: 'test', yaml: {}, json: {}, clientTimeoutMs: 0 }),
    },
    pool: { readyCount: workers },
    queue: { waiting: 0 },
    submit(job: Job) {
      jobs.push(job);
    },
    answer() {
      for (const job of jobs)
        if (!job.isSettled)
          job.resolve(
            new TextJobResult(200, JSON.stringify({ outputs: [{ name: 'y', data: [1, 0] }] }), undefined, {}),
          );
      emitter.emit('progress');
    },
    jobs,
  });
  // A getter (Object.assign would copy its value once).
  Object.defineProperty(stand, 'pendingJobs', { get: () => jobs.filter((j) => !j.isSettled).length });
  return stand as typeof stand & { readonly pendingJobs: number };
}

const liveResult = new TextJobResult(200, JSON.stringify({ outputs: [{ name: 'y', data: [1, 1] }] }), undefined, {});

function copyOf(live: ReturnType<typeof standIn>, shadow: ReturnType<typeof standIn>, i: number) {
  return {
    live: live as unknown as ModelVersion,
    shadow: shadow as unknown as ModelVersion,
    requestId: `r${i}`,
    input: { body: Buffer.from('{}') },
    headers: undefined,
    bodyDecoding: undefined,
    liveResult,
  };
}

describe('ShadowTraffic', () => {
  it('runs a copy only while the shadow has an idle worker and the live version has nothing waiting', async () => {
    const outcomes: ShadowOutcome[] = [];
    const shadowTraffic = new ShadowTraffic({ onOutcome: (o) => outcomes.push(o) });
    const live = standIn('m', '1.0', 1);
    const shadow = standIn('m', '2.0', 1);
    live.queue.waiting = 3;
    shadowTraffic.offer(copyOf(live, shadow, 0));
    expect(shadow.jobs).toHaveLength(0);
    live.queue.waiting = 0;
    live.emit('progress');
    expect(shadow.jobs).toHaveLength(1);
    // The shadow's one worker is busy: the next copies wait, and past the queue's size the oldest go.
    for (let i = 1; i <= SHADOW_QUEUE_CAPACITY + 3; i++) shadowTraffic.offer(copyOf(live, shadow, i));
    expect(shadowTraffic.waiting).toBe(SHADOW_QUEUE_CAPACITY);
    expect(outcomes.filter((o) => o.outcome === 'dropped')).toHaveLength(3);
    shadow.answer();
    await Promise.resolve();
    await Promise.resolve();
    expect(shadowTraffic.stats('m', '2.0')).toMatchObject({ requests: 1, compared: 1, dropped: 3, method: 'cosine' });
    // cos([1,1],[1,0]) = 1/√2.
    expect(shadowTraffic.stats('m', '2.0')!.agreementSum).toBeCloseTo(Math.SQRT1_2, 12);
    // The answered copy freed the worker: the next one started.
    expect(shadow.jobs).toHaveLength(2);
    expect(shadow.jobs[1]!.requestId).toBe('r4-shadow');
    shadowTraffic.close();
    expect(shadowTraffic.waiting).toBe(0);
  });

  it('holds copies while the CPU pressure is at or above the limit, and sheds them when the queue fills', () => {
    let pressure: number | undefined = 80;
    const shadowTraffic = new ShadowTraffic({
      onOutcome: () => undefined,
      cpuPressure: () => pressure,
      maxCpuPressurePercent: 50,
    });
    const live = standIn('m', '1.0', 1);
    const shadow = standIn('m', '2.0', 1);
    for (let i = 0; i < SHADOW_QUEUE_CAPACITY + 2; i++) shadowTraffic.offer(copyOf(live, shadow, i));
    expect(shadow.jobs).toHaveLength(0);
    expect(shadowTraffic.stats('m', '2.0')!.dropped).toBe(2);
    pressure = 10;
    live.emit('progress');
    expect(shadow.jobs).toHaveLength(1);
    // Unknown pressure (no PSI) does not hold copies.
    pressure = undefined;
    shadow.answer();
    expect(shadow.jobs).toHaveLength(2);
    shadowTraffic.close();
  });
});

describe('createCpuPressureReader', () => {
  const dir = mkdtempSync(join(tmpdir(), 'marina-psi-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it("reads 'some avg10' at most once per interval", () => {
    const path = join(dir, 'cpu');
    writeFileSync(
      path,
      'some avg10=12.50 avg60=3.00 avg300=1.00 total=1\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n',
    );
    let now = 0;
    const read = createCpuPressureReader({ path, maxAgeMs: 1000, now: () => now });
    expect(read()).toBe(12.5);
    writeFileSync(path, 'some avg10=90.00 avg60=3.00 avg300=1.00 total=2\n');
    now = 500;
    expect(read()).toBe(12.5);
    now = 1500;
    expect(read()).toBe(90);
  });

  it('is undefined, for good, where the kernel has no PSI', () => {
    const read = createCpuPressureReader({ path: join(dir, 'missing'), maxAgeMs: 0 });
    expect(read()).toBeUndefined();
    expect(read()).toBeUndefined();
  });
});
