import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { MarinaError } from '@marina/errors';
import { createHandlerError } from './errors.ts';
import { createImageModelRunner, numberAt, type DecodedImages, type ImageModelRunner, type ImageOutput } from './image-batch.ts';
import { handlerSection, IMAGENET_MEAN, IMAGENET_STD, positiveInt, resolveImagePreprocessOptions, type ImagePreprocessOptions } from './image-preprocess.ts';
import { readFinalActivation } from './onnx-graph.ts';
import type { Handler, HandlerContext, RequestRow } from './types.ts';

export { IMAGENET_MEAN, IMAGENET_STD };

/**
 * How the classifier turns a row of outputs into probabilities: `softmax` applies one
 * (logits); `none` takes them as they are (the model ends in Softmax); `exp` exponentiates
 * (the model ends in LogSoftmax).
 */
export type ProbabilityTransform = 'softmax' | 'none' | 'exp';

/** image_classifier's knobs, from model-config.yaml `handler:`. */
export interface ImageClassifierOptions extends ImagePreprocessOptions {
  /** Classes per answer. Default 5 (at most the number of classes). */
  topk: number;
  /** `handler.softmax`: true applies softmax, false never does, 'auto' (default) decides from the model. */
  softmax: boolean | 'auto';
  /** `handler.output`: the output to read; default the model's only output. */
  output: string | undefined;
}

/**
 * Reads the image_classifier knobs from model-config.yaml's `handler:` section, filling defaults
 * from the model's input shape (`[N,C,H,W]`); see `resolveImagePreprocessOptions`.
 * @throws MARINA_ERR_HANDLER_CONFIG_INVALID naming the bad key.
 */
export function resolveImageClassifierOptions(modelYamlConfig: Record<string, unknown>, inputShape: ReadonlyArray<number | string>): ImageClassifierOptions {
  const h = handlerSection(modelYamlConfig);
  const softmax = h['softmax'] ?? 'auto';
  if (softmax !== true && softmax !== false && softmax !== 'auto') {
    throw createHandlerError.MARINA_ERR_HANDLER_CONFIG_INVALID(`model-config.yaml handler.softmax must be true (the model returns logits), false (it returns probabilities) or auto (decide from the model), got ${JSON.stringify(softmax)}`);
  }
  if (h['output'] !== undefined && typeof h['output'] !== 'string') {
    throw createHandlerError.MARINA_ERR_HANDLER_CONFIG_INVALID(`model-config.yaml handler.output must be the name of a model output, got ${JSON.stringify(h['output'])}`);
  }
  return {
    ...resolveImagePreprocessOptions(modelYamlConfig, inputShape),
    topk: h['topk'] !== undefined ? positiveInt(h['topk'], 'topk') : 5,
    softmax,
    output: h['output'] as string | undefined,
  };
}

/** Labels from index_to_name.json: values may be a string or a list (the last element is the label), as TorchServe. */
export async function readIndexToName(modelDir: string): Promise<Map<number, string> | undefined> {
  let text: string;
  try {
    text = await readFile(join(modelDir, 'index_to_name.json'), 'utf8');
  } catch {
    return undefined;
  }
  const parsed = JSON.parse(text) as Record<string, unknown>;
  const labels = new Map<number, string>();
  for (const [key, value] of Object.entries(parsed)) {
    const label = Array.isArray(value) ? value[value.length - 1] : value;
    labels.set(Number(key), String(label));
  }
  return labels;
}

/**
 * True when a row already is a probability distribution: every value in [0, 1] and the sum
 * within 1e-3 of 1 (float32 softmax outputs sum to 1 within about 1e-6).
 */
export function isProbabilityRow(values: ArrayLike<number>): boolean {
  let sum = 0;
  for (let i = 0; i < values.length; i++) {
    const v = values[i]!;
    if (!(v >= 0 && v <= 1)) return false;
    sum += v;
  }
  return values.length > 1 && Math.abs(sum - 1) <= 1e-3;
}

/**
 * The k best classes as an ordered Map label → probability (a Map keeps the order for numeric
 * labels). `transform` says how the row becomes probabilities (default: softmax of logits).
 */
export function topK(values: ArrayLike<number>, k: number, labels: Map<number, string> | undefined, transform: ProbabilityTransform = 'softmax'): Map<string, number> {
  const probs = new Float64Array(values.length);
  if (transform === 'none') {
    for (let i = 0; i < values.length; i++) probs[i] = values[i]!;
  } else if (transform === 'exp') {
    for (let i = 0; i < values.length; i++) probs[i] = Math.exp(values[i]!);
  } else {
    let max = -Infinity;
    for (let i = 0; i < values.length; i++) if (values[i]! > max) max = values[i]!;
    let sum = 0;
    for (let i = 0; i < values.length; i++) {
      probs[i] = Math.exp(values[i]! - max);
      sum += probs[i]!;
    }
    for (let i = 0; i < probs.length; i++) probs[i] = probs[i]! / sum;
  }
  const order = Array.from(probs.keys()).sort((a, b) => probs[b]! - probs[a]!).slice(0, Math.min(k, probs.length));
  const result = new Map<string, number>();
  for (const i of order) result.set(labels?.get(i) ?? String(i), probs[i]!);
  return result;
}

/** What the model's graph says about the classifier output (the 'auto' decision's first half). */
async function graphTransform(modelPath: string | undefined, outputName: string): Promise<ProbabilityTransform | undefined> {
  const activation = await readFinalActivation(modelPath, outputName);
  return activation === 'softmax' ? 'none' : activation === 'log-softmax' ? 'exp' : undefined;
}

interface Inferred {
  decoded: DecodedImages;
  outputs: ImageOutput[];
}

/**
 * TorchServe's image_classifier: each request's `data`/`body` is an image; the answer is its
 * top-k `{label: probability}` (a Map, serialised as a JSON object in rank order). A request
 * whose image cannot be decoded gets its own 400 while the rest of the batch is served.
 * A model that already ends in Softmax (LogSoftmax) is read as probabilities (log-probabilities)
 * instead of getting a second softmax; with neither in the graph, a row that already sums to 1
 * is taken as is. `handler.softmax` forces the choice.
 * Pipeline-safe: the server may decode the next batch while this one runs.
 */
export function createImageClassifier(): Handler {
  let runner: ImageModelRunner;
  let options: ImageClassifierOptions;
  let outputName: string;
  let labels: Map<number, string> | undefined;
  let transform: ProbabilityTransform | undefined;

  return {
    isPipelineSafe: true,

    async initialize(context: HandlerContext) {
      runner = await createImageModelRunner(context, 'image_classifier');
      options = resolveImageClassifierOptions(context.modelYamlConfig, runner.inputShape);
      runner.options = options;
      // Class scores do not depend on where pixels came from: skip the extra header read.
      runner.isGeometryNeeded = false;
      const outputs = runner.session.outputNames;
      if (options.output !== undefined && !outputs.includes(options.output)) {
        throw createHandlerError.MARINA_ERR_HANDLER_CONFIG_INVALID(`model-config.yaml handler.output is '${options.output}' but the model's outputs are ${outputs.join(', ')}`);
      }
      if (options.output === undefined && outputs.length !== 1) {
        throw createHandlerError.MARINA_ERR_HANDLER_CONFIG_INVALID(`image_classifier reads one output but the model has ${outputs.length} (${outputs.join(', ')}); name the class scores with handler.output in model-config.yaml`);
      }
      outputName = options.output ?? outputs[0]!;
      transform = options.softmax === true ? 'softmax' : options.softmax === false ? 'none' : await graphTransform(context.serializedFilePath, outputName);
      labels = await readIndexToName(context.modelDir);
    },

    preprocess(rows: RequestRow[]): Promise<DecodedImages> {
      return runner.decode(rows, 'image_classifier');
    },

    async inference(input: unknown): Promise<Inferred> {
      const decoded = input as DecodedImages;
      const outputs = (await runner.run(decoded, [outputName])).get(outputName)!;
      return { decoded, outputs };
    },

    postprocess(output: unknown): Array<Map<string, number> | MarinaError> {
      const { decoded, outputs } = output as Inferred;
      const results: Array<Map<string, number> | MarinaError> = decoded.errors.map((e) => e as MarinaError);
      decoded.good.forEach((row, n) => {
        const out = outputs[n]!;
        const classes = out.dims.reduce((a, b) => a * b, 1);
        if (out.dims.filter((d) => d !== 1).length > 1) {
          results[row] = createHandlerError.MARINA_ERR_MODEL_OUTPUT_UNEXPECTED(`image_classifier expected output '${outputName}' of shape [N, classes], got [N, ${out.dims.join(', ')}]`);
          return;
        }
        const values = new Float64Array(classes);
        for (let i = 0; i < classes; i++) values[i] = numberAt(out.data, i);
        results[row] = topK(values, options.topk, labels, transform ?? (isProbabilityRow(values) ? 'none' : 'softmax'));
      });
      return results;
    },
  };
}
