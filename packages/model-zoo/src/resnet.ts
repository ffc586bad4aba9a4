import { createError } from './errors.ts';
import { GraphBuilder } from './graph-builder.ts';
import { writeOnnxModel, type WriteModelResult } from './onnx-model-writer.ts';
import { createPrng, type Prng } from './prng.ts';
import { integerOption, pathOption, seedOption } from './validate-options.ts';

/** The ResNet depths the model zoo writes, with torchvision's architectures. */
export type ResnetDepth = 18 | 50 | 152;

export const RESNET_DEPTHS: readonly ResnetDepth[] = [18, 50, 152];

interface ResnetArchitecture {
  block: 'basic' | 'bottleneck';
  layers: readonly [number, number, number, number];
}

const ARCHITECTURES: Record<ResnetDepth, ResnetArchitecture> = {
  18: { block: 'basic', layers: [2, 2, 2, 2] },
  50: { block: 'bottleneck', layers: [3, 4, 6, 3] },
  152: { block: 'bottleneck', layers: [3, 8, 36, 3] },
};

/** One convolution (batch norm folded in) of the network, in torchvision's order and naming. */
interface ConvLayer {
  name: string;
  inChannels: number;
  outChannels: number;
  kernel: number;
  stride: number;
  pad: number;
  outputSize: number;
  /** The last convolution of a residual branch: scaled down so the residual sum stays bounded. */
  isBranchEnd: boolean;
}

interface ResnetBlock {
  convs: ConvLayer[];
  downsample?: ConvLayer;
}

interface ResnetPlan {
  stem: ConvLayer;
  blocks: ResnetBlock[];
  featureChannels: number;
}

function checkDepth(depth: unknown): ResnetDepth {
  if (!RESNET_DEPTHS.includes(depth as ResnetDepth)) {
    throw createError.MARINA_ERR_MODEL_ZOO_INVALID_OPTION(
      `option 'depth' is ${JSON.stringify(depth)}; it must be one of ${RESNET_DEPTHS.join(', ')}`,
      { details: { option: 'depth', value: depth } },
    );
  }
  return depth as ResnetDepth;
}

function convOutputSize(size: number, kernel: number, stride: number, pad: number): number {
  return Math.floor((size + 2 * pad - kernel) / stride) + 1;
}

/** Lays out torchvision's ResNet (v1.5: a bottleneck's stride sits on its 3×3 conv). */
function planResnet(depth: ResnetDepth, imageSize: number): ResnetPlan {
  const { block, layers } = ARCHITECTURES[depth];
  const expansion = block === 'basic' ? 1 : 4;
  let size = convOutputSize(imageSize, 7, 2, 3);
  const stem: ConvLayer = {
    name: 'conv1',
    inChannels: 3,
    outChannels: 64,
    kernel: 7,
    stride: 2,
    pad: 3,
    outputSize: size,
    isBranchEnd: false,
  };
  size = convOutputSize(size, 3, 2, 1);
  let inplanes = 64;
  const blocks: ResnetBlock[] = [];
  layers.forEach((blockCount, layerIndex) => {
    const planes = 64 * 2 ** layerIndex;
    for (let b = 0; b < blockCount; b += 1) {
      const stride = b === 0 && layerIndex > 0 ? 2 : 1;
      const prefix = `layer${layerIndex + 1}.${b}`;
      const inputSize = size;
      const strided = convOutputSize(inputSize, 3, stride, 1);
      const conv = (
        name: string,
        inChannels: number,
        outChannels: number,
        kernel: number,
        s: number,
        isBranchEnd = false,
      ): ConvLayer => ({
        name: `${prefix}.${name}`,
        inChannels,
        outChannels,
        kernel,
        stride: s,
        pad: kernel === 3 ? 1 : 0,
        outputSize: s === 1 ? inputSize : strided,
        isBranchEnd,
      });
      const convs =
        block === 'basic'
          ? [
              conv('conv1', inplanes, planes, 3, stride),
              { ...conv('conv2', planes, planes, 3, 1, true), outputSize: strided },
            ]
          : [
              conv('conv1', inplanes, planes, 1, 1),
              conv('conv2', planes, planes, 3, stride),
              { ...conv('conv3', planes, planes * expansion, 1, 1, true), outputSize: strided },
            ];
      const needsDownsample = stride !== 1 || inplanes !== planes * expansion;
      blocks.push({
        convs,
        ...(needsDownsample ? { downsample: conv('downsample.0', inplanes, planes * expansion, 1, stride) } : {}),
      });
      inplanes = planes * expansion;
      size = strided;
    }
  });
  return { stem, blocks, featureChannels: inplanes };
}

function allConvs(plan: ResnetPlan): ConvLayer[] {
  return [plan.stem, ...plan.blocks.flatMap((b) => (b.downsample ? [...b.convs, b.downsample] : b.convs))];
}

function checkNumClasses(numClasses: unknown): number {
  return integerOption('numClasses', numClasses, 1000, 1, 100_000);
}

/**
 * Trainable parameters of torchvision's `resnet{depth}` (batch-norm weight and bias
 * included, running statistics not): 11,689,512 for 18, 25,557,032 for 50 and
 * 60,192,808 for 152 at 1000 classes. The written ONNX model folds batch norm into conv
 * biases and has fewer values; see `countResnetFoldedParameters`.
 *
 * @throws MARINA_ERR_MODEL_ZOO_INVALID_OPTION for an unknown depth or bad class count.
 */
export function countResnetParameters(depth: ResnetDepth, numClasses?: number): number {
  const plan = planResnet(checkDepth(depth), 224);
  const classes = checkNumClasses(numClasses);
  const convs = allConvs(plan).reduce(
    (n, c) => n + c.outChannels * c.inChannels * c.kernel ** 2 + 2 * c.outChannels,
    0,
  );
  return convs + plan.featureChannels * classes + classes;
}

/**
 * Float values in the written ONNX ResNet (conv weights and folded biases, fc weight and
 * bias); equals `WriteModelResult.parameterCount` from `writeResnet`. It is
 * `countResnetParameters` minus one value per batch-norm channel.
 */
export function countResnetFoldedParameters(depth: ResnetDepth, numClasses?: number): number {
  const plan = planResnet(checkDepth(depth), 224);
  const classes = checkNumClasses(numClasses);
  const convs = allConvs(plan).reduce((n, c) => n + c.outChannels * c.inChannels * c.kernel ** 2 + c.outChannels, 0);
  return convs + plan.featureChannels * classes + classes;
}

/**
 * Multiply-accumulates for one image of `imageSize`×`imageSize` pixels (default 224) through
 * the convolutions and the final fully connected layer (1000 classes), the convention behind
 * torchvision's published "GFLOPS" (ResNet-152: about 11.5e9).
 *
 * @throws MARINA_ERR_MODEL_ZOO_INVALID_OPTION for an unknown depth or bad image size.
 */
export function countResnetMacs(depth: ResnetDepth, imageSize?: number): number {
  const size = integerOption('imageSize', imageSize, 224, 32, 8192);
  const plan = planResnet(checkDepth(depth), size);
  const convs = allConvs(plan).reduce(
    (n, c) => n + c.outChannels * c.inChannels * c.kernel ** 2 * c.outputSize ** 2,
    0,
  );
  return convs + plan.featureChannels * 1000;
}

// Scaling of the random weights. He-uniform on every conv keeps each layer's second moment;
// each residual branch's last conv is scaled by 1/sqrt(2·blocks) so the growth over all
// residual additions stays bounded (about e) for 18 and 152 layers alike, in the spirit
// of Fixup. The fc gain makes logits spread by about 2 across classes, so the softmax is
// neither flat nor one-hot.
const CONV_BIAS_BOUND = 0.05;
const FC_GAIN = 2;
const FC_BIAS_BOUND = 0.1;

function addConv(g: GraphBuilder, prng: Prng, conv: ConvLayer, input: string, branchScale: number): string {
  const fanIn = conv.inChannels * conv.kernel ** 2;
  const bound = Math.sqrt(3) * Math.sqrt(2 / fanIn) * (conv.isBranchEnd ? branchScale : 1);
  const weight = g.uniform(
    `${conv.name}.weight`,
    [conv.outChannels, conv.inChannels, conv.kernel, conv.kernel],
    prng,
    bound,
  );
  const bias = g.uniform(`${conv.name}.bias`, [conv.outChannels], prng, CONV_BIAS_BOUND);
  return g.node('Conv', [input, weight, bias], {
    attributes: {
      kernel_shape: [conv.kernel, conv.kernel],
      strides: [conv.stride, conv.stride],
      pads: [conv.pad, conv.pad, conv.pad, conv.pad],
      dilations: [1, 1],
      group: 1,
    },
  });
}

/**
 * Writes a torchvision-shaped ResNet (18, 50 or 152 layers) with seeded random weights and
 * batch norm folded into the convolutions. Input `input` float32 [batch_size,3,224,224]
 * (symbolic batch), output `output` float32 [batch_size,numClasses] (logits). The same
 * seed gives a byte-identical file. Weights stream to disk one tensor at a time
 * (ResNet-152: about 230 MB on disk, far less in memory). With `isExternalData` the weights
 * go to `<outputPath>.data`, each tensor page-aligned so onnxruntime can memory-map them.
 * The seed, depth and class count are stored in the model's metadata (`readModelMetadata`).
 *
 * Defaults: seed 42, numClasses 1000, isExternalData false.
 * @throws MARINA_ERR_MODEL_ZOO_INVALID_OPTION for a bad option; MARINA_ERR_MODEL_ZOO_WRITE_FAILED when writing fails.
 */
export async function writeResnet(options: {
  depth: ResnetDepth;
  outputPath: string;
  seed?: number;
  isExternalData?: boolean;
  numClasses?: number;
}): Promise<WriteModelResult> {
  const depth = checkDepth(options.depth);
  const outputPath = pathOption('outputPath', options.outputPath);
  const seed = seedOption(options.seed, 42);
  const numClasses = checkNumClasses(options.numClasses);
  const isExternalData = options.isExternalData ?? false;
  const plan = planResnet(depth, 224);
  const branchScale = 1 / Math.sqrt(2 * plan.blocks.length);
  const prng = createPrng(seed);
  const g = new GraphBuilder(`resnet${depth}`);

  let x = g.node('Relu', [addConv(g, prng, plan.stem, 'input', branchScale)]);
  x = g.node('MaxPool', [x], { attributes: { kernel_shape: [3, 3], strides: [2, 2], pads: [1, 1, 1, 1] } });
  for (const block of plan.blocks) {
    let branch = x;
    block.convs.forEach((conv, i) => {
      branch = addConv(g, prng, conv, branch, branchScale);
      if (i < block.convs.length - 1) branch = g.node('Relu', [branch]);
    });
    const identity = block.downsample ? addConv(g, prng, block.downsample, x, branchScale) : x;
    x = g.node('Relu', [g.node('Add', [branch, identity])]);
  }
  const features = g.node('Flatten', [g.node('GlobalAveragePool', [x])], { attributes: { axis: 1 } });
  const fcWeight = g.uniform(
    'fc.weight',
    [numClasses, plan.featureChannels],
    prng,
    Math.sqrt(3 / plan.featureChannels) * FC_GAIN,
  );
  const fcBias = g.uniform('fc.bias', [numClasses], prng, FC_BIAS_BOUND);
  g.node('Gemm', [features, fcWeight, fcBias], {
    output: 'output',
    attributes: { alpha: { float: 1 }, beta: { float: 1 }, transB: 1 },
  });

  return writeOnnxModel({
    outputPath,
    isExternalData,
    graph: g.build(
      [{ name: 'input', dims: ['batch_size', 3, 224, 224] }],
      [{ name: 'output', dims: ['batch_size', numClasses] }],
    ),
    docString: `torchvision-shaped ResNet-${depth} with seeded random weights (batch norm folded); written by @marina/model-zoo`,
    metadata: {
      'marina.model': `resnet-${depth}`,
      'marina.seed': String(seed),
      'marina.num_classes': String(numClasses),
      'marina.external_data': String(isExternalData),
    },
  });
}
