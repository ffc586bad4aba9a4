import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { GraphBuilder, writeOnnxModel, writeResnet, writeTinyTensorModel } from '@marina/model-zoo';
import * as ort from 'onnxruntime-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { encodeModel, loadModel, quantizeForArchive, quantizeModel, quantizeToQdq } from '../src/index.ts';

let dir: string;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'marina-quantize-forms-'));
});

afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

function smoothInput(seed: number, dims: number[]): ort.Tensor {
  const n = dims.reduce((a, b) => a * b, 1);
  return new ort.Tensor(
    'float32',
    Float32Array.from({ length: n }, (_, i) => Math.sin(i / 97 + seed) * 1.5 + Math.cos(i / 13 + 2 * seed) * 0.3),
    dims,
  );
}

describe('model forms', () => {
  it('reads external-data weights and writes a self-contained int8 model', async () => {
    const modelPath = join(dir, 'resnet-18-external.onnx');
    await writeResnet({ depth: 18, outputPath: modelPath, isExternalData: true });
    const { model, report } = await quantizeModel({
      modelPath,
      calibrationFeeds: [0, 1].map((s) => ({ input: smoothInput(s, [1, 3, 224, 224]) })),
      evalFeeds: [{ input: smoothInput(5, [1, 3, 224, 224]) }],
      isAutoFallback: false,
    });
    expect(report.quantizedNodes).toBeGreaterThan(20);
    expect(report.modelBytes.fp32).toBeGreaterThan(40e6);
    expect((model.graph!.initializer ?? []).every((t) => (t.externalData ?? []).length === 0)).toBe(true);
    // Dynamic batch: the int8 model takes a batch of 2.
    const session = await ort.InferenceSession.create(encodeModel(model));
    const out = await session.run({ input: smoothInput(9, [2, 3, 224, 224]) });
    expect(out.output!.dims).toEqual([2, 1000]);
    await session.release();
  }, 120_000);

  it('quantises an opset-10 model, per channel through com.microsoft DequantizeLinear', async () => {
    const modelPath = join(dir, 'conv.onnx');
    const g = new GraphBuilder('conv');
    const w = g.initializer('w', [4, 3, 3, 3], (out) =>
      out.forEach((_, i) => {
        out[i] = Math.sin(i) * (1 + (i % 4));
      }),
    );
    const b = g.initializer('b', [4], (out) => out.set([0.1, -0.2, 0.3, 0]));
    g.node('Conv', ['x', w, b], { output: 'y', attributes: { kernel_shape: [3, 3], pads: [1, 1, 1, 1] } });
    await writeOnnxModel({
      outputPath: modelPath,
      graph: g.build([{ name: 'x', dims: ['n', 3, 'h', 'w'] }], [{ name: 'y', dims: ['n', 4, 'h', 'w'] }]),
    });
    const loaded = await loadModel(modelPath);
    loaded.model.opsetImport = [{ domain: '', version: 10 }];
    const x = smoothInput(1, [1, 3, 8, 8]);
    const fp32 = await ort.InferenceSession.create(encodeModel(loaded.model));
    const expected = (await fp32.run({ x })).y!.data as Float32Array;
    let min = Infinity;
    let max = -Infinity;
    for (const v of expected) {
      min = Math.min(min, v);
      max = Math.max(max, v);
    }
    const qdq = quantizeToQdq(loaded.model, 10, {
      ranges: new Map([
        ['x', { min: -1.8, max: 1.8 }],
        ['y', { min, max }],
      ]),
      isGraphOutputQuantized: true,
    });
    const weightDq = qdq.model.graph!.node!.find((n) => n.name === 'w_DequantizeLinear')!;
    expect(weightDq.domain).toBe('com.microsoft');
    expect(qdq.model.opsetImport!.map((o) => o.domain)).toContain('com.microsoft');
    const int8 = await ort.InferenceSession.create(encodeModel(qdq.model), { graphOptimizationLevel: 'all' });
    const got = (await int8.run({ x })).y!.data as Float32Array;
    const outScale = (max - Math.min(min, 0)) / 255;
    // Within a few output steps of fp32: input, weight and output rounding.
    for (let i = 0; i < got.length; i++) expect(Math.abs(got[i]! - expected[i]!)).toBeLessThan(4 * outScale);
    await Promise.all([fp32.release(), int8.release()]);
  });

  it('calibrates the tensor handler on JSON request bodies', async () => {
    const modelPath = join(dir, 'tensor.onnx');
    await writeTinyTensorModel({ outputPath: modelPath });
    const samples = join(dir, 'json-requests');
    await mkdir(samples);
    for (let i = 0; i < 8; i++) {
      const data = [0, 1, 2, 3].map((k) => Math.sin(i * 4 + k) * 3);
      await writeFile(join(samples, `req-${i}.json`), JSON.stringify({ inputs: { input: { shape: [1, 4], data } } }));
    }
    const out = join(dir, 'tensor-out');
    await mkdir(out);
    const { record } = await quantizeForArchive({
      handler: 'tensor',
      modelPath,
      calibrationDir: samples,
      outputDir: out,
    });
    // k-fold: all eight calibrate the shipped model, and each is evaluated once by a model calibrated on the other six.
    expect(record.calibrationFiles).toHaveLength(8);
    expect(record.evaluation).toBe('k-fold');
    expect(record.folds.map((f) => [f.calibrationSamples, f.evalSamples])).toEqual([
      [6, 2],
      [6, 2],
      [6, 2],
      [6, 2],
    ]);
    // Mul by 2 and Add 1, both on int8.
    expect(record.quantizedNodes).toBe(2);
    expect(record.agreement.outputs[0]!.minCosine).toBeGreaterThan(0.999);
  });
});
