import { join } from 'node:path';
import * as ort from 'onnxruntime-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { writeHeadClassifier } from '@marina/model-zoo';
import { createImageClassifier, preprocessImage, resolveImageClassifierOptions } from '../src/index.ts';
import { createWorkDir, initialised, patternPng, runHandler, writeJson } from './handler-harness.ts';

let work: Awaited<ReturnType<typeof createWorkDir>>;
const images: Buffer[] = [];
beforeAll(async () => {
  work = await createWorkDir();
  for (const [w, h] of [
    [50, 40],
    [33, 70],
    [64, 64],
  ] as const)
    images.push(await patternPng(w, h));
});
afterAll(() => work.remove());

/** The model's own output for `image`, preprocessed the handler's way, run directly in onnxruntime-node. */
async function direct(
  modelPath: string,
  image: Buffer,
  modelYamlConfig: Record<string, unknown> = {},
): Promise<number[]> {
  const session = await ort.InferenceSession.create(modelPath, { intraOpNumThreads: 1 });
  const input = session.inputMetadata[0]!;
  const options = resolveImageClassifierOptions(modelYamlConfig, input.isTensor ? input.shape : []);
  const pixels = new Float32Array(options.channels * options.height * options.width);
  await preprocessImage(image, { ...options, limitInputPixels: true }, pixels, 0);
  // A fixed batch dimension gets the image in every slot; the first row is the answer.
  const batch = input.isTensor && typeof input.shape[0] === 'number' && input.shape[0] > 0 ? input.shape[0] : 1;
  const feed = new Float32Array(pixels.length * batch);
  for (let n = 0; n < batch; n++) feed.set(pixels, n * pixels.length);
  const out = await session.run({
    input: new ort.Tensor('float32', feed, [batch, options.channels, options.height, options.width]),
  });
  await session.release();
  const classes = out.output!.dims[1]!;
  return Array.from((out.output!.data as Float32Array).subarray(0, classes));
}

function softmax(values: number[]): number[] {
  const max = Math.max(...values);
  const e = values.map((v) => Math.exp(v - max));
  const sum = e.reduce((a, b) => a + b, 0);
  return e.map((v) => v / sum);
}

/** The handler's answer as [label, probability] pairs in rank order. */
function pairs(answer: unknown): Array<[string, number]> {
  return [...(answer as Map<string, number>).entries()];
}

function expectMatches(answer: unknown, probabilities: number[], k: number): void {
  const expected = probabilities
    .map((p, i) => [String(i), p] as [string, number])
    .sort((a, b) => b[1] - a[1])
    .slice(0, k);
  const actual = pairs(answer);
  expect(actual.map(([label]) => label)).toEqual(expected.map(([label]) => label));
  actual.forEach(([, p], i) => {
    expect(p).toBeCloseTo(expected[i]![1], 6);
  });
}

describe('image_classifier and models that already return probabilities', () => {
  it('a model ending in Softmax: the answer is its output as is, not a softmax of it (2 classes, so a 0.9 stays 0.9)', async () => {
    const modelPath = join(work.dir, 'softmax-2.onnx');
    await writeHeadClassifier({ outputPath: modelPath, head: 'softmax', numClasses: 2, seed: 7 });
    const { handler, context } = await initialised(createImageClassifier, { modelPath, modelDir: work.dir });
    const answers = await runHandler(
      handler,
      images.map((body) => ({ body })),
      context,
    );
    for (const [i, image] of images.entries()) {
      const probs = await direct(modelPath, image);
      expectMatches(answers[i], probs, 2);
      // A second softmax would squeeze two probabilities towards each other (at most e/(1+e) ≈ 0.73).
      expect(pairs(answers[i])[0]![1]).toBeCloseTo(Math.max(...probs), 6);
    }
  });

  it('a model ending in LogSoftmax: the answer is exp of its output', async () => {
    const modelPath = join(work.dir, 'log-softmax.onnx');
    await writeHeadClassifier({ outputPath: modelPath, head: 'log-softmax', seed: 3 });
    const { handler, context } = await initialised(createImageClassifier, { modelPath, modelDir: work.dir });
    const answers = await runHandler(
      handler,
      images.map((body) => ({ body })),
      context,
    );
    for (const [i, image] of images.entries())
      expectMatches(answers[i], (await direct(modelPath, image)).map(Math.exp), 5);
  });

  it('a model returning logits gets the softmax, labelled from index_to_name.json', async () => {
    const dir = join(work.dir, 'labelled');
    await import('node:fs/promises').then((fs) => fs.mkdir(dir));
    const modelPath = join(dir, 'logits.onnx');
    await writeHeadClassifier({ outputPath: modelPath, head: 'logits', numClasses: 3, seed: 5 });
    await writeJson(join(dir, 'index_to_name.json'), { 0: 'cat', 1: ['n01', 'dog'], 2: 'fish' });
    const { handler, context } = await initialised(createImageClassifier, { modelPath, modelDir: dir });
    const [answer] = await runHandler(handler, [{ body: images[0] }], context);
    const probs = softmax(await direct(modelPath, images[0]!));
    const names = ['cat', 'dog', 'fish'];
    const expected = probs.map((p, i) => [names[i]!, p] as const).sort((a, b) => b[1] - a[1]);
    expect(pairs(answer).map(([l]) => l)).toEqual(expected.map(([l]) => l));
    pairs(answer).forEach(([, p], i) => {
      expect(p).toBeCloseTo(expected[i]![1], 6);
    });
  });

  it('handler.softmax forces either way: true re-applies it to a Softmax model, false passes logits through', async () => {
    const softmaxPath = join(work.dir, 'softmax-10.onnx');
    const logitsPath = join(work.dir, 'logits-10.onnx');
    await writeHeadClassifier({ outputPath: softmaxPath, head: 'softmax', seed: 11 });
    await writeHeadClassifier({ outputPath: logitsPath, head: 'logits', seed: 11 });
    const forced = await initialised(createImageClassifier, {
      modelPath: softmaxPath,
      modelDir: work.dir,
      modelYamlConfig: { handler: { softmax: true, topk: 10 } },
    });
    expectMatches(
      (await runHandler(forced.handler, [{ body: images[1] }], forced.context))[0],
      softmax(await direct(softmaxPath, images[1]!)),
      10,
    );
    const raw = await initialised(createImageClassifier, {
      modelPath: logitsPath,
      modelDir: work.dir,
      modelYamlConfig: { handler: { softmax: false, topk: 3 } },
    });
    expectMatches(
      (await runHandler(raw.handler, [{ body: images[1] }], raw.context))[0],
      await direct(logitsPath, images[1]!),
      3,
    );
  });

  it('handler.softmax must be true, false or auto', async () => {
    const modelPath = join(work.dir, 'logits-bad-config.onnx');
    await writeHeadClassifier({ outputPath: modelPath });
    await expect(
      initialised(createImageClassifier, {
        modelPath,
        modelDir: work.dir,
        modelYamlConfig: { handler: { softmax: 'yes' } },
      }),
    ).rejects.toMatchObject({
      code: 'MARINA_ERR_HANDLER_CONFIG_INVALID',
      message: expect.stringMatching(/handler.softmax must be true/),
    });
  });
});

describe('image_classifier input sizes and batching', () => {
  it('dynamic height/width with handler.size, grayscale from the model, letterbox: same answers as a direct run', async () => {
    const modelPath = join(work.dir, 'gray-dynamic.onnx');
    await writeHeadClassifier({ outputPath: modelPath, head: 'logits', channels: 1, isSizeDynamic: true, seed: 2 });
    const config = {
      handler: {
        resize_mode: 'letterbox',
        size: [24, 40],
        pad_value: 128,
        mean: [0.5, 0.5, 0.5],
        std: [0.5, 0.5, 0.5],
      },
    };
    const { handler, context } = await initialised(createImageClassifier, {
      modelPath,
      modelDir: work.dir,
      modelYamlConfig: config,
    });
    const answers = await runHandler(
      handler,
      images.map((body) => ({ body })),
      context,
    );
    for (const [i, image] of images.entries())
      expectMatches(answers[i], softmax(await direct(modelPath, image, config)), 5);
  });

  for (const fixedBatch of [1, 2]) {
    it(`a model with a fixed batch of ${fixedBatch} answers a batch of 3 (one failing) like one-by-one direct runs`, async () => {
      const modelPath = join(work.dir, `fixed-${fixedBatch}.onnx`);
      await writeHeadClassifier({ outputPath: modelPath, head: 'logits', fixedBatch, seed: 9 });
      const { handler, context } = await initialised(createImageClassifier, {
        modelPath,
        modelDir: work.dir,
        batchSize: 4,
      });
      const answers = await runHandler(
        handler,
        [{ body: images[0] }, { body: Buffer.from('not an image') }, { body: images[1] }, { body: images[2] }],
        context,
      );
      expect(answers[1]).toMatchObject({ code: 'MARINA_ERR_IMAGE_DECODE_FAILED' });
      for (const [row, image] of [
        [0, images[0]!],
        [2, images[1]!],
        [3, images[2]!],
      ] as const)
        expectMatches(answers[row], softmax(await direct(modelPath, image)), 5);
    });
  }
});

describe('image_classifier on a model with several outputs', () => {
  it('reads the output handler.output names (same answer as a direct run) and refuses to guess without it', async () => {
    const modelPath = join(work.dir, 'two-outputs.onnx');
    await writeHeadClassifier({ outputPath: modelPath, head: 'softmax', hasFeaturesOutput: true, seed: 21 });
    await expect(initialised(createImageClassifier, { modelPath, modelDir: work.dir })).rejects.toMatchObject({
      code: 'MARINA_ERR_HANDLER_CONFIG_INVALID',
      message: expect.stringMatching(/the model has 2 \(features, output\); name the class scores with handler.output/),
    });
    const { handler, context } = await initialised(createImageClassifier, {
      modelPath,
      modelDir: work.dir,
      modelYamlConfig: { handler: { output: 'output' } },
    });
    const [answer] = await runHandler(handler, [{ body: images[2] }], context);
    expectMatches(answer, await direct(modelPath, images[2]!), 5);
  });
});
