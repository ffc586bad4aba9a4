import { existsSync, readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { bestOfRepeats, readLoadAverage } from '../src/stats.ts';

describe('best of repeated measurements', () => {
  it('keeps the fastest repeat, since a load spike only slows a run down', () => {
    const verdict = bestOfRepeats([12.1, 13.9]);
    expect(verdict).toMatchObject({ bestIndex: 1, best: 13.9, isNoisy: false });
    expect(verdict.spread).toBeCloseTo((13.9 - 12.1) / 13.9, 10);
  });

  it('calls repeats noisy when none comes within 25% of the best', () => {
    // The spike of 2026-11-22: batch 8 at 4.5 img/s against 13.9 normally.
    expect(bestOfRepeats([4.5, 13.9]).isNoisy).toBe(true);
  });

  it('is stable when a retry agrees with the best even if an earlier repeat was hit', () => {
    expect(bestOfRepeats([4.5, 13.9, 13.2])).toMatchObject({ best: 13.9, isNoisy: false });
  });

  it('honours a custom tolerance', () => {
    expect(bestOfRepeats([9, 10], 0.05).isNoisy).toBe(true);
    expect(bestOfRepeats([9, 10], 0.2).isNoisy).toBe(false);
  });

  it('never calls a single repeat noisy, and gives NaN for none', () => {
    expect(bestOfRepeats([7])).toMatchObject({ best: 7, bestIndex: 0, isNoisy: false, spread: 0 });
    expect(Number.isNaN(bestOfRepeats([]).best)).toBe(true);
  });

  it.runIf(existsSync('/proc/loadavg'))('reads the 1-minute load average from /proc/loadavg', () => {
    expect(readLoadAverage()).toBe(Number(readFileSync('/proc/loadavg', 'utf8').split(' ')[0]));
  });
});
