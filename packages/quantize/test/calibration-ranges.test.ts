import { describe, expect, it } from 'vitest';
import {
  activationParams,
  chooseRange,
  compareOutputs,
  entropyThreshold,
  HistogramCollector,
  labelIou,
  MinMaxCollector,
  percentileThreshold,
  quantizeWeights,
} from '../src/index.ts';

describe('calibration ranges', () => {
  it('min/max is the observed range over every sample', () => {
    const c = new MinMaxCollector();
    c.add('t', [0.5, -1, 2]);
    c.add('t', [3, -0.25]);
    expect(c.ranges.get('t')).toEqual({ min: -1, max: 3 });
  });

  it('percentile cuts |x| at the bin holding that share of the values', () => {
    // 1000 values 0.001 … 1.000 and one outlier at 100: 2048 bins of width 100/2048.
    const values = [...Array.from({ length: 1000 }, (_, i) => (i + 1) / 1000), 100];
    const minMax = new MinMaxCollector();
    minMax.add('t', values);
    const h = new HistogramCollector(minMax.ranges);
    h.add('t', values);
    const { counts, absMax } = h.histograms.get('t')!;
    // By hand: all 1000 small values fall in bins 0..20 (1.0 / (100/2048) = 20.48); 99% of 1001 = 990.99 values
    // are reached inside bin 20 (the bin holding 0.977 … 1.0), whose upper edge is 21 × 100/2048.
    expect(percentileThreshold(counts, absMax, 99)).toBeCloseTo((21 * 100) / 2048, 10);
    // 100% keeps the outlier.
    expect(percentileThreshold(counts, absMax, 100)).toBeCloseTo(100, 10);
    const range = chooseRange('percentile', minMax.ranges.get('t')!, h.histograms.get('t'), { percentile: 99 });
    expect(range).toEqual({ min: 0.001, max: (21 * 100) / 2048 });
  });

  it('entropy keeps the whole range of a uniform distribution and clips a long thin tail', () => {
    const uniform = new Float64Array(2048).fill(1);
    expect(entropyThreshold(uniform, 8, 128)).toBe(8);
    // A sloped bulk in bins 0..31 (|x| < 32), then a thin tail (one value in every seventh bin) out to 2048:
    // the full range would merge the whole bulk into two of the 128 levels; clipping keeps its shape.
    const tailed = Float64Array.from({ length: 2048 }, (_, i) => (i < 32 ? 1000 - 30 * i : i % 7 === 0 ? 1 : 0));
    const t = entropyThreshold(tailed, 2048, 128);
    expect(t).toBeGreaterThanOrEqual(32);
    expect(t).toBeLessThan(2048);
  });

  it('uint8 parameters include 0 and put it exactly on a level', () => {
    expect(activationParams({ min: -1, max: 3 })).toEqual({
      scale: Math.fround(4 / 255),
      zeroPoint: Math.round(1 / Math.fround(4 / 255)),
    });
    expect(activationParams({ min: 2, max: 6 })).toEqual({ scale: Math.fround(6 / 255), zeroPoint: 0 });
    expect(activationParams({ min: 0, max: 0 })).toEqual({ scale: 1, zeroPoint: 0 });
  });

  it('weights are symmetric per channel, 7-bit with the reduced range', () => {
    const w = Float32Array.from([1, -0.5, 0.25, 0.1, -0.2, 0.05]);
    const full = quantizeWeights(w, [2, 3], 0, false);
    expect(Array.from(full.scales)).toEqual([Math.fround(1 / 127), Math.fround(0.2 / 127)]);
    expect(Array.from(full.q)).toEqual([127, -64, 32, 64, -127, 32]);
    const reduced = quantizeWeights(w, [2, 3], 0, true);
    expect(Math.max(...Array.from(reduced.q, Math.abs))).toBe(63);
  });
});

describe('agreement', () => {
  it('counts top-1 and top-5 agreement and cosine for classifier outputs', () => {
    const a = { dims: [1, 6], data: Float32Array.from([0.1, 0.9, 0.3, 0.2, 0.05, 0.4]) };
    const same = { dims: [1, 6], data: Float32Array.from([0.1, 0.88, 0.31, 0.2, 0.05, 0.41]) };
    const flipped = { dims: [1, 6], data: Float32Array.from([0.1, 0.3, 0.9, 0.2, 0.05, 0.4]) };
    const r = compareOutputs([{ y: a }, { y: a }], [{ y: same }, { y: flipped }]);
    expect(r.metric).toBe('top1');
    expect(r.value).toBe(0.5);
    expect(r.outputs[0]!.top5Agreement).toBe(1);
    expect(r.outputs[0]!.maxAbsDifference).toBeCloseTo(0.6, 6);
  });

  it('computes the IoU of thresholded maps for segmenter-like outputs', () => {
    // Foreground in fp32: 4 pixels; int8: 3 of them plus 1 more → IoU 3/5.
    expect(labelIou(Uint16Array.from([1, 1, 1, 1, 0, 0]), Uint16Array.from([1, 1, 1, 0, 1, 0]), true)).toBeCloseTo(
      3 / 5,
      10,
    );
    const fp = { dims: [1, 1, 2, 3], data: Float32Array.from([0.9, 0.8, 0.7, 0.6, 0.1, 0.2]) };
    const q = { dims: [1, 1, 2, 3], data: Float32Array.from([0.9, 0.8, 0.7, 0.4, 0.6, 0.2]) };
    const r = compareOutputs([{ m: fp }], [{ m: q }]);
    expect(r.metric).toBe('iou');
    expect(r.value).toBeCloseTo(3 / 5, 10);
  });
});
