/** How activation ranges are chosen from the calibration samples. */
export type CalibrationMethod = 'minmax' | 'percentile' | 'entropy';

export const CALIBRATION_METHODS: readonly CalibrationMethod[] = ['minmax', 'percentile', 'entropy'];

/** Bins of the |x| histogram percentile and entropy work on (onnxruntime uses 2048 too). */
export const HISTOGRAM_BINS = 2048;
/** Default percentile of |x| kept by the percentile method. */
export const DEFAULT_PERCENTILE = 99.999;

export interface TensorRange {
  min: number;
  max: number;
}

/** The observed min and max of one tensor over all samples. */
export class MinMaxCollector {
  readonly ranges = new Map<string, TensorRange>();

  add(name: string, values: ArrayLike<number>): void {
    let min = Infinity;
    let max = -Infinity;
    for (let i = 0; i < values.length; i++) {
      const v = values[i]!;
      if (v < min) min = v;
      if (v > max) max = v;
    }
    const r = this.ranges.get(name);
    if (!r) this.ranges.set(name, { min, max });
    else {
      r.min = Math.min(r.min, min);
      r.max = Math.max(r.max, max);
    }
  }
}

/**
 * Histograms of |x| per tensor over [0, absmax] (absmax from a first min/max pass), so
 * percentile and entropy see every sample with the same bins.
 */
export class HistogramCollector {
  readonly histograms = new Map<string, { counts: Float64Array; absMax: number }>();

  constructor(
    private readonly ranges: Map<string, TensorRange>,
    private readonly bins = HISTOGRAM_BINS,
  ) {}

  add(name: string, values: ArrayLike<number>): void {
    const range = this.ranges.get(name);
    if (!range) return;
    let h = this.histograms.get(name);
    if (!h) {
      h = { counts: new Float64Array(this.bins), absMax: Math.max(Math.abs(range.min), Math.abs(range.max)) };
      this.histograms.set(name, h);
    }
    if (h.absMax === 0) {
      h.counts[0]! += values.length;
      return;
    }
    const scale = this.bins / h.absMax;
    for (let i = 0; i < values.length; i++) {
      const bin = Math.min(this.bins - 1, Math.floor(Math.abs(values[i]!) * scale));
      h.counts[bin]! += 1;
    }
  }
}

/** The |x| threshold below which `percentile` % of the histogram's mass lies (upper edge of that bin). */
export function percentileThreshold(counts: Float64Array, absMax: number, percentile: number): number {
  const total = counts.reduce((a, b) => a + b, 0);
  const target = (total * percentile) / 100;
  let cumulative = 0;
  for (let i = 0; i < counts.length; i++) {
    cumulative += counts[i]!;
    if (cumulative >= target) return ((i + 1) * absMax) / counts.length;
  }
  return absMax;
}

/**
 * TensorRT's entropy calibration: the |x| threshold whose clipped, `levels`-level quantised
 * distribution Q is closest (Kullback–Leibler) to the clipped reference P.
 */
export function entropyThreshold(counts: Float64Array, absMax: number, levels: number): number {
  const bins = counts.length;
  if (bins <= levels) return absMax;
  let bestKl = Infinity;
  let bestI = bins;
  const p = new Float64Array(bins);
  const q = new Float64Array(bins);
  for (let i = levels; i <= bins; i++) {
    // Reference: the first i bins, with everything beyond folded into the last one.
    p.fill(0);
    for (let j = 0; j < i; j++) p[j] = counts[j]!;
    let outliers = 0;
    for (let j = i; j < bins; j++) outliers += counts[j]!;
    p[i - 1]! += outliers;
    // Candidate: the first i bins merged into `levels` groups, each spread over its non-empty bins.
    q.fill(0);
    const perLevel = i / levels;
    for (let level = 0; level < levels; level++) {
      const start = Math.floor(level * perLevel);
      const end = level === levels - 1 ? i : Math.floor((level + 1) * perLevel);
      let sum = 0;
      let nonEmpty = 0;
      for (let j = start; j < end; j++) {
        sum += counts[j]!;
        if (counts[j]! > 0) nonEmpty++;
      }
      if (nonEmpty === 0) continue;
      for (let j = start; j < end; j++) if (counts[j]! > 0) q[j] = sum / nonEmpty;
    }
    let pSum = 0;
    let qSum = 0;
    for (let j = 0; j < i; j++) {
      pSum += p[j]!;
      qSum += q[j]!;
    }
    if (pSum === 0 || qSum === 0) continue;
    let kl = 0;
    for (let j = 0; j < i; j++) {
      const pj = p[j]! / pSum;
      if (pj === 0) continue;
      const qj = q[j]! / qSum;
      kl += qj === 0 ? pj * 20 : pj * Math.log(pj / qj); // an empty candidate bin under real mass costs a large penalty
    }
    if (kl < bestKl) {
      bestKl = kl;
      bestI = i;
    }
  }
  return (bestI * absMax) / bins;
}

/**
 * The activation range of one tensor for a method: min/max as observed; percentile and
 * entropy clip both ends at a threshold on |x| (entropy uses 255 levels for tensors that are
 * never negative, 128 for signed ones, as uint8 gives them).
 */
export function chooseRange(
  method: CalibrationMethod,
  range: TensorRange,
  histogram: { counts: Float64Array; absMax: number } | undefined,
  options: { percentile?: number } = {},
): TensorRange {
  if (method === 'minmax' || !histogram) return { min: range.min, max: range.max };
  const threshold =
    method === 'percentile'
      ? percentileThreshold(histogram.counts, histogram.absMax, options.percentile ?? DEFAULT_PERCENTILE)
      : entropyThreshold(histogram.counts, histogram.absMax, range.min >= 0 ? 255 : 128);
  return { min: Math.max(range.min, -threshold), max: Math.min(range.max, threshold) };
}
