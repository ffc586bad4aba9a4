import { describe, expect, it } from 'vitest';
import { createAutoscaler, decideWorkerCount, DEFAULT_AUTOSCALING_KNOBS, type AutoscalerClock, type ScalingState } from '../src/scaling/autoscaler.ts';
import { StandInRegistry, testConfig } from './management-stand-in-registry.ts';

const knobs = { intervalMs: 1000, scaleUpQueueDepth: 1, scaleUpAfterMs: 3000, scaleDownIdleMs: 10_000 };
const state = (over: Partial<ScalingState> = {}): ScalingState => ({
  workers: 2, minWorkers: 1, maxWorkers: 4, behindSinceMs: undefined, idleSinceMs: undefined, nowMs: 100_000,
  threadsPerWorker: 1, threadsInUse: 2, threadBudget: 8, isThreadBudgetEnforced: true, ...over,
});

describe('decideWorkerCount', () => {
  it('adds one worker once the queue has stayed deep for scaleUpAfterMs', () => {
    expect(decideWorkerCount(state({ behindSinceMs: 100_000 - 2999 }), knobs)).toEqual({ workers: 2, reason: 'steady' });
    expect(decideWorkerCount(state({ behindSinceMs: 100_000 - 3000 }), knobs)).toEqual({ workers: 3, reason: 'behind' });
  });

  it('never goes above maxWorkers', () => {
    expect(decideWorkerCount(state({ workers: 4, behindSinceMs: 0 }), knobs)).toEqual({ workers: 4, reason: 'at-max' });
  });

  it('stays within the machine\'s thread budget unless threads were pinned', () => {
    const full = state({ behindSinceMs: 0, threadsPerWorker: 2, threadsInUse: 7, threadBudget: 8 });
    expect(decideWorkerCount(full, knobs)).toEqual({ workers: 2, reason: 'thread-budget' });
    expect(decideWorkerCount({ ...full, isThreadBudgetEnforced: false }, knobs)).toEqual({ workers: 3, reason: 'behind' });
  });

  it('gives one worker back after scaleDownIdleMs of spare capacity, never below minWorkers', () => {
    expect(decideWorkerCount(state({ idleSinceMs: 100_000 - 9999 }), knobs).workers).toBe(2);
    expect(decideWorkerCount(state({ idleSinceMs: 0 }), knobs)).toEqual({ workers: 1, reason: 'idle' });
    expect(decideWorkerCount(state({ workers: 1, idleSinceMs: 0 }), knobs)).toEqual({ workers: 1, reason: 'at-min' });
  });

  it('leaves counts outside [min, max] to the scale API', () => {
    expect(decideWorkerCount(state({ workers: 0, minWorkers: 1, behindSinceMs: 0 }), knobs).reason).toBe('outside-range');
  });
});

function fakeClock(start = 1_000_000): AutoscalerClock & { advance(ms: number): void } {
  let now = start;
  return { now: () => now, setInterval: () => 1, clearInterval: () => undefined, advance: (ms) => { now += ms; } };
}

describe('createAutoscaler', () => {
  async function setup(over: Parameters<typeof testConfig>[0] = {}) {
    const registry = new StandInRegistry();
    await registry.register({ url: 'm.mar', archivePath: '/s/m.mar', initialWorkers: 1, minWorkers: 1, maxWorkers: 3 });
    const clock = fakeClock();
    const autoscaler = createAutoscaler({ registry, config: testConfig({ cpuCount: 8, ...over }), knobs, clock });
    return { registry, clock, autoscaler, entry: registry.entry('m') };
  }

  it('scales up under a sustained deep queue and back down when idle, one step at a time', async () => {
    const { clock, autoscaler, entry } = await setup();
    entry.queueDepth = 5;
    entry.busyWorkers = 1;
    for (let i = 0; i < 3; i++) { await autoscaler.tick(); clock.advance(1000); }
    expect(entry.workers).toBe(1);
    await autoscaler.tick();
    expect(entry.workers).toBe(2);
    // The window restarts after a move: one more tick is not enough evidence for a third worker.
    clock.advance(1000);
    await autoscaler.tick();
    expect(entry.workers).toBe(2);

    entry.queueDepth = 0;
    entry.busyWorkers = 0;
    for (let t = 0; t <= 10_000; t += 1000) { await autoscaler.tick(); clock.advance(1000); }
    expect(entry.workers).toBe(1);
    expect(autoscaler.describe('m', '1.0')).toMatchObject({ lastScaledFrom: 2, lastScaledTo: 1, lastReason: 'idle', scaleDownIdleMs: 10_000 });
  });

  it('does not count a queue that drains between samples as sustained', async () => {
    const { clock, autoscaler, entry } = await setup();
    for (let i = 0; i < 6; i++) {
      entry.queueDepth = i % 2 === 0 ? 5 : 0;
      entry.busyWorkers = 1;
      await autoscaler.tick();
      clock.advance(1000);
    }
    expect(entry.workers).toBe(1);
  });

  it('shares the thread budget across models', async () => {
    const { registry, clock, autoscaler, entry } = await setup({ cpuCount: 2 });
    await registry.register({ url: 'other.mar', archivePath: '/s/other.mar', initialWorkers: 1 });
    entry.queueDepth = 10;
    entry.busyWorkers = 1;
    for (let i = 0; i < 10; i++) { await autoscaler.tick(); clock.advance(1000); }
    expect(entry.workers).toBe(1);
  });

  it('ignores the thread budget when OMP_NUM_THREADS pins threads', async () => {
    const { registry, clock, autoscaler, entry } = await setup({ cpuCount: 1, ompNumThreads: 1 });
    entry.queueDepth = 10;
    entry.busyWorkers = 1;
    for (let i = 0; i < 5; i++) { await autoscaler.tick(); clock.advance(1000); }
    expect(entry.workers).toBe(2);
    expect(registry.calls).toContain('setWorkerCount m 1.0 2');
  });

  it('exposes its knobs for describe', async () => {
    const { autoscaler } = await setup();
    autoscaler.start();
    expect(autoscaler.describe('m', '1.0')).toMatchObject({ enabled: true, ...knobs, threadBudget: 8, isThreadBudgetEnforced: true });
    autoscaler.stop();
    expect(DEFAULT_AUTOSCALING_KNOBS.scaleUpQueueDepth).toBe(1);
  });
});
