import { GraphBuilder } from './graph-builder.ts';
import { writeOnnxModel, type WriteModelResult } from './onnx-model-writer.ts';
import { createPrng } from './prng.ts';
import { integerOption, pathOption, seedOption } from './validate-options.ts';
import { createError } from './errors.ts';

// TensorProto.DataType
const INT64 = 7;

function batchDim(fixedBatch: number | undefined): number | string {
  return integerOption('fixedBatch', fixedBatch, 0, 1) || 'batch_size';
}

function choice<T extends string>(name: string, value: unknown, choices: readonly T[], fallback: T): T {
  if (value === undefined) return fallback;
  if (!choices.includes(value as T)) {
    throw createError.MARINA_ERR_MODEL_ZOO_INVALID_OPTION(
      `option '${name}' is ${JSON.stringify(value)}; it must be one of ${choices.join(', ')}`,
      { details: { option: name, value } },
    );
  }
  return value as T;
}

/**
 * Writes a small image classifier whose last node is chosen, for the probability checks of
 * image_classifier: input `input` float32 [N,C,S,S] (C = `channels`, 3 or 1; H and W symbolic
 * with `isSizeDynamic`) → Conv(C→8, 3×3, stride 2) + Relu + GlobalAveragePool + Flatten + Gemm
 * → `head`: 'logits' (none), 'softmax' (Softmax) or 'log-softmax' (LogSoftmax) → output
 * `output` float32 [N,numClasses] (after `features` [N,8], the pooled activations, with
 * `hasFeaturesOutput`). Defaults: inputSize 32, numClasses 10, channels 3, seed 1.
 *
 * @throws MARINA_ERR_MODEL_ZOO_INVALID_OPTION for a bad option; MARINA_ERR_MODEL_ZOO_WRITE_FAILED when writing fails.
 */
export async function writeHeadClassifier(options: {
  outputPath: string;
  head?: 'logits' | 'softmax' | 'log-softmax';
  inputSize?: number;
  numClasses?: number;
  channels?: 1 | 3;
  isSizeDynamic?: boolean;
  fixedBatch?: number;
  seed?: number;
  /** Also output the pooled features, `features` [N,8], before `output` (a two-output model). Default false. */
  hasFeaturesOutput?: boolean;
}): Promise<WriteModelResult> {
  const outputPath = pathOption('outputPath', options.outputPath);
  const head = choice('head', options.head, ['logits', 'softmax', 'log-softmax'] as const, 'logits');
  const inputSize = integerOption('inputSize', options.inputSize, 32, 3, 4096);
  const numClasses = integerOption('numClasses', options.numClasses, 10, 2, 100_000);
  const channels = integerOption('channels', options.channels, 3, 1, 3);
  if (channels === 2)
    throw createError.MARINA_ERR_MODEL_ZOO_INVALID_OPTION("option 'channels' is 2; it must be 1 or 3", {
      details: { option: 'channels', value: 2 },
    });
  const seed = seedOption(options.seed, 1);
  const batch = batchDim(options.fixedBatch);
  const prng = createPrng(seed);
  const width = 8;
  const g = new GraphBuilder(`marina_${head.replace('-', '_')}_classifier`);
  const convWeight = g.uniform(
    'conv.weight',
    [width, channels, 3, 3],
    prng,
    Math.sqrt(3) * Math.sqrt(2 / (9 * channels)),
  );
  const convBias = g.uniform('conv.bias', [width], prng, 0.1);
  const fcWeight = g.uniform('fc.weight', [numClasses, width], prng, Math.sqrt(3) * 2);
  const fcBias = g.uniform('fc.bias', [numClasses], prng, 0.1);
  const conv = g.node('Conv', ['input', convWeight, convBias], {
    attributes: { kernel_shape: [3, 3], strides: [2, 2], pads: [1, 1, 1, 1] },
  });
  const flat = g.node('Flatten', [g.node('GlobalAveragePool', [g.node('Relu', [conv])])], {
    ...(options.hasFeaturesOutput ? { output: 'features' } : {}),
    attributes: { axis: 1 },
  });
  if (head === 'logits') g.node('Gemm', [flat, fcWeight, fcBias], { output: 'output', attributes: { transB: 1 } });
  else
    g.node(
      head === 'softmax' ? 'Softmax' : 'LogSoftmax',
      [g.node('Gemm', [flat, fcWeight, fcBias], { attributes: { transB: 1 } })],
      { output: 'output', attributes: { axis: 1 } },
    );
  const side = options.isSizeDynamic ? ['height', 'width'] : [inputSize, inputSize];
  return writeOnnxModel({
    outputPath,
    graph: g.build(
      [{ name: 'input', dims: [batch, channels, ...side] }],
      [
        ...(options.hasFeaturesOutput ? [{ name: 'features', dims: [batch, width] }] : []),
        { name: 'output', dims: [batch, numClasses] },
      ],
    ),
    metadata: {
      'marina.model': `${head}-classifier`,
      'marina.seed': String(seed),
      'marina.num_classes': String(numClasses),
    },
  });
}

/**
 * Writes a model with two outputs and known answers: input `input` float32 [N,4] → `doubled`
 * = input·2 [N,4] and `mean` = the row mean [N,1]. N is symbolic unless `fixedBatch`.
 *
 * @throws MARINA_ERR_MODEL_ZOO_INVALID_OPTION for a bad option; MARINA_ERR_MODEL_ZOO_WRITE_FAILED when writing fails.
 */
export async function writeMultiOutputModel(options: {
  outputPath: string;
  fixedBatch?: number;
}): Promise<WriteModelResult> {
  const outputPath = pathOption('outputPath', options.outputPath);
  const batch = batchDim(options.fixedBatch);
  const g = new GraphBuilder('marina_multi_output');
  g.node('Mul', ['input', g.constant('two', [1], 2)], { output: 'doubled' });
  g.node('ReduceMean', ['input'], { output: 'mean', attributes: { axes: [1], keepdims: 1 } });
  return writeOnnxModel({
    outputPath,
    graph: g.build(
      [{ name: 'input', dims: [batch, 4] }],
      [
        { name: 'doubled', dims: [batch, 4] },
        { name: 'mean', dims: [batch, 1] },
      ],
    ),
    metadata: { 'marina.model': 'multi-output' },
  });
}

/**
 * Writes a segmenter with a known answer: input `input` float32 [N,3,H,W] (H and W symbolic
 * unless `inputSize`) → a 1×1 convolution → output `output`:
 * - `classes: 3` (default): [N,3,H,W], channel c = input channel c, so each pixel's class is its
 *   strongest normalised colour (0 red, 1 green, 2 blue);
 * - `classes: 1`: [N,1,H,W] = 4·(red − green), a "red mask" in logits (Sigmoid applied when `head` is 'sigmoid').
 *
 * @throws MARINA_ERR_MODEL_ZOO_INVALID_OPTION for a bad option; MARINA_ERR_MODEL_ZOO_WRITE_FAILED when writing fails.
 */
export async function writeTinySegmenter(options: {
  outputPath: string;
  classes?: 1 | 3;
  head?: 'logits' | 'sigmoid';
  inputSize?: number;
  fixedBatch?: number;
}): Promise<WriteModelResult> {
  const outputPath = pathOption('outputPath', options.outputPath);
  const classes = integerOption('classes', options.classes, 3, 1, 3);
  if (classes === 2)
    throw createError.MARINA_ERR_MODEL_ZOO_INVALID_OPTION("option 'classes' is 2; it must be 1 or 3", {
      details: { option: 'classes', value: 2 },
    });
  const head = choice('head', options.head, ['logits', 'sigmoid'] as const, 'logits');
  const batch = batchDim(options.fixedBatch);
  const side: Array<number | string> =
    options.inputSize === undefined
      ? ['height', 'width']
      : [integerOption('inputSize', options.inputSize, 32, 1, 4096), options.inputSize];
  const g = new GraphBuilder('marina_tiny_segmenter');
  const weight = g.initializer('seg.weight', [classes, 3, 1, 1], (out) => {
    out.fill(0);
    if (classes === 3)
      [0, 4, 8].forEach((i) => {
        out[i] = 1;
      });
    else out.set([4, -4, 0]);
  });
  const conv = g.node('Conv', ['input', weight], {
    ...(head === 'logits' ? { output: 'output' } : {}),
    attributes: { kernel_shape: [1, 1] },
  });
  if (head === 'sigmoid') g.node('Sigmoid', [conv], { output: 'output' });
  return writeOnnxModel({
    outputPath,
    graph: g.build(
      [{ name: 'input', dims: [batch, 3, ...side] }],
      [{ name: 'output', dims: [batch, classes, ...side] }],
    ),
    metadata: { 'marina.model': `tiny-segmenter-${classes}` },
  });
}

/** The tiny detector's four boxes, xyxy in its 64×64 input, and their labels. */
export const TINY_DETECTOR_BOXES: ReadonlyArray<{ box: readonly [number, number, number, number]; label: number }> = [
  { box: [8, 8, 40, 40], label: 1 },
  { box: [10, 10, 42, 42], label: 1 },
  { box: [40, 40, 60, 60], label: 2 },
  { box: [0, 0, 16, 16], label: 3 },
];
/** Its number of classes (labels 0..3). */
export const TINY_DETECTOR_CLASSES = 4;
/** Per box: which input channel drives its score, and the score's bias: score = sigmoid(4·mean(channel) + bias). */
const SCORE_CHANNEL = [0, 0, 1, 2];
const SCORE_BIAS = [0, -0.5, -1, -1];

/**
 * Writes a detector with known answers: input `input` float32 [N,3,64,64]; four fixed boxes
 * (TINY_DETECTOR_BOXES, in input pixels) whose scores are sigmoid(4·mean(channel) + bias) of
 * the image's mean red (boxes 0 and 1, which overlap at IoU 0.78), green (box 2) and blue
 * (box 3). Layouts:
 * - `separate` (default): `boxes` [N,4,4] xyxy, `scores` [N,4], `labels` int64 [N,4];
 * - `combined`: `output` [N,4,4+1+4]: cx, cy, w, h, objectness (the score), one-hot class scores (YOLO).
 *
 * @throws MARINA_ERR_MODEL_ZOO_INVALID_OPTION for a bad option; MARINA_ERR_MODEL_ZOO_WRITE_FAILED when writing fails.
 */
export async function writeTinyDetector(options: {
  outputPath: string;
  layout?: 'separate' | 'combined';
  fixedBatch?: number;
}): Promise<WriteModelResult> {
  const outputPath = pathOption('outputPath', options.outputPath);
  const layout = choice('layout', options.layout, ['separate', 'combined'] as const, 'separate');
  const batch = batchDim(options.fixedBatch);
  const k = TINY_DETECTOR_BOXES.length;
  const g = new GraphBuilder(`marina_tiny_detector_${layout}`);
  const perChannel = g.node('ReduceMean', [g.node('GlobalAveragePool', ['input'])], {
    attributes: { axes: [3], keepdims: 0 },
  }); // [N,3,1]
  const rowVector = g.node('Transpose', [perChannel], { attributes: { perm: [0, 2, 1] } }); // [N,1,3]
  const weight = g.initializer('score.weight', [3, k], (out) => {
    out.fill(0);
    SCORE_CHANNEL.forEach((c, box) => {
      out[c * k + box] = 4;
    });
  });
  const bias = g.initializer('score.bias', [k], (out) => out.set(SCORE_BIAS));
  const logits = g.node('Add', [g.node('MatMul', [rowVector, weight]), bias]); // [N,1,K]
  const objectness = g.node('Sigmoid', [g.node('Transpose', [logits], { attributes: { perm: [0, 2, 1] } })]); // [N,K,1]
  // A zero of shape [N,1,1], so constants broadcast to the batch.
  const zero = g.node('Mul', [
    g.node('ReduceMean', [perChannel], { attributes: { axes: [1], keepdims: 1 } }),
    g.constant('zero', [1], 0),
  ]);
  if (layout === 'separate') {
    g.node(
      'Add',
      [
        g.initializer('boxes.const', [1, k, 4], (out) =>
          TINY_DETECTOR_BOXES.forEach((b, i) => {
            out.set(b.box, i * 4);
          }),
        ),
        zero,
      ],
      { output: 'boxes' },
    );
    g.node('Flatten', [objectness], { output: 'scores', attributes: { axis: 1 } });
    const labelsFloat = g.node('Add', [
      g.initializer('labels.const', [1, k], (out) => out.set(TINY_DETECTOR_BOXES.map((b) => b.label))),
      g.node('Flatten', [zero], { attributes: { axis: 1 } }),
    ]);
    g.node('Cast', [labelsFloat], { output: 'labels', attributes: { to: INT64 } });
    return writeOnnxModel({
      outputPath,
      graph: g.build(
        [{ name: 'input', dims: [batch, 3, 64, 64] }],
        [
          { name: 'boxes', dims: [batch, k, 4] },
          { name: 'scores', dims: [batch, k] },
          { name: 'labels', dims: [batch, k], elemType: INT64 },
        ],
      ),
      metadata: { 'marina.model': 'tiny-detector-separate' },
    });
  }
  const cxcywh = g.initializer('boxes.cxcywh', [1, k, 4], (out) =>
    TINY_DETECTOR_BOXES.forEach(({ box: [x1, y1, x2, y2] }, i) => {
      out.set([(x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1], i * 4);
    }),
  );
  const oneHot = g.initializer('classes.onehot', [1, k, TINY_DETECTOR_CLASSES], (out) => {
    out.fill(0);
    TINY_DETECTOR_BOXES.forEach((b, i) => {
      out[i * TINY_DETECTOR_CLASSES + b.label] = 1;
    });
  });
  g.node('Concat', [g.node('Add', [cxcywh, zero]), objectness, g.node('Add', [oneHot, zero])], {
    output: 'output',
    attributes: { axis: 2 },
  });
  return writeOnnxModel({
    outputPath,
    graph: g.build(
      [{ name: 'input', dims: [batch, 3, 64, 64] }],
      [{ name: 'output', dims: [batch, k, 5 + TINY_DETECTOR_CLASSES] }],
    ),
    metadata: { 'marina.model': 'tiny-detector-combined' },
  });
}
