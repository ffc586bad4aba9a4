/**
 * The fall-back search on small generated models with one planted sensitive node: a 1×1
 * convolution whose first output channel carries a +400 offset (taken away again by an fp32
 * Sub), so quantising its output on one uint8 scale wipes out the small channels beside it.
 * Every figure checked here is measured by quantizeModel on real onnxruntime sessions.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { GraphBuilder, writeOnnxModel } from '@marina/model-zoo';
import * as ort from 'onnxruntime-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createFolds,
  firstConvolutions,
  loadModel,
  probabilityOutputs,
  quantizeModel,
  rangeError,
  chooseRangeByError,
  type QuantizationReport,
} from '../src/index.ts';

const OFFSET = 400;
let dir: string;
let modelPath: string;
let plantedName: string;

function input(seed: number): ort.Tensor {
  const dims = [1, 4, 16, 16];
  const n = 4 * 16 * 16;
  return new ort.Tensor(
    'float32',
    Float32Array.from({ length: n }, (_, i) => Math.sin(i / 23 + seed * 1.7) + 0.5 * Math.cos(i / 7 + seed)),
    dims,
  );
}

/** x → Conv+Relu → planted Conv (channel 0 + OFFSET) → Sub (fp32, removes it) → Conv+Relu → Conv → Reshape [1, 8, 256]. */
async function writePlantedModel(path: string): Promise<string> {
  const g = new GraphBuilder('planted');
  const wave = (scale: number) => (out: Float32Array) => {
    for (let i = 0; i < out.length; i++) out[i] = Math.sin(i * 1.3 + scale) * scale;
  };
  const a = g.node('Relu', [
    g.node('Conv', ['x', g.initializer('wa', [8, 4, 3, 3], wave(0.3)), g.constant('ba', [8], 0.05)], {
      attributes: { kernel_shape: [3, 3], pads: [1, 1, 1, 1] },
    }),
  ]);
  const offset = g.initializer('bp', [8], (out) => out.fill(0).set([OFFSET]));
  const planted = g.node('Conv', [a, g.initializer('wp', [8, 8, 1, 1], wave(0.5)), offset], {
    attributes: { kernel_shape: [1, 1] },
  });
  const name = `Conv_3`;
  const back = g.node('Sub', [planted, g.initializer('c', [8, 1, 1], (out) => out.fill(0).set([OFFSET]))]);
  const c = g.node('Relu', [
    g.node('Conv', [back, g.initializer('wc', [8, 8, 3, 3], wave(0.2)), g.constant('bc', [8], 0)], {
      attributes: { kernel_shape: [3, 3], pads: [1, 1, 1, 1] },
    }),
  ]);
  const d = g.node('Conv', [c, g.initializer('wd', [8, 8, 1, 1], wave(0.7))], { attributes: { kernel_shape: [1, 1] } });
  g.rawNode({
    opType: 'Constant',
    input: [],
    output: ['shape'],
    attribute: [{ name: 'value', type: 4, t: { name: 'shape', dataType: 7, dims: [3], int64Data: [1, 8, 256] } }],
  });
  g.node('Reshape', [d, 'shape'], { output: 'y' });
  await writeOnnxModel({
    outputPath: path,
    graph: g.build([{ name: 'x', dims: [1, 4, 16, 16] }], [{ name: 'y', dims: [1, 8, 256] }]),
  });
  return name;
}

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'marina-sensitivity-'));
  modelPath = join(dir, 'planted.onnx');
  plantedName = await writePlantedModel(modelPath);
});

afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('the fall-back search', () => {
  let report: QuantizationReport;

  beforeAll(async () => {
    ({ report } = await quantizeModel({
      modelPath,
      calibrationFeeds: Array.from({ length: 8 }, (_, s) => ({ x: input(s) })),
      method: 'minmax',
    }));
  }, 60_000);

  it('finds the planted node by measurement: alone in int8 it loses the most agreement', () => {
    const loaded = report.search!.ranked;
    // The premise, measured: all int8 misses the default target (lowest cosine 0.99).
    expect(report.minAgreement).toBe(0.99);
    expect(report.initialAgreement.value).toBeLessThan(0.99);
    expect(loaded[0]!.nodes).toContain(plantedName);
    for (const other of loaded.slice(1)) expect(other.aloneInt8.value).toBeGreaterThan(loaded[0]!.aloneInt8.value);
  });

  it('keeps it in fp32, and each kept step raised agreement until the target was met out of sample', () => {
    expect(report.autoKeptFp32).toContain(plantedName);
    expect(report.isTargetMet).toBe(true);
    expect(report.agreement.value).toBeGreaterThanOrEqual(0.99);
    const kept = report.search!.steps.filter((s) => s.isKept);
    expect(kept[0]!.nodes).toEqual([plantedName]);
    let previous = report.search!.start;
    for (const step of kept) {
      expect(step.value).toBeGreaterThan(previous);
      previous = step.value;
    }
    expect(kept.at(-1)!.verifiedValue).toBe(report.agreement.value);
    // Only what the search kept is fp32: the other convolutions stay int8.
    const keptConvolutions = report.autoKeptFp32.filter((n) => n.startsWith('Conv_')).length;
    expect(report.convolutions.int8).toBe(report.convolutions.total - keptConvolutions);
  });

  it('evaluates by k-fold: each of the 8 samples once, by a model calibrated on the other 6', () => {
    expect(report.evaluation).toBe('k-fold');
    expect(report.folds).toHaveLength(4);
    expect(report.folds.every((f) => f.evalSamples === 2 && f.calibrationSamples === 6)).toBe(true);
    expect(report.evalSamples).toBe(8);
    expect(report.worstFold).toBe(Math.min(...report.folds.map((f) => f.value)));
    expect(report.warnings).toEqual([]);
  });

  it('warns that the estimate is weak with fewer than 8 samples', async () => {
    const { report: few } = await quantizeModel({
      modelPath,
      calibrationFeeds: Array.from({ length: 3 }, (_, s) => ({ x: input(s) })),
      method: 'minmax',
      isAutoFallback: false,
    });
    expect(few.folds).toHaveLength(3);
    expect(few.warnings.join(' ')).toMatch(/only 3 sample\(s\) evaluated: the agreement estimate is weak/);
    expect(few.search).toBeUndefined();
  }, 60_000);
});

describe('k-fold splits', () => {
  it('evaluate every sample exactly once and never calibrate on it in that fold', () => {
    for (const [samples, folds] of [
      [8, 4],
      [5, 4],
      [3, 4],
    ] as const) {
      const split = createFolds({ samples, folds });
      expect(split).toHaveLength(Math.min(samples, folds));
      expect(split.flatMap((f) => f.evaluation).sort((a, b) => a - b)).toEqual([...Array(samples).keys()]);
      for (const f of split) {
        expect(f.calibration.some((i) => f.evaluation.includes(i))).toBe(false);
        expect(f.calibration.length + f.evaluation.length).toBe(samples);
      }
    }
  });
});

describe('per-tensor calibration by error', () => {
  it('keeps min/max for a tensor without outliers and clips a rare far outlier', () => {
    // Signed histograms: 2 × 2048 bins over [−absMax, absMax].
    const uniform = { counts: new Float64Array(4096).fill(10), absMax: 8 };
    expect(chooseRangeByError('auto', { min: -8, max: 8 }, uniform).method).toBe('minmax');
    // Four billion values within ±0.5 and one at 1000: min/max rounds them all to steps of ~3.9. (The error is
    // weighted by magnitude, so one far value outweighs the rounding of many small ones unless they are this many.)
    const tailed = new Float64Array(4096);
    tailed[2047] = 2e9;
    tailed[2048] = 2e9;
    tailed[4095] = 1;
    const histogram = { counts: tailed, absMax: 1000 };
    const full = { min: -0.5, max: 1000 };
    const chosen = chooseRangeByError('auto', full, histogram);
    expect(chosen.method).not.toBe('minmax');
    expect(chosen.range.max).toBeLessThan(10);
    expect(rangeError(histogram, chosen.range)).toBeLessThan(rangeError(histogram, full));
    // An explicit method is an override.
    expect(chooseRangeByError('minmax', full, histogram).range).toEqual(full);
  });
});

describe('where not to quantise by default', () => {
  it('finds the probability output and the first convolution on the raw input', async () => {
    const g = new GraphBuilder('prob');
    const conv = g.node('Conv', ['x', g.constant('w', [2, 4, 1, 1], 0.1)], { attributes: { kernel_shape: [1, 1] } });
    g.node('Sigmoid', [conv], { output: 'p' });
    const path = join(dir, 'prob.onnx');
    await writeOnnxModel({
      outputPath: path,
      graph: g.build([{ name: 'x', dims: [1, 4, 8, 8] }], [{ name: 'p', dims: [1, 2, 8, 8] }]),
    });
    const { model } = await loadModel(path);
    expect(probabilityOutputs(model)).toEqual([{ node: 'Sigmoid_2', opType: 'Sigmoid', feeder: 'Conv_1' }]);
    expect(firstConvolutions(model)).toEqual(['Conv_1']);
  });
});
