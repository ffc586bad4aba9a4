import { describe, expect, it } from 'vitest';
import {
  formatQuantizeReport,
  quantizeVerdict,
  type QuantizeBenchModelResult,
} from '../src/quantize/run-quantize-bench.ts';

function result(overrides: Partial<QuantizeBenchModelResult>): QuantizeBenchModelResult {
  const base: Omit<QuantizeBenchModelResult, 'verdict'> = {
    model: 'ppocr-det',
    description: 'detector',
    fp32PerSec: 20,
    int8PerSec: 21,
    fp32RoundsPerSec: [20, 20],
    int8RoundsPerSec: [21, 21],
    ratio: 1.05,
    pairedRatios: [1.05, 1.05],
    medianPairedRatio: 1.05,
    errors: 0,
    stagesMs: { fp32: { inference: 40, total: 50 }, int8: { inference: 38, total: 48 } },
    sessionRatios: [{ batch: 1, fp32MsPerImage: 40, int8MsPerImage: 30 }],
    metric: 'iou',
    agreement: 0.954,
    allInt8Agreement: 0.855,
    worstFold: 0.951,
    minAgreement: 0.95,
    isTargetMet: true,
    convolutions: { total: 64, int8: 63 },
    depthwiseShare: 0.45,
    keptFp32: [{ count: 5, reason: 'the fall-back search' }],
    quantizeSeconds: 280,
    searchSeconds: 220,
    ...overrides,
  };
  return { ...base, verdict: quantizeVerdict(base), ...overrides };
}

describe('the quantize report', () => {
  it('says where int8 does not pay, and why, from the measured ratio and the model', () => {
    const slow = result({});
    expect(slow.verdict).toMatch(
      /^int8 does not pay here: 1\.05x the fp32 server; 45% of its convolutions are depthwise/,
    );
    expect(slow.verdict).toContain('meets its target (iou 0.954 ≥ 0.95)');
    const fast = result({ model: 'resnet-152', ratio: 3.1, depthwiseShare: 0, isTargetMet: false, agreement: 0.875 });
    expect(quantizeVerdict(fast)).toMatch(/^int8 pays: 3\.10x the fp32 server; misses its target/);
  });

  it('judges the best batch size too, and names time outside the model as a reason', () => {
    const bestBatch = { fp32Batch: 4, int8Batch: 2, fp32PerSec: 10, int8PerSec: 11, ratio: 1.1, pairedRatios: [1.1] };
    const r = result({
      ratio: 1.5,
      depthwiseShare: 0,
      bestBatch,
      stagesMs: { fp32: { inference: 60, total: 100 }, int8: { inference: 20, total: 60 } },
    });
    expect(r.verdict).toMatch(
      /^int8 does not pay here: 1\.50x the fp32 server at batch 1, 1\.10x at the best batch size; 67% of an int8 request's server time is outside the model's run/,
    );
    const png = { fp32PerSec: 10, int8PerSec: 13, ratio: 1.3, pairedRatios: [1.3], stagesMs: r.stagesMs };
    expect(quantizeVerdict({ ...r, pngAnswer: png })).toContain('; with the mask asked for as a PNG: 1.30x;');
    expect(quantizeVerdict({ ...r, bestBatch: { ...bestBatch, ratio: 1.4 } })).toMatch(/^int8 pays: 1\.50x/);
  });

  it('gives one row per model and each model its own verdict, with the CPU flags', () => {
    const text = formatQuantizeReport({
      startedAt: '2026-11-28T02:00:00Z',
      cpuModel: 'AMD EPYC',
      cores: 2,
      cpuFlags: 'avx2, avx512_vnni; VNNI',
      loadAverage: [20, 25],
      rounds: 2,
      requestsPerRound: 20,
      models: [result({}), result({ model: 'ppocr-cls', ratio: 1.7 })],
    });
    expect(text).toContain('CPU flags: avx2, avx512_vnni; VNNI');
    expect(text.split('\n').filter((l) => l.startsWith('| ppocr-'))).toHaveLength(2);
    expect(text).toContain('| ppocr-det | 20.0 | 21.0 | 1.05 (1.05) | batch 1 for both | 1.33 |');
    expect(text).toContain(
      '- ppocr-det: 20.0 / 20.0 | 21.0 / 21.0; fp32 inference 40.0, total 50.0; int8 inference 38.0, total 48.0.',
    );
    expect(text).toContain('- **ppocr-cls** (detector): int8 pays: 1.70x');
  });
});
