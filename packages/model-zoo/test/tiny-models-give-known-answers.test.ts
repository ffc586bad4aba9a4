import { mkdir, readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import onnxProto from 'onnx-proto';
import ort from 'onnxruntime-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { writeSlowModel, writeTinyClassifier, writeTinyTensorModel } from '../src/index.ts';
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

describe('tiny models', () => {
  let dir: string;
  beforeAll(async () => {
    dir = await useTempDir('tiny');
  });

  it('tensor model returns input*2+1 for any batch size', async () => {
    const { modelPath } = await writeTinyTensorModel({ outputPath: join(dir, 'tensor.onnx') });
    const session = await open(modelPath);
    const input = Float32Array.from({ length: 12 }, (_, i) => i - 5.5);
    const { output } = await session.run({ input: new ort.Tensor('float32', input, [3, 4]) });
    expect(output!.dims).toEqual([3, 4]);
    expect(Array.from(output!.data as Float32Array)).toEqual(Array.from(input, (x) => x * 2 + 1));
  });

  it('tensor model with fixedBatch declares that batch and rejects another', async () => {
    const { modelPath } = await writeTinyTensorModel({ outputPath: join(dir, 'tensor-fixed.onnx'), fixedBatch: 2 });
    const session = await open(modelPath);
    const ok = await session.run({ input: new ort.Tensor('float32', new Float32Array(8), [2, 4]) });
    expect(Array.from(ok.output!.data as Float32Array)).toEqual(new Array(8).fill(1));
    await expect(session.run({ input: new ort.Tensor('float32', new Float32Array(12), [3, 4]) })).rejects.toThrow();
  });

  it('classifier maps [N,3,S,S] to [N,numClasses] logits with a non-degenerate softmax', async () => {
    const { modelPath, parameterCount } = await writeTinyClassifier({
      outputPath: join(dir, 'classifier.onnx'),
      inputSize: 64,
      numClasses: 5,
    });
    expect(parameterCount).toBe(8 * 3 * 9 + 8 + 5 * 8 + 5);
    const session = await open(modelPath);
    const input = Float32Array.from({ length: 2 * 3 * 64 * 64 }, (_, i) => Math.sin(i / 7));
    const { output } = await session.run({ input: new ort.Tensor('float32', input, [2, 3, 64, 64]) });
    expect(output!.dims).toEqual([2, 5]);
    const probabilities = softmax((output!.data as Float32Array).subarray(0, 5));
    expect(Math.max(...probabilities)).toBeLessThan(0.99);
    expect(Math.max(...probabilities)).toBeGreaterThan(Math.min(...probabilities));
  });

  it('slow model chains MatMul+Tanh layers but stays small on disk', async () => {
    const result = await writeSlowModel({ outputPath: join(dir, 'slow.onnx'), layers: 50, width: 64 });
    expect(result.parameterCount).toBe(64 * 64);
    const session = await open(result.modelPath);
    const { output } = await session.run({
      input: new ort.Tensor(
        'float32',
        Float32Array.from({ length: 128 }, (_, i) => i / 128),
        [2, 64],
      ),
    });
    expect(output!.dims).toEqual([2, 64]);
    const values = Array.from(output!.data as Float32Array);
    expect(values.every((v) => Math.abs(v) < 1)).toBe(true);
    expect(values.some((v) => Math.abs(v) > 1e-3)).toBe(true);
  });

  it('slow model computes tanh(x·W) once per layer with its stored weight', async () => {
    const width = 8;
    const { modelPath } = await writeSlowModel({ outputPath: join(dir, 'slow-known.onnx'), layers: 3, width, seed: 5 });
    const model = onnxProto.onnx.ModelProto.decode(await readFile(modelPath));
    const raw = model.graph!.initializer![0]!.rawData!;
    const weight = new Float32Array(raw.buffer.slice(raw.byteOffset, raw.byteOffset + raw.byteLength));
    let x = Array.from({ length: width }, (_, i) => (i - 3) / 4);
    const session = await open(modelPath);
    const { output } = await session.run({ input: new ort.Tensor('float32', Float32Array.from(x), [1, width]) });
    for (let layer = 0; layer < 3; layer += 1) {
      x = x.map((_, j) => Math.tanh(x.reduce((sum, xi, i) => sum + xi * weight[i * width + j]!, 0)));
    }
    Array.from(output!.data as Float32Array).forEach((v, j) => {
      expect(v).toBeCloseTo(x[j]!, 5);
    });
  });

  it('rejects bad options with MARINA_ERR_MODEL_ZOO_INVALID_OPTION naming the option', async () => {
    await expect(writeSlowModel({ outputPath: join(dir, 'x.onnx'), layers: 0 })).rejects.toMatchObject({
      code: 'MARINA_ERR_MODEL_ZOO_INVALID_OPTION',
      message: expect.stringContaining("'layers'"),
    });
    await expect(writeTinyClassifier({ outputPath: join(dir, 'x.onnx'), fixedBatch: 1.5 })).rejects.toMatchObject({
      code: 'MARINA_ERR_MODEL_ZOO_INVALID_OPTION',
    });
  });

  it('fails with MARINA_ERR_MODEL_ZOO_WRITE_FAILED when the directory does not exist', async () => {
    await expect(writeTinyTensorModel({ outputPath: join(dir, 'missing', 'tensor.onnx') })).rejects.toMatchObject({
      code: 'MARINA_ERR_MODEL_ZOO_WRITE_FAILED',
      message: expect.stringContaining('missing'),
    });
  });

  it('leaves no temporary file behind when the finished model cannot be moved into place', async () => {
    const blocked = join(dir, 'blocked');
    await mkdir(join(blocked, 'model.onnx'), { recursive: true });
    await expect(writeTinyTensorModel({ outputPath: join(blocked, 'model.onnx') })).rejects.toMatchObject({
      code: 'MARINA_ERR_MODEL_ZOO_WRITE_FAILED',
    });
    expect(await readdir(blocked)).toEqual(['model.onnx']);
  });
});
