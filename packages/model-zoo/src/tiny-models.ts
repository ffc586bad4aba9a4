import { GraphBuilder } from './graph-builder.ts';
import { writeOnnxModel, type WriteModelResult } from './onnx-model-writer.ts';
import { createPrng } from './prng.ts';
import { integerOption, pathOption, requiredIntegerOption, seedOption } from './validate-options.ts';

function batchDim(fixedBatch: number | undefined): number | string {
  return integerOption('fixedBatch', fixedBatch, 0, 1) || 'batch_size';
}

/**
 * Writes a tiny image classifier for fast tests: input `input` float32 [N,3,S,S] →
 * Conv(3→8, 3×3, stride 2, pad 1) + Relu + GlobalAveragePool + Flatten + Gemm → output
 * `output` float32 [N,numClasses] (logits). N is the symbolic `batch_size` unless `fixedBatch`.
 * Defaults: inputSize 32, numClasses 10, seed 1. A few kilobytes; loads in milliseconds.
 *
 * @throws MARINA_ERR_MODEL_ZOO_INVALID_OPTION for a bad option; MARINA_ERR_MODEL_ZOO_WRITE_FAILED when writing fails.
 */
export async function writeTinyClassifier(options: {
  outputPath: string;
  inputSize?: number;
  numClasses?: number;
  seed?: number;
  fixedBatch?: number;
}): Promise<WriteModelResult> {
  const outputPath = pathOption('outputPath', options.outputPath);
  const inputSize = integerOption('inputSize', options.inputSize, 32, 3, 4096);
  const numClasses = integerOption('numClasses', options.numClasses, 10, 1, 100_000);
  const seed = seedOption(options.seed, 1);
  const batch = batchDim(options.fixedBatch);
  const prng = createPrng(seed);
  const channels = 8;
  const g = new GraphBuilder('marina_tiny_classifier');
  const convWeight = g.uniform('conv.weight', [channels, 3, 3, 3], prng, Math.sqrt(3) * Math.sqrt(2 / 27));
  const convBias = g.uniform('conv.bias', [channels], prng, 0.1);
  // Unit-variance logits over `channels` inputs: the softmax is neither flat nor one-hot.
  const fcWeight = g.uniform('fc.weight', [numClasses, channels], prng, Math.sqrt(3) * 2);
  const fcBias = g.uniform('fc.bias', [numClasses], prng, 0.1);
  const conv = g.node('Conv', ['input', convWeight, convBias], {
    attributes: { kernel_shape: [3, 3], strides: [2, 2], pads: [1, 1, 1, 1] },
  });
  const pooled = g.node('GlobalAveragePool', [g.node('Relu', [conv])]);
  const flat = g.node('Flatten', [pooled], { attributes: { axis: 1 } });
  g.node('Gemm', [flat, fcWeight, fcBias], { output: 'output', attributes: { transB: 1 } });
  return writeOnnxModel({
    outputPath,
    graph: g.build(
      [{ name: 'input', dims: [batch, 3, inputSize, inputSize] }],
      [{ name: 'output', dims: [batch, numClasses] }],
    ),
    metadata: {
      'marina.model': 'tiny-classifier',
      'marina.seed': String(seed),
      'marina.num_classes': String(numClasses),
    },
  });
}

/**
 * Writes a model with a known answer: input `input` float32 [N,4] → output `output` = input·2 + 1,
 * float32 [N,4]. N is the symbolic `batch_size` unless `fixedBatch`.
 *
 * @throws MARINA_ERR_MODEL_ZOO_INVALID_OPTION for a bad option; MARINA_ERR_MODEL_ZOO_WRITE_FAILED when writing fails.
 */
export async function writeTinyTensorModel(options: {
  outputPath: string;
  fixedBatch?: number;
}): Promise<WriteModelResult> {
  const outputPath = pathOption('outputPath', options.outputPath);
  const batch = batchDim(options.fixedBatch);
  const g = new GraphBuilder('marina_tiny_tensor');
  const doubled = g.node('Mul', ['input', g.constant('two', [1], 2)]);
  g.node('Add', [doubled, g.constant('one', [1], 1)], { output: 'output' });
  return writeOnnxModel({
    outputPath,
    graph: g.build([{ name: 'input', dims: [batch, 4] }], [{ name: 'output', dims: [batch, 4] }]),
    metadata: { 'marina.model': 'tiny-tensor' },
  });
}

// TensorProto.DataType values used in the slow model's loop body.
const INT64 = 7;
const BOOL = 9;
const FLOAT = 1;
// AttributeProto.AttributeType.GRAPH
const ATTRIBUTE_GRAPH = 5;

function typed(name: string, elemType: number, dims: readonly (number | string)[]) {
  return {
    name,
    type: {
      tensorType: {
        elemType,
        shape: { dim: dims.map((d) => (typeof d === 'string' ? { dimParam: d } : { dimValue: d })) },
      },
    },
  };
}

/**
 * Writes a deliberately slow model for timeout tests: input `input` float32 [N,width] →
 * `layers` chained (MatMul with a width×width weight, then Tanh) → output `output` float32
 * [N,width]. The chain is one ONNX `Loop` over a shared weight, so the file stays about
 * width²·4 bytes (4 MiB at width 1024) and a session loads in milliseconds however many
 * layers there are (2000 unrolled nodes took 3.5 s to load; the loop takes under 0.1 s).
 *
 * Cost: about width² multiply-adds per layer per row. Measured at width 1024, batch 1, one
 * intra-op thread (graphOptimizationLevel 'all', the project's 2-core machine, onnxruntime-node
 * 1.30): 0.15–0.2 ms per layer, so `layers: 5000` ≈ 0.75–1 s per run. Time grows linearly with
 * layers and roughly linearly with batch size; measure on your machine before relying on it.
 * Defaults: width 1024, seed 1.
 *
 * @throws MARINA_ERR_MODEL_ZOO_INVALID_OPTION for a bad option; MARINA_ERR_MODEL_ZOO_WRITE_FAILED when writing fails.
 */
export async function writeSlowModel(options: {
  outputPath: string;
  layers: number;
  width?: number;
  seed?: number;
}): Promise<WriteModelResult> {
  const outputPath = pathOption('outputPath', options.outputPath);
  const layers = requiredIntegerOption('layers', options.layers, 1, 100_000_000);
  const width = integerOption('width', options.width, 1024, 1, 16_384);
  const seed = seedOption(options.seed, 1);
  const prng = createPrng(seed);
  const g = new GraphBuilder('marina_slow');
  // Scaled so Tanh stays out of saturation and the values keep changing from layer to layer.
  const weight = g.uniform('weight', [width, width], prng, Math.sqrt(3 / width));
  const tripCount = g.node('Constant', [], { attributes: { value_int: layers } });
  const body = {
    name: 'marina_slow_layer',
    node: [
      { name: 'layer_matmul', opType: 'MatMul', domain: '', input: ['x_in', weight], output: ['product'] },
      { name: 'layer_tanh', opType: 'Tanh', domain: '', input: ['product'], output: ['x_out'] },
      { name: 'layer_continue', opType: 'Identity', domain: '', input: ['cond_in'], output: ['cond_out'] },
    ],
    input: [typed('iteration', INT64, []), typed('cond_in', BOOL, []), typed('x_in', FLOAT, ['batch_size', width])],
    output: [typed('cond_out', BOOL, []), typed('x_out', FLOAT, ['batch_size', width])],
  };
  g.rawNode({
    opType: 'Loop',
    input: [tripCount, '', 'input'],
    output: ['output'],
    attribute: [{ name: 'body', type: ATTRIBUTE_GRAPH, g: body }],
  });
  return writeOnnxModel({
    outputPath,
    graph: g.build([{ name: 'input', dims: ['batch_size', width] }], [{ name: 'output', dims: ['batch_size', width] }]),
    metadata: { 'marina.model': 'slow', 'marina.seed': String(seed), 'marina.layers': String(layers) },
  });
}

// TensorProto.DataType values of the mixed-types model.
const UINT8 = 2;
const INT32 = 6;
const FLOAT16 = 10;
const DOUBLE = 11;

/**
 * Writes a model with one input and one output of each kind a tensor protocol must carry, all
 * with known answers (N is the symbolic `batch_size`):
 * `x` float32 [N,4] and `scale` float32 rank-0 → `y` = x·scale float32 [N,4];
 * `ids` int64 [N,3] → `ids_out` = ids + 1 int64; `mask` bool [N,3] → `mask_out` = not mask;
 * `half` float16 [N,2] → `half_out` = half + half float16; `small` uint8 [N,2] → `small_out` = small int32;
 * `wide` float64 [N,2] → `wide_out` = wide · wide float64.
 *
 * @throws MARINA_ERR_MODEL_ZOO_WRITE_FAILED when writing fails.
 */
export async function writeMixedTypesModel(options: { outputPath: string }): Promise<WriteModelResult> {
  const outputPath = pathOption('outputPath', options.outputPath);
  const g = new GraphBuilder('marina_mixed_types');
  g.node('Mul', ['x', 'scale'], { output: 'y' });
  const oneInt = g.node('Constant', [], { attributes: { value_int: 1 } });
  g.node('Add', ['ids', oneInt], { output: 'ids_out' });
  g.node('Not', ['mask'], { output: 'mask_out' });
  g.node('Add', ['half', 'half'], { output: 'half_out' });
  g.node('Cast', ['small'], { output: 'small_out', attributes: { to: INT32 } });
  g.node('Mul', ['wide', 'wide'], { output: 'wide_out' });
  const n = 'batch_size';
  return writeOnnxModel({
    outputPath,
    graph: g.build(
      [
        { name: 'x', dims: [n, 4] },
        { name: 'scale', dims: [] },
        { name: 'ids', dims: [n, 3], elemType: INT64 },
        { name: 'mask', dims: [n, 3], elemType: BOOL },
        { name: 'half', dims: [n, 2], elemType: FLOAT16 },
        { name: 'small', dims: [n, 2], elemType: UINT8 },
        { name: 'wide', dims: [n, 2], elemType: DOUBLE },
      ],
      [
        { name: 'y', dims: [n, 4] },
        { name: 'ids_out', dims: [n, 3], elemType: INT64 },
        { name: 'mask_out', dims: [n, 3], elemType: BOOL },
        { name: 'half_out', dims: [n, 2], elemType: FLOAT16 },
        { name: 'small_out', dims: [n, 2], elemType: INT32 },
        { name: 'wide_out', dims: [n, 2], elemType: DOUBLE },
      ],
    ),
    metadata: { 'marina.model': 'mixed-types' },
  });
}
