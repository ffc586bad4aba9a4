import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import ort from 'onnxruntime-node';
import onnxProto from 'onnx-proto';
import sharp from 'sharp';
import { beforeAll, describe, expect, it } from 'vitest';
import {
  EXTERNAL_DATA_ALIGNMENT_BYTES,
  countResnetFoldedParameters,
  writeResnet,
  writeSampleJpeg,
  type WriteModelResult,
} from '../src/index.ts';
import { softmax, useTempDir } from './helpers.ts';

const IMAGE_ELEMENTS = 3 * 224 * 224;

/** Decodes, resizes and normalises like torchvision's ImageNet preprocessing. */
async function imageTensorData(path: string): Promise<Float32Array> {
  const pixels = await sharp(path).resize(224, 224, { fit: 'cover' }).removeAlpha().raw().toBuffer();
  const mean = [0.485, 0.456, 0.406];
  const std = [0.229, 0.224, 0.225];
  const out = new Float32Array(IMAGE_ELEMENTS);
  for (let i = 0; i < 224 * 224; i += 1) {
    for (let c = 0; c < 3; c += 1) out[c * 224 * 224 + i] = (pixels[i * 3 + c]! / 255 - mean[c]!) / std[c]!;
  }
  return out;
}

describe('ResNet-18 written by writeResnet', () => {
  let dir: string;
  let inline: WriteModelResult;
  let external: WriteModelResult;
  let batch: Float32Array;

  beforeAll(async () => {
    dir = await useTempDir('resnet');
    inline = await writeResnet({ depth: 18, outputPath: join(dir, 'resnet-18.onnx') });
    external = await writeResnet({ depth: 18, outputPath: join(dir, 'resnet-18-external.onnx'), isExternalData: true });
    await writeSampleJpeg({ outputPath: join(dir, 'a.jpg') });
    await writeSampleJpeg({ outputPath: join(dir, 'b.jpg'), seed: 99 });
    batch = new Float32Array(2 * IMAGE_ELEMENTS);
    batch.set(await imageTensorData(join(dir, 'a.jpg')), 0);
    batch.set(await imageTensorData(join(dir, 'b.jpg')), IMAGE_ELEMENTS);
  });

  async function run(modelPath: string): Promise<Float32Array> {
    const session = await ort.InferenceSession.create(modelPath, {
      intraOpNumThreads: 1,
      graphOptimizationLevel: 'all',
    });
    try {
      expect(session.inputNames).toEqual(['input']);
      expect(session.outputNames).toEqual(['output']);
      const result = await session.run({ input: new ort.Tensor('float32', batch, [2, 3, 224, 224]) });
      expect(result.output!.dims).toEqual([2, 1000]);
      return result.output!.data as Float32Array;
    } finally {
      await session.release();
    }
  }

  it('loads in onnxruntime and classifies a batch of 2 into finite, non-degenerate probabilities', async () => {
    const logits = await run(inline.modelPath);
    expect(logits.every(Number.isFinite)).toBe(true);
    for (let b = 0; b < 2; b += 1) {
      const probabilities = softmax(logits.subarray(b * 1000, (b + 1) * 1000)).sort((x, y) => y - x);
      const top5 = probabilities.slice(0, 5);
      // Neither one-hot nor uniform: the top class stands out, but not absolutely.
      expect(top5[0]).toBeLessThan(0.95);
      expect(top5[0]).toBeGreaterThan(2 / 1000);
      expect(top5[0]).toBeGreaterThan(top5[4]!);
    }
    // Different images give different outputs.
    expect(Array.from(logits.subarray(0, 1000))).not.toEqual(Array.from(logits.subarray(1000, 2000)));
  });

  it('reports the folded parameter count and its size on disk', () => {
    expect(inline.parameterCount).toBe(countResnetFoldedParameters(18));
    // float32 weights plus a little protobuf framing
    expect(inline.bytes).toBeGreaterThan(inline.parameterCount * 4);
    expect(inline.bytes).toBeLessThan(inline.parameterCount * 4 * 1.01);
    expect(inline.dataPath).toBeUndefined();
  });

  it('gives the same outputs with page-aligned external data as with inline weights', async () => {
    expect(external.dataPath).toBe(`${external.modelPath}.data`);
    const [inlineLogits, externalLogits] = [await run(inline.modelPath), await run(external.modelPath)];
    expect(Array.from(externalLogits)).toEqual(Array.from(inlineLogits));
  });

  it('stores every external tensor at a 4096-byte-aligned offset in a file named relative to the model', async () => {
    const model = onnxProto.onnx.ModelProto.decode(await readFile(external.modelPath));
    const initializers = model.graph!.initializer ?? [];
    expect(initializers.length).toBeGreaterThan(0);
    for (const tensor of initializers) {
      expect(tensor.dataLocation).toBe(onnxProto.onnx.TensorProto.DataLocation.EXTERNAL);
      expect(tensor.rawData?.length ?? 0).toBe(0);
      const entries = Object.fromEntries((tensor.externalData ?? []).map((e) => [e.key, e.value]));
      expect(entries.location).toBe('resnet-18-external.onnx.data');
      expect(Number(entries.offset) % EXTERNAL_DATA_ALIGNMENT_BYTES).toBe(0);
      expect(Number(entries.length)).toBe((tensor.dims ?? []).reduce<number>((n, d) => n * Number(d), 4));
    }
    expect(model.opsetImport).toEqual([expect.objectContaining({ domain: '', version: expect.anything() })]);
    expect(Number(model.opsetImport[0]!.version)).toBe(17);
    expect(Number(model.irVersion)).toBe(8);
  });
});
