import { join } from 'node:path';
import ort from 'onnxruntime-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  TINY_DETECTOR_BOXES,
  writeHeadClassifier,
  writeMultiOutputModel,
  writeTinyDetector,
  writeTinySegmenter,
} from '../src/index.ts';
import { softmax, useTempDir } from './helpers.ts';

const sessions: ort.InferenceSession[] = [];
async function open(modelPath: string): Promise<ort.InferenceSession> {
  const session = await ort.InferenceSession.create(modelPath, { intraOpNumThreads: 1 });
  sessions.push(session);
  return session;
}
afterAll(async () => {
  for (const session of sessions) await session.release();
});

const sigmoid = (x: number) => 1 / (1 + Math.exp(-x));

describe('models for the built-in handlers', () => {
  let dir: string;
  beforeAll(async () => {
    dir = await useTempDir('handler-models');
  });

  it('the Softmax and LogSoftmax classifiers are the logits classifier with that last step (same seed)', async () => {
    const input = new ort.Tensor(
      'float32',
      Float32Array.from({ length: 2 * 3 * 20 * 28 }, (_, i) => Math.sin(i)),
      [2, 3, 20, 28],
    );
    const run = async (head: 'logits' | 'softmax' | 'log-softmax') => {
      const { modelPath } = await writeHeadClassifier({
        outputPath: join(dir, `${head}.onnx`),
        head,
        isSizeDynamic: true,
        numClasses: 5,
        seed: 4,
      });
      return Array.from((await (await open(modelPath)).run({ input })).output!.data as Float32Array);
    };
    const logits = await run('logits');
    const probs = await run('softmax');
    const logProbs = await run('log-softmax');
    for (const row of [0, 1]) {
      const expected = softmax(logits.slice(row * 5, row * 5 + 5));
      probs.slice(row * 5, row * 5 + 5).forEach((p, i) => {
        expect(p).toBeCloseTo(expected[i]!, 6);
      });
      logProbs.slice(row * 5, row * 5 + 5).forEach((p, i) => {
        expect(Math.exp(p)).toBeCloseTo(expected[i]!, 6);
      });
    }
  });

  it('the fixed-batch classifier declares its batch and the grayscale one a single channel', async () => {
    const { modelPath } = await writeHeadClassifier({
      outputPath: join(dir, 'fixed-gray.onnx'),
      fixedBatch: 2,
      channels: 1,
      inputSize: 16,
    });
    const session = await open(modelPath);
    expect(session.inputMetadata[0]).toMatchObject({ shape: [2, 1, 16, 16] });
    await expect(
      session.run({ input: new ort.Tensor('float32', new Float32Array(256), [1, 1, 16, 16]) }),
    ).rejects.toThrow();
  });

  it('the multi-output model answers doubled = 2x and mean = the row mean', async () => {
    const { modelPath } = await writeMultiOutputModel({ outputPath: join(dir, 'multi.onnx') });
    const out = await (await open(modelPath)).run({
      input: new ort.Tensor('float32', Float32Array.from([1, 2, 3, 4, -1, -2, -3, -6]), [2, 4]),
    });
    expect(Array.from(out.doubled!.data as Float32Array)).toEqual([2, 4, 6, 8, -2, -4, -6, -12]);
    expect(Array.from(out.mean!.data as Float32Array)).toEqual([2.5, -3]);
  });

  it('the segmenter copies the channels (3 classes) or answers sigmoid(4·(red − green)) (one mask), at any size', async () => {
    const pixels = Float32Array.from([0.9, -0.5, 2, 0.1, 0.3, 0.2, -1, 0.4, -0.7, 0.6, 0.5, 0.8]); // [1,3,2,2]
    const three = await writeTinySegmenter({ outputPath: join(dir, 'seg3.onnx') });
    expect(
      Array.from(
        (await (await open(three.modelPath)).run({ input: new ort.Tensor('float32', pixels, [1, 3, 2, 2]) })).output!
          .data as Float32Array,
      ),
    ).toEqual(Array.from(pixels));
    const one = await writeTinySegmenter({ outputPath: join(dir, 'seg1.onnx'), classes: 1, head: 'sigmoid' });
    const mask = Array.from(
      (await (await open(one.modelPath)).run({ input: new ort.Tensor('float32', pixels, [1, 3, 2, 2]) })).output!
        .data as Float32Array,
    );
    mask.forEach((m, p) => {
      expect(m).toBeCloseTo(sigmoid(4 * (pixels[p]! - pixels[4 + p]!)), 6);
    });
  });

  it('the detector scores box k by sigmoid(4·mean(channel) + bias), in both layouts, for every image of a batch', async () => {
    // Image 0 all red (1, 0, 0), image 1 all green (0, 1, 0), 64×64.
    const plane = 64 * 64;
    const input = new Float32Array(2 * 3 * plane);
    input.fill(1, 0, plane);
    input.fill(1, 3 * plane + plane, 3 * plane + 2 * plane);
    const expected = [
      [sigmoid(4), sigmoid(3.5), sigmoid(-1), sigmoid(-1)],
      [sigmoid(0), sigmoid(-0.5), sigmoid(3), sigmoid(-1)],
    ];
    const separate = await writeTinyDetector({ outputPath: join(dir, 'det-separate.onnx') });
    const out = await (await open(separate.modelPath)).run({ input: new ort.Tensor('float32', input, [2, 3, 64, 64]) });
    Array.from(out.scores!.data as Float32Array).forEach((s, i) => {
      expect(s).toBeCloseTo(expected[Math.floor(i / 4)]![i % 4]!, 6);
    });
    expect(Array.from(out.labels!.data as BigInt64Array, Number)).toEqual([1, 1, 2, 3, 1, 1, 2, 3]);
    expect(Array.from(out.boxes!.data as Float32Array).slice(0, 16)).toEqual(
      TINY_DETECTOR_BOXES.flatMap((b) => [...b.box]),
    );
    const combined = await writeTinyDetector({ outputPath: join(dir, 'det-combined.onnx'), layout: 'combined' });
    const rows = (
      await (await open(combined.modelPath)).run({ input: new ort.Tensor('float32', input, [2, 3, 64, 64]) })
    ).output!;
    expect(rows.dims).toEqual([2, 4, 9]);
    const data = rows.data as Float32Array;
    TINY_DETECTOR_BOXES.forEach(({ box: [x1, y1, x2, y2], label }, k) => {
      expect(Array.from(data.subarray(k * 9, k * 9 + 4))).toEqual([(x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1]);
      expect(data[k * 9 + 4]).toBeCloseTo(expected[0]![k]!, 6);
      expect(Array.from(data.subarray(k * 9 + 5, k * 9 + 9))).toEqual([0, 1, 2, 3].map((c) => (c === label ? 1 : 0)));
    });
  });
});
