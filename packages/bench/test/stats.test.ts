import { describe, expect, it } from 'vitest';
import { percentile, summarizeLatencies } from '../src/stats.ts';

describe('latency statistics', () => {
  it('uses nearest-rank percentiles', () => {
    const sorted = Array.from({ length: 100 }, (_, i) => i + 1);
    expect(percentile(sorted, 50)).toBe(50);
    expect(percentile(sorted, 90)).toBe(90);
    expect(percentile(sorted, 99)).toBe(99);
    expect(percentile([7], 99)).toBe(7);
  });

  it('summarises unsorted input without changing it', () => {
    const input = [30, 10, 20];
    const summary = summarizeLatencies(input);
    expect(summary).toMatchObject({ count: 3, meanMs: 20, p50Ms: 20, maxMs: 30 });
    expect(input).toEqual([30, 10, 20]);
  });

  it('gives NaN, not zero, for an empty run', () => {
    expect(Number.isNaN(summarizeLatencies([]).p50Ms)).toBe(true);
  });
});
