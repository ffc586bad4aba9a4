import { readFileSync } from 'node:fs';

/** Latency summary of one measured run, all in milliseconds. */
export interface LatencySummary {
  count: number;
  meanMs: number;
  p50Ms: number;
  p90Ms: number;
  p99Ms: number;
  maxMs: number;
}

/**
 * Nearest-rank percentile (the value below which `p`% of samples fall), as perf_analyzer
 * and wrk report it. `sortedMs` must be sorted ascending. Returns NaN for no samples.
 */
export function percentile(sortedMs: readonly number[], p: number): number {
  if (sortedMs.length === 0) return Number.NaN;
  const rank = Math.ceil((p / 100) * sortedMs.length);
  return sortedMs[Math.min(sortedMs.length, Math.max(1, rank)) - 1]!;
}

/** Summarises latencies in ms; an empty list gives NaN everywhere and count 0. */
export function summarizeLatencies(latenciesMs: readonly number[]): LatencySummary {
  const sorted = [...latenciesMs].sort((a, b) => a - b);
  const sum = sorted.reduce((acc, v) => acc + v, 0);
  return {
    count: sorted.length,
    meanMs: sorted.length === 0 ? Number.NaN : sum / sorted.length,
    p50Ms: percentile(sorted, 50),
    p90Ms: percentile(sorted, 90),
    p99Ms: percentile(sorted, 99),
    maxMs: sorted.length === 0 ? Number.NaN : sorted[sorted.length - 1]!,
  };
}

/** Median of a list (NaN when empty); used for repeated single-run timings. */
export function median(values: readonly number[]): number {
  return percentile(
    [...values].sort((a, b) => a - b),
    50,
  );
}

/** Repeats of one measurement judged together (see `bestOfRepeats`). */
export interface RepeatVerdict {
  /** Index of the best repeat (highest value: a load spike only ever slows a run down). */
  bestIndex: number;
  best: number;
  /** (best − second best) / best; 0 with one repeat. */
  spread: number;
  /** True when no second repeat comes within `tolerance` of the best: the value cannot be trusted. */
  isNoisy: boolean;
}

/**
 * Picks the best of repeated throughput measurements and says whether it is stable: another
 * repeat must come within `tolerance` (a fraction, default 0.25) of it. A single repeat is
 * never called noisy. Throws nothing; an empty list gives NaN and isNoisy false.
 */
export function bestOfRepeats(values: readonly number[], tolerance = 0.25): RepeatVerdict {
  if (values.length === 0) return { bestIndex: -1, best: Number.NaN, spread: 0, isNoisy: false };
  let bestIndex = 0;
  values.forEach((v, i) => {
    if (v > values[bestIndex]!) bestIndex = i;
  });
  const best = values[bestIndex]!;
  if (values.length === 1) return { bestIndex, best, spread: 0, isNoisy: false };
  const second = Math.max(...values.filter((_, i) => i !== bestIndex));
  const spread = best > 0 ? (best - second) / best : 0;
  return { bestIndex, best, spread, isNoisy: spread > tolerance };
}

/** The machine's 1-minute load average from /proc/loadavg, or NaN where there is none. */
export function readLoadAverage(): number {
  try {
    return Number(readFileSync('/proc/loadavg', 'utf8').split(' ')[0]);
  } catch {
    return Number.NaN;
  }
}
