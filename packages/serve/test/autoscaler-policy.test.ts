import { afterEach, describe, expect, it } from 'vitest';
import {
  createAutoscaler,
  decideWorkerCount,
  DEFAULT_AUTOSCALING_KNOBS,
  type AutoscalerClock,
  type ScalingState,
} from '../src/scaling/autoscaler.ts';
import type { MarinaApp } from '../src/index.ts';
import type { ModelVersion } from '../src/scheduling/model-version.ts';
import { startGateApp, until, type GateApp } from './gate-harness.ts';
import { writeGateModel } from './fixtures.ts';

const knobs = { intervalMs: 1000, scaleUpQueueDepth: 1, scaleUpAfterMs: 3000, scaleDownIdleMs: 10_000 };
const state = (over: Partial<ScalingState> = {}): ScalingState => ({
  workers: 2,
  minWorkers: 1,
  maxWorkers: 4,
  behindSinceMs: undefined,
  idleSinceMs: undefined,
  nowMs: 100_000,
  threadsPerWorker: 1,
  threadsInUse: 2,
  threadBudget: 8,
  isThreadBudgetEnforced: true,
  ...over,
});

describe('decideWorkerCount', () => {
  it('adds one worker once the queue has stayed deep for scaleUpAfterMs', () => {
    expect(decideWorkerCount(state({ behindSinceMs: 100_000 - 2999 }), knobs)).toEqual({
      workers: 2,
      reason: 'steady',
    });
    expect(decideWorkerCount(state({ behindSinceMs: 100_000 - 3000 }), knobs)).toEqual({
      workers: 3,
      reason: 'behind',
    });
  });

  it('never goes above maxWorkers', () => {
    expect(decideWorkerCount(state({ workers: 4, behindSinceMs: 0 }), knobs)).toEqual({ workers: 4, reason: 'at-max' });
  });

  it("stays within the machine's thread budget unless threads were pinned", () => {
    const full = state({ behindSinceMs: 0, threadsPerWorker: 2, threadsInUse: 7, threadBudget: 8 });
    expect(decideWorkerCount(full, knobs)).toEqual({ workers: 2, reason: 'thread-budget' });
    expect(decideWorkerCount({ ...full, isThreadBudgetEnforced: false }, knobs)).toEqual({
      workers: 3,
      reason: 'behind',
    });
  });

  it('gives one worker back after scaleDownIdleMs of spare capacity, never below minWorkers', () => {
    expect(decideWorkerCount(state({ idleSinceMs: 100_000 - 9999 }), knobs).workers).toBe(2);
    expect(decideWorkerCount(state({ idleSinceMs: 0 }), knobs)).toEqual({ workers: 1, reason: 'idle' });
    expect(decideWorkerCount(state({ workers: 1, idleSinceMs: 0 }), knobs)).toEqual({ workers: 1, reason: 'at-min' });
  });

  it('leaves counts outside [min, max] to the scale API', () => {
    expect(decideWorkerCount(state({ workers: 0, minWorkers: 1, behindSinceMs: 0 }), knobs).reason).toBe(
      'outside-range',
    );
  });
});

function fakeClock(start = 1_000_000): AutoscalerClock & { advance(ms: number): void } {
  let now = start;
  return {
    now: () => now,
    setInterval: () => 1,
    clearInterval: () => undefined,
    advance: (ms) => {
      now += ms;
    },
  };
}

/**
 * The controller against the real registry: real workers of a gate model (a row with `gate`
 * blocks its worker until the file exists), so the queue depth it samples is real load. Only
 * the clock is fake, so a window of evidence is a step, not a wait.
 */
describe('createAutoscaler on the real registry', { timeout: 120_000 }, () => {
  let t: GateApp | undefined;
  afterEach(async () => {
    await t?.close();
    t = undefined;
  });

  async function setup(options: { cpuCount?: number; ompNumThreads?: number; other?: boolean } = {}) {
    t = await startGateApp({ cpuCount: options.cpuCount ?? 8, ompNumThreads: options.ompNumThreads });
    const folder = await writeGateModel(t.dir, 'm', 'minWorkers: 1\nmaxWorkers: 3\nbatchSize: 1\n');
    await t.app.registry.register({ url: 'm', archivePath: folder, synchronous: true });
    if (options.other) {
      const other = await writeGateModel(t.dir, 'other', 'minWorkers: 1\nbatchSize: 1\n');
      await t.app.registry.register({ url: 'other', archivePath: other, synchronous: true });
    }
    const clock = fakeClock();
    const scaled: Array<{ from: number; to: number; reason: string; error?: Error }> = [];
    const autoscaler = createAutoscaler({
      registry: t.app.registry,
      config: t.app.config,
      knobs,
      clock,
      onScale: (e) => scaled.push(e),
    });
    return { app: t.app, version: t.app.registry.getVersion('m'), clock, autoscaler, scaled, harness: t };
  }

  /** Blocks every worker of `version` and queues `queued` more requests behind them; resolves once they wait. */
  async function load(harness: GateApp, version: ModelVersion, queued: number) {
    const gate = harness.gate();
    const workers = version.pool.readyCount;
    const replies = [];
    for (let i = 0; i < workers; i++) replies.push(harness.post('m', { gate: gate.path }));
    await until(version, () => version.runningJobs === workers);
    for (let i = 0; i < queued; i++) replies.push(harness.post('m', { value: i }));
    await until(version, () => version.queue.waiting === queued);
    return { gate, replies };
  }

  const workersOf = (app: MarinaApp) => app.registry.describe('m')[0]!.workers.length;

  it('scales up under a sustained deep queue and back down when idle, one step at a time', async () => {
    const { app, version, clock, autoscaler, scaled, harness } = await setup();
    const busy = await load(harness, version, 5);
    for (let i = 0; i < 3; i++) {
      await autoscaler.tick();
      clock.advance(1000);
    }
    expect(workersOf(app)).toBe(1);
    await autoscaler.tick();
    expect(scaled.at(-1)).toMatchObject({ from: 1, to: 2, reason: 'behind' });
    expect(workersOf(app)).toBe(2);
    // The window restarts after a move: one more tick is not enough evidence for a third worker.
    clock.advance(1000);
    await autoscaler.tick();
    expect(workersOf(app)).toBe(2);

    await busy.gate.open();
    for (const reply of await Promise.all(busy.replies)) expect(reply.status).toBe(200);
    await until(version, () => version.pendingJobs === 0);
    for (let elapsed = 0; elapsed <= 10_000; elapsed += 1000) {
      await autoscaler.tick();
      clock.advance(1000);
    }
    expect(workersOf(app)).toBe(1);
    expect(autoscaler.describe('m', '1.0')).toMatchObject({
      lastScaledFrom: 2,
      lastScaledTo: 1,
      lastReason: 'idle',
      scaleDownIdleMs: 10_000,
    });
  });

  it('does not count a queue that drains between samples as sustained', async () => {
    const { app, version, clock, autoscaler, harness } = await setup();
    for (let i = 0; i < 3; i++) {
      const busy = await load(harness, version, 3);
      await autoscaler.tick();
      clock.advance(1000);
      await busy.gate.open();
      await Promise.all(busy.replies);
      await until(version, () => version.pendingJobs === 0);
      await autoscaler.tick();
      clock.advance(1000);
    }
    expect(workersOf(app)).toBe(1);
  });

  it('shares the thread budget across models', async () => {
    const { app, version, clock, autoscaler, scaled, harness } = await setup({ cpuCount: 2, other: true });
    const busy = await load(harness, version, 5);
    for (let i = 0; i < 6; i++) {
      await autoscaler.tick();
      clock.advance(1000);
    }
    expect(workersOf(app)).toBe(1);
    expect(scaled).toEqual([]);
    await busy.gate.open();
    await Promise.all(busy.replies);
  });

  it('ignores the thread budget when OMP_NUM_THREADS pins threads', async () => {
    const { app, version, clock, autoscaler, scaled, harness } = await setup({ cpuCount: 1, ompNumThreads: 1 });
    const busy = await load(harness, version, 5);
    for (let i = 0; i < 5 && workersOf(app) < 2; i++) {
      await autoscaler.tick();
      clock.advance(1000);
    }
    expect(workersOf(app)).toBe(2);
    expect(scaled[0]).toMatchObject({ from: 1, to: 2, reason: 'behind' });
    await busy.gate.open();
    await Promise.all(busy.replies);
  });

  it('exposes its knobs for describe', async () => {
    const { autoscaler } = await setup();
    autoscaler.start();
    expect(autoscaler.describe('m', '1.0')).toMatchObject({
      enabled: true,
      ...knobs,
      threadBudget: 8,
      isThreadBudgetEnforced: true,
    });
    autoscaler.stop();
    expect(DEFAULT_AUTOSCALING_KNOBS.scaleUpQueueDepth).toBe(1);
  });
});
