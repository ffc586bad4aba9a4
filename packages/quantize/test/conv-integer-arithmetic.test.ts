import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { GraphBuilder, writeOnnxModel } from '@marina/model-zoo';
import * as ort from 'onnxruntime-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { encodeModel, hasVnni, loadModel, quantizeToQdq, roundHalfEven } from '../src/index.ts';

/**
 * 7-bit weights where the CPU has no VNNI, as the archiver chooses: onnxruntime's u8s8 kernels there add pairs of products in
 * 16 bits and saturate with full 8-bit weights (seen on an AMD EPYC 7xx3: 7 of 50 outputs of this Conv off by up to 4). The
 * integer arithmetic must then be exact with the 7-bit weights; with VNNI, with full 8-bit ones.
 */
const isReducedRange = !hasVnni();
const QMAX = isReducedRange ? 63 : 127;

// A 3×3 convolution, 2 input channels → 2 output channels, with chosen weights and bias, then Relu.
const WEIGHTS = Float32Array.from([
  // out 0
  0.5, -0.25, 0.125, 0, 1, 0, -0.5, 0.25, 0.75, 0.1, 0.2, 0.3, -0.3, -0.2, -0.1, 0.05, 0, -0.05,
  // out 1: a smaller scale, so per-channel scales differ
  0.02, -0.01, 0.03, 0.04, -0.02, 0.01, 0, 0.015, -0.035, -0.04, 0.01, 0.02, 0.03, 0.01, -0.02, 0.005, 0.025, -0.01,
]);
const BIAS = Float32Array.from([0.3, -0.05]);
const H = 5;
const W = 5;

function input(seed: number): Float32Array {
  return Float32Array.from({ length: 2 * H * W }, (_, i) => Math.sin(i * 0.7 + seed) * 2 + 0.5);
}

let dir: string;
let modelPath: string;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'marina-quantize-'));
  modelPath = join(dir, 'conv.onnx');
  const g = new GraphBuilder('conv');
  const w = g.initializer('w', [2, 2, 3, 3], (out) => out.set(WEIGHTS));
  const b = g.initializer('b', [2], (out) => out.set(BIAS));
  const y = g.node('Conv', ['x', w, b], { attributes: { kernel_shape: [3, 3], pads: [1, 1, 1, 1] } });
  g.node('Relu', [y], { output: 'y' });
  await writeOnnxModel({
    outputPath: modelPath,
    graph: g.build([{ name: 'x', dims: [1, 2, H, W] }], [{ name: 'y', dims: [1, 2, H, W] }]),
  });
});

afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('a quantised Conv', () => {
  it(`gives exactly the integer arithmetic: uint8 input, int8 per-channel weights (${isReducedRange ? '7-bit: this CPU has no VNNI' : '8-bit: this CPU has VNNI'}), int32 bias, requantised uint8 output`, async () => {
    const loaded = await loadModel(modelPath);
    const xRange = { min: -1.5, max: 2.5 };
    const yRange = { min: 0, max: 4 };
    const ranges = new Map([
      ['x', xRange],
      ['y', yRange],
      [loaded.model.graph!.node![0]!.output![0]!, { min: -3, max: 4 }],
    ]);
    const qdq = quantizeToQdq(loaded.model, loaded.opset, { ranges, isGraphOutputQuantized: true, isReducedRange });
    expect(qdq.quantizedNodes).toEqual(['Conv_1']);
    expect(qdq.fusedNodes).toEqual(['Relu_2']);
    expect(qdq.model.graph!.node!.map((n) => n.opType)).not.toContain('Relu');

    // Independently: the parameters the quantiser must choose.
    const sx = Math.fround(4 / 255);
    const zx = roundHalfEven(1.5 / sx);
    const sy = Math.fround(4 / 255);
    const zy = 0;
    const sw = [0, 1].map((c) => Math.max(...WEIGHTS.slice(c * 18, c * 18 + 18).map(Math.abs)) / QMAX);
    const qw = Array.from(WEIGHTS, (v, i) => roundHalfEven(v / Math.fround(sw[Math.floor(i / 18)]!)));
    const qb = [0, 1].map((c) => roundHalfEven(BIAS[c]! / Math.fround(sx * Math.fround(sw[c]!))));

    const session = await ort.InferenceSession.create(encodeModel(qdq.model), {
      graphOptimizationLevel: 'all',
      intraOpNumThreads: 1,
    });
    for (const seed of [0, 1, 2]) {
      const x = input(seed);
      const qx = Array.from(x, (v) => Math.max(0, Math.min(255, roundHalfEven(v / sx) + zx)));
      const y = (await session.run({ x: new ort.Tensor('float32', x, [1, 2, H, W]) })).y!.data as Float32Array;
      let differing = 0;
      for (let c = 0; c < 2; c++) {
        for (let oy = 0; oy < H; oy++) {
          for (let ox = 0; ox < W; ox++) {
            let acc = qb[c]!;
            for (let ci = 0; ci < 2; ci++) {
              for (let ky = 0; ky < 3; ky++) {
                for (let kx = 0; kx < 3; kx++) {
                  const iy = oy + ky - 1;
                  const ix = ox + kx - 1;
                  if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue; // padding is the zero point: (zx - zx) = 0
                  acc += (qx[(ci * H + iy) * W + ix]! - zx) * qw[((c * 2 + ci) * 3 + ky) * 3 + kx]!;
                }
              }
            }
            const multiplier = (sx * Math.fround(sw[c]!)) / sy;
            const qy = Math.max(0, Math.min(255, roundHalfEven(acc * multiplier) + zy));
            const got = y[(c * H + oy) * W + ox]!;
            // The output is DequantizeLinear(uint8): an exact multiple of sy.
            expect(Math.abs(got / sy - Math.round(got / sy))).toBeLessThan(1e-3);
            if (Math.round(got / sy) !== qy) differing++;
          }
        }
      }
      expect(differing).toBe(0);
    }
  });

  it('keeps an excluded Conv in fp32 with its Relu', async () => {
    const loaded = await loadModel(modelPath);
    const ranges = new Map([
      ['x', { min: -1.5, max: 2.5 }],
      ['y', { min: 0, max: 4 }],
      [loaded.model.graph!.node![0]!.output![0]!, { min: -3, max: 4 }],
    ]);
    const qdq = quantizeToQdq(loaded.model, loaded.opset, { ranges, excludedNodes: new Set(['Conv_1']) });
    expect(qdq.fp32Nodes).toContain('Conv_1');
    const conv = qdq.model.graph!.node!.find((n) => n.opType === 'Conv')!;
    expect(conv.input![1]).toBe('w');
    expect(qdq.model.graph!.node!.map((n) => n.opType)).toContain('Relu');
  });
});
