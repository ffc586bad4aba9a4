import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import * as ort from 'onnxruntime-node';
import sharp from 'sharp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TINY_DETECTOR_BOXES, writeTinyDetector, writeTinySegmenter } from '@marina/model-zoo';
import {
  createImageSegmenter,
  createObjectDetector,
  preprocessImage,
  resolveImageSegmenterOptions,
  resolveObjectDetectorOptions,
} from '../src/index.ts';
import { createWorkDir, initialised, runHandler, writeJson } from './handler-harness.ts';

let work: Awaited<ReturnType<typeof createWorkDir>>;
beforeAll(async () => {
  work = await createWorkDir();
});
afterAll(() => work.remove());

/** A PNG whose left half is `left` and right half `right` (RGB). */
async function halves(
  width: number,
  height: number,
  left: [number, number, number],
  right: [number, number, number],
): Promise<Buffer> {
  const pixels = Buffer.alloc(width * height * 3);
  for (let y = 0; y < height; y++)
    for (let x = 0; x < width; x++) pixels.set(x < width / 2 ? left : right, (y * width + x) * 3);
  return sharp(pixels, { raw: { width, height, channels: 3 } })
    .png()
    .toBuffer();
}
const RED: [number, number, number] = [255, 0, 0];
const GREEN: [number, number, number] = [0, 255, 0];
const BLUE: [number, number, number] = [0, 0, 255];

/** Every output of a direct onnxruntime-node run on `pixels` (one image). */
async function direct(
  modelPath: string,
  pixels: Float32Array,
  dims: number[],
): Promise<ort.InferenceSession.OnnxValueMapType> {
  const session = await ort.InferenceSession.create(modelPath, { intraOpNumThreads: 1 });
  const out = await session.run({ input: new ort.Tensor('float32', pixels, dims) });
  await session.release();
  return out;
}

describe('image_segmenter', () => {
  it("answers TorchServe's [class, probability] per pixel, equal to argmax/softmax of a direct run, red left and green right", async () => {
    const modelPath = join(work.dir, 'seg3.onnx');
    await writeTinySegmenter({ outputPath: modelPath, classes: 3 });
    const config = { handler: { resize_mode: 'stretch', size: [8, 12] } };
    const image = await halves(24, 16, RED, GREEN);
    const { handler, context } = await initialised(createImageSegmenter, {
      modelPath,
      modelDir: work.dir,
      modelYamlConfig: config,
    });
    const [answer] = (await runHandler(handler, [{ body: image }], context)) as Array<Array<Array<[number, number]>>>;
    const options = resolveImageSegmenterOptions(config, ['n', 3, 'h', 'w']);
    const pixels = new Float32Array(3 * 8 * 12);
    await preprocessImage(image, { ...options, limitInputPixels: true }, pixels, 0);
    const out = (await direct(modelPath, pixels, [1, 3, 8, 12])).output!.data as Float32Array;
    expect(answer).toHaveLength(8);
    for (let y = 0; y < 8; y++) {
      expect(answer![y]).toHaveLength(12);
      for (let x = 0; x < 12; x++) {
        const scores = [0, 1, 2].map((c) => out[c * 96 + y * 12 + x]!);
        const best = scores.indexOf(Math.max(...scores));
        const sum = scores.reduce((a, s) => a + Math.exp(s - scores[best]!), 0);
        expect(answer![y]![x]![0]).toBe(best);
        expect(answer![y]![x]![1]).toBeCloseTo(1 / sum, 5);
        if (x <= 4) expect(best).toBe(0);
        if (x >= 7) expect(best).toBe(1);
      }
    }
  });

  it('response: classes gives the class map; Accept: image/png gives a PNG of class indices', async () => {
    const modelPath = join(work.dir, 'seg3-classes.onnx');
    await writeTinySegmenter({ outputPath: modelPath, classes: 3, inputSize: 10 });
    const { handler, context } = await initialised(createImageSegmenter, {
      modelPath,
      modelDir: work.dir,
      modelYamlConfig: { handler: { resize_mode: 'stretch', response: 'classes' } },
      headers: [{}, { accept: 'image/png' }],
    });
    const image = await halves(20, 20, GREEN, BLUE);
    const [classes, png] = await runHandler(handler, [{ body: image }, { body: image }], context);
    expect((classes as number[][])[5]).toEqual([1, 1, 1, 1, 1, 2, 2, 2, 2, 2]);
    expect(context.contentTypes.get(1)).toBe('image/png');
    expect((await sharp(png as Buffer).metadata()).channels).toBe(1);
    const decoded = await sharp(png as Buffer)
      .extractChannel(0)
      .raw()
      .toBuffer({ resolveWithObject: true });
    // stretch is undone: the mask comes back at the image's 20×20, each class pixel doubled (nearest).
    expect(decoded.info).toMatchObject({ width: 20, height: 20, channels: 1 });
    expect([...decoded.data.subarray(200, 220)]).toEqual((classes as number[][])[5]!.flatMap((c) => [c, c]));
  });

  it('a one-channel mask model with response: png: 255 where the probability reaches the threshold, at the original size through letterbox', async () => {
    const modelPath = join(work.dir, 'seg1.onnx');
    await writeTinySegmenter({ outputPath: modelPath, classes: 1, head: 'sigmoid' });
    const config = { handler: { resize_mode: 'letterbox', size: [16, 16], response: 'png', threshold: 0.6 } };
    const image = await halves(32, 16, RED, BLUE);
    const { handler, context } = await initialised(createImageSegmenter, {
      modelPath,
      modelDir: work.dir,
      modelYamlConfig: config,
    });
    const [png] = await runHandler(handler, [{ body: image }], context);
    expect((await sharp(png as Buffer).metadata()).channels).toBe(1);
    const { data, info } = await sharp(png as Buffer)
      .extractChannel(0)
      .raw()
      .toBuffer({ resolveWithObject: true });
    expect(info).toMatchObject({ width: 32, height: 16, channels: 1 });
    // The same mask from a direct run: sigmoid output ≥ 0.6 in the unpadded rows 4..11 of the 16×16 input.
    const options = resolveImageSegmenterOptions(config, ['n', 3, 'h', 'w']);
    const pixels = new Float32Array(3 * 16 * 16);
    await preprocessImage(image, { ...options, limitInputPixels: true }, pixels, 0);
    const out = (await direct(modelPath, pixels, [1, 3, 16, 16])).output!.data as Float32Array;
    for (let y = 0; y < 16; y++) {
      for (let x = 0; x < 32; x++) {
        const expected = out[(4 + Math.floor(y / 2)) * 16 + Math.floor(x / 2)]! >= 0.6 ? 255 : 0;
        expect(data[y * 32 + x], `pixel ${x},${y}`).toBe(expected);
        if (x < 14) expect(data[y * 32 + x]).toBe(255);
        if (x >= 18) expect(data[y * 32 + x]).toBe(0);
      }
    }
  });
});

describe('object_detector', () => {
  const image = halves(128, 64, RED, RED);
  /** The tiny detector's box i mapped back through the 64×64 letterbox of a 128×64 image (scale 0.5, 16 px padding on top), clipped. */
  const expectedBox = (i: number): number[] => {
    const [x1, y1, x2, y2] = TINY_DETECTOR_BOXES[i]!.box;
    return [x1 / 0.5, Math.max(0, (y1 - 16) / 0.5), x2 / 0.5, Math.min(64, (y2 - 16) / 0.5)];
  };
  async function directScores(modelPath: string, config: Record<string, unknown>): Promise<number[]> {
    const session = await ort.InferenceSession.create(modelPath, { intraOpNumThreads: 1 });
    const options = resolveObjectDetectorOptions(config, [1, 3, 64, 64], session.outputNames);
    await session.release();
    const pixels = new Float32Array(3 * 64 * 64);
    await preprocessImage(await image, { ...options, limitInputPixels: true }, pixels, 0);
    const out = await direct(modelPath, pixels, [1, 3, 64, 64]);
    if (out.scores) return Array.from(out.scores.data as Float32Array);
    const rows = out.output!.data as Float32Array;
    return [0, 1, 2, 3].map((k) => rows[k * 9 + 4]!);
  }

  it("separate boxes/scores/labels outputs: TorchServe's [{label: box, score}], boxes in the original image, labels from index_to_name.json", async () => {
    const dir = join(work.dir, 'detector-separate');
    await mkdir(dir);
    const modelPath = join(dir, 'model.onnx');
    await writeTinyDetector({ outputPath: modelPath, layout: 'separate' });
    await writeJson(join(dir, 'index_to_name.json'), { 0: 'background', 1: 'person', 2: 'car', 3: 'dog' });
    const { handler, context } = await initialised(createObjectDetector, { modelPath, modelDir: dir });
    const [answer] = await runHandler(handler, [{ body: await image }], context);
    const scores = await directScores(modelPath, {});
    // Red fills half the letterboxed input: boxes 0 and 1 score sigmoid(4·0.5) and sigmoid(1.5); no NMS by default for this layout.
    expect(scores[0]).toBeCloseTo(1 / (1 + Math.exp(-2)), 5);
    expect(answer).toEqual([
      { person: expectedBox(0), score: scores[0] },
      { person: expectedBox(1), score: scores[1] },
    ]);
  });

  it('nms: true keeps the better of two overlapping boxes; score_threshold drops low scores', async () => {
    const modelPath = join(work.dir, 'detector-nms.onnx');
    await writeTinyDetector({ outputPath: modelPath, layout: 'separate' });
    const nms = await initialised(createObjectDetector, {
      modelPath,
      modelDir: work.dir,
      modelYamlConfig: { handler: { nms: true, iou_threshold: 0.5 } },
    });
    const scores = await directScores(modelPath, {});
    expect(await runHandler(nms.handler, [{ body: await image }], nms.context)).toEqual([
      [{ 1: expectedBox(0), score: scores[0] }],
    ]);
    const low = await initialised(createObjectDetector, {
      modelPath,
      modelDir: work.dir,
      modelYamlConfig: { handler: { score_threshold: 0.2 } },
    });
    const [all] = (await runHandler(low.handler, [{ body: await image }], low.context)) as Array<
      Array<Record<string, unknown>>
    >;
    expect(all!.map((d) => Object.keys(d)[0])).toEqual(['1', '1', '2', '3']);
  });

  it('one [N,K,4+1+C] output (YOLO layout, cx/cy/w/h): same detections after NMS', async () => {
    const modelPath = join(work.dir, 'detector-combined.onnx');
    await writeTinyDetector({ outputPath: modelPath, layout: 'combined' });
    const { handler, context } = await initialised(createObjectDetector, { modelPath, modelDir: work.dir });
    const scores = await directScores(modelPath, {});
    const [answer] = (await runHandler(
      handler,
      [{ body: await image }, { body: Buffer.from('junk') }],
      context,
    )) as unknown[];
    expect(answer).toHaveLength(1);
    const [detection] = answer as Array<Record<string, number[] | number>>;
    expect(detection!.score).toBeCloseTo(scores[0]!, 6);
    (detection!['1'] as number[]).forEach((v, i) => {
      expect(v).toBeCloseTo(expectedBox(0)[i]!, 4);
    });
  });

  it('names outputs that are not there in the error', async () => {
    const modelPath = join(work.dir, 'detector-names.onnx');
    await writeTinyDetector({ outputPath: modelPath, layout: 'separate' });
    await expect(
      initialised(createObjectDetector, {
        modelPath,
        modelDir: work.dir,
        modelYamlConfig: { handler: { boxes: 'detection_boxes' } },
      }),
    ).rejects.toMatchObject({
      code: 'MARINA_ERR_HANDLER_CONFIG_INVALID',
      message: expect.stringMatching(
        /reads output 'detection_boxes' \(handler.boxes\) but the model's outputs are boxes, scores, labels/,
      ),
    });
  });
});
