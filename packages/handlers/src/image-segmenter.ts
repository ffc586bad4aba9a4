import sharp from 'sharp';
import type { MarinaError } from '@marina/errors';
import { createHandlerError } from './errors.ts';
import {
  createImageModelRunner,
  prepareImageModelRunner,
  selectOutput,
  numberAt,
  type DecodedImages,
  type ImageModelRunner,
  type ImageOutput,
} from './image-batch.ts';
import {
  handlerSection,
  resolveImagePreprocessOptions,
  type ImageGeometry,
  type ImagePreprocessOptions,
} from './image-preprocess.ts';
import { readFinalActivation } from './onnx-graph.ts';
import type { Handler, HandlerContext, RequestRow } from './types.ts';

/** What image_segmenter answers for each image. */
export type SegmenterResponse = 'torchserve' | 'classes' | 'png';
const RESPONSES: readonly SegmenterResponse[] = ['torchserve', 'classes', 'png'];

/** image_segmenter's knobs, from model-config.yaml `handler:`. */
export interface ImageSegmenterOptions extends ImagePreprocessOptions {
  /**
   * `torchserve` (default): TorchServe's answer, H×W rows of [class, probability];
   * `classes`: H×W class indices; `png`: an 8-bit grayscale PNG, the class index per pixel
   * (for a one-channel mask: 255 where the probability reaches `threshold`, else 0), at the
   * original image's size when the resize mode is letterbox or stretch. A request with
   * `Accept: image/png` gets the PNG whatever this says.
   */
  response: SegmenterResponse;
  /** One-channel masks: the probability from which a pixel is foreground. Default 0.5. */
  threshold: number;
  /** `handler.output`: the output to read; default the model's only output. */
  output: string | undefined;
  /** true: the output is scores (softmax / sigmoid applied); false: already probabilities; auto (default): from the graph, else the values. */
  activation: boolean | 'auto';
}

/**
 * Reads image_segmenter's knobs: TorchServe's segmenter preprocessing (shorter side 256,
 * centre crop 224, ImageNet normalisation) unless the config or the model says otherwise.
 * @throws MARINA_ERR_HANDLER_CONFIG_INVALID naming the bad key.
 */
export function resolveImageSegmenterOptions(
  modelYamlConfig: Record<string, unknown>,
  inputShape: ReadonlyArray<number | string>,
): ImageSegmenterOptions {
  const h = handlerSection(modelYamlConfig);
  const invalid = (message: string) => createHandlerError.MARINA_ERR_HANDLER_CONFIG_INVALID(message);
  const response = h.response ?? 'torchserve';
  if (!RESPONSES.includes(response as SegmenterResponse))
    throw invalid(
      `model-config.yaml handler.response must be one of ${RESPONSES.join(', ')}, got ${JSON.stringify(response)}`,
    );
  const threshold = h.threshold ?? 0.5;
  if (typeof threshold !== 'number' || !(threshold >= 0 && threshold <= 1))
    throw invalid(
      `model-config.yaml handler.threshold must be a probability from 0 to 1, got ${JSON.stringify(threshold)}`,
    );
  if (h.output !== undefined && typeof h.output !== 'string')
    throw invalid(
      `model-config.yaml handler.output must be the name of a model output, got ${JSON.stringify(h.output)}`,
    );
  const activation = h.activation ?? 'auto';
  if (activation !== true && activation !== false && activation !== 'auto')
    throw invalid(
      `model-config.yaml handler.activation must be true (the output is scores), false (probabilities) or auto, got ${JSON.stringify(activation)}`,
    );
  return {
    ...resolveImagePreprocessOptions(modelYamlConfig, inputShape),
    response: response as SegmenterResponse,
    threshold,
    output: h.output as string | undefined,
    activation,
  };
}

interface SegmenterBatch extends DecodedImages {
  /** Per row: whether the request asked for a PNG (Accept: image/png). */
  wantsPng: boolean[];
}

interface Inferred {
  decoded: SegmenterBatch;
  outputs: ImageOutput[];
}

/** Per pixel of one image: the best class and its probability, from a [C,H,W] (or [1,H,W]) output. */
export function segmentPixels(
  out: ImageOutput,
  options: { threshold: number; transform: 'none' | 'activate' | 'auto' },
): { classes: Uint8Array | Uint16Array; probabilities: Float32Array; height: number; width: number; channels: number } {
  const dims = out.dims.length === 2 ? [1, ...out.dims] : out.dims;
  const [channels, height, width] = dims as [number, number, number];
  const plane = height * width;
  let transform = options.transform;
  if (transform === 'auto') {
    // Scores outside [0, 1] (or one-hot-free channels that do not sum to 1) are logits.
    transform = 'none';
    for (let i = 0; i < channels * plane; i++) {
      const v = numberAt(out.data, i);
      if (!(v >= 0 && v <= 1)) {
        transform = 'activate';
        break;
      }
    }
  }
  const classes = channels > 255 ? new Uint16Array(plane) : new Uint8Array(plane);
  const probabilities = new Float32Array(plane);
  for (let p = 0; p < plane; p++) {
    if (channels === 1) {
      const v = numberAt(out.data, p);
      const prob = transform === 'activate' ? 1 / (1 + Math.exp(-v)) : v;
      probabilities[p] = prob;
      classes[p] = prob >= options.threshold ? 1 : 0;
      continue;
    }
    let best = 0;
    let max = -Infinity;
    for (let c = 0; c < channels; c++) {
      const v = numberAt(out.data, c * plane + p);
      if (v > max) {
        max = v;
        best = c;
      }
    }
    let prob = max;
    if (transform === 'activate') {
      let sum = 0;
      for (let c = 0; c < channels; c++) sum += Math.exp(numberAt(out.data, c * plane + p) - max);
      prob = 1 / sum;
    }
    classes[p] = best;
    probabilities[p] = prob;
  }
  return { classes, probabilities, height, width, channels };
}

/** The mask as a PNG; for letterbox and stretch, the padding is cut off and the mask scaled (nearest) to the original image. */
async function maskPng(
  mask: Uint8Array,
  size: { height: number; width: number },
  geometry: ImageGeometry,
  options: ImagePreprocessOptions,
): Promise<Buffer> {
  let image = sharp(Buffer.from(mask.buffer, mask.byteOffset, mask.byteLength), {
    raw: { width: size.width, height: size.height, channels: 1 },
  });
  if (options.resizeMode !== 'crop') {
    const sx = size.width / options.width;
    const sy = size.height / options.height;
    const left = Math.max(0, Math.round(geometry.offsetX * sx));
    const top = Math.max(0, Math.round(geometry.offsetY * sy));
    const width = Math.max(1, Math.min(size.width - left, Math.round(geometry.resizedWidth * sx)));
    const height = Math.max(1, Math.min(size.height - top, Math.round(geometry.resizedHeight * sy)));
    if (left !== 0 || top !== 0 || width !== size.width || height !== size.height)
      image = image.extract({ left, top, width, height });
    image = image.resize({
      width: geometry.originalWidth,
      height: geometry.originalHeight,
      fit: 'fill',
      kernel: 'nearest',
    });
  }
  return image.toColourspace('b-w').png().toBuffer();
}

/**
 * TorchServe's image_segmenter for ONNX models with an [N,C,H,W] (per-class scores) or
 * [N,1,H,W] (one mask) output: per image, H×W rows of [class, probability] (TorchServe's
 * answer), a class map, or a PNG mask (`handler.response`, or `Accept: image/png`).
 */
export function createImageSegmenter(): Handler {
  let runner: ImageModelRunner;
  let options: ImageSegmenterOptions;
  let outputName: string;
  let transform: 'none' | 'activate' | 'auto' = 'auto';
  /** The runner prepare made from the graph, before the session (undefined: initialize makes it). */
  let prepared: ImageModelRunner | undefined;

  /** What the handler derives from the model's inputs and outputs (prepare's graph, or the session's). */
  async function setUp(r: ImageModelRunner, context: HandlerContext): Promise<void> {
    options = resolveImageSegmenterOptions(context.modelYamlConfig, r.inputShape);
    r.options = options;
    outputName = selectOutput(r.outputNames, options.output, 'image_segmenter', 'the mask');
    if (options.activation === true) transform = 'activate';
    else if (options.activation === false) transform = 'none';
    else {
      const last = await readFinalActivation(context.serializedFilePath, outputName);
      transform = last === 'softmax' || last === 'sigmoid' ? 'none' : 'auto';
    }
  }

  return {
    isPipelineSafe: true,

    async prepare(context: HandlerContext) {
      prepared = await prepareImageModelRunner(context, 'image_segmenter', (r) => setUp(r, context));
      if (prepared) runner = prepared;
      return prepared !== undefined;
    },

    async initialize(context: HandlerContext) {
      runner = await createImageModelRunner(context, 'image_segmenter', prepared, (r) => setUp(r, context));
    },

    async preprocess(rows: RequestRow[], context: HandlerContext): Promise<SegmenterBatch> {
      const wantsPng = rows.map((_, i) => /\bimage\/png\b/i.test(context.getRequestHeader(i, 'accept') ?? ''));
      return { ...(await runner.decode(rows, 'image_segmenter')), wantsPng };
    },

    async inference(input: unknown): Promise<Inferred> {
      const decoded = input as SegmenterBatch;
      return { decoded, outputs: (await runner.run(decoded, [outputName])).get(outputName)! };
    },

    async postprocess(output: unknown, context: HandlerContext): Promise<unknown[]> {
      const { decoded, outputs } = output as Inferred;
      const results: unknown[] = decoded.errors.map((e) => e as MarinaError);
      await Promise.all(
        decoded.good.map(async (row, n) => {
          const out = outputs[n]!;
          if (out.dims.length !== 3 && out.dims.length !== 2) {
            results[row] = createHandlerError.MARINA_ERR_MODEL_OUTPUT_UNEXPECTED(
              `image_segmenter expected output '${outputName}' of shape [N,classes,H,W], got [N, ${out.dims.join(', ')}]`,
            );
            return;
          }
          const seg = segmentPixels(out, { threshold: options.threshold, transform });
          const response = decoded.wantsPng[row] ? 'png' : options.response;
          if (response === 'png') {
            const mask = seg.channels === 1 ? seg.classes.map((c) => (c === 1 ? 255 : 0)) : seg.classes;
            results[row] = await maskPng(
              mask instanceof Uint8Array ? mask : Uint8Array.from(mask, (c) => Math.min(c, 255)),
              seg,
              decoded.geometry[row]!,
              options,
            );
            context.setResponseContentType(row, 'image/png');
            return;
          }
          const rowsOut: unknown[] = [];
          for (let y = 0; y < seg.height; y++) {
            const line: unknown[] = [];
            for (let x = 0; x < seg.width; x++) {
              const p = y * seg.width + x;
              line.push(response === 'classes' ? seg.classes[p] : [seg.classes[p], seg.probabilities[p]]);
            }
            rowsOut.push(line);
          }
          results[row] = rowsOut;
        }),
      );
      return results;
    },
  };
}
