import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import sharp from 'sharp';
import * as ort from 'onnxruntime-node';
import { isMarinaError, type MarinaError } from '@marina/errors';
import { createHandlerError } from './errors.ts';
import { isDynamicDim } from './signature-checks.ts';
import { payloadBytes, rowPayload } from './row-input.ts';
import type { Handler, HandlerContext, RequestRow } from './types.ts';

/** ImageNet statistics, as torchvision's and TorchServe's image_classifier use. */
export const IMAGENET_MEAN = [0.485, 0.456, 0.406] as const;
export const IMAGENET_STD = [0.229, 0.224, 0.225] as const;

/** sharp's own default pixel limit (TorchServe follows PIL's, of the same order). */
const DEFAULT_PIXEL_LIMIT = 268_402_689;

/** Preprocessing and top-k knobs, from model-config.yaml `handler:` (`resize`, `crop`, `mean`, `std`, `topk`). */
export interface ImageClassifierOptions {
  /** Shorter side after resizing, px. Default: crop × 256/224 (256 for a 224 crop), torchvision's ratio. */
  resize: number;
  /** Centre crop, px: [height, width]. Default: the model input's H and W, else 224. */
  crop: [number, number];
  mean: [number, number, number];
  std: [number, number, number];
  /** Classes per answer. Default 5 (at most the number of classes). */
  topk: number;
}

function positiveInt(value: unknown, key: string): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value <= 0) {
    throw createHandlerError.MARINA_ERR_HANDLER_CONFIG_INVALID(`model-config.yaml handler.${key} must be a positive integer, got ${JSON.stringify(value)}`);
  }
  return value;
}

function triple(value: unknown, key: string, positive: boolean): [number, number, number] {
  if (!Array.isArray(value) || value.length !== 3 || !value.every((v) => typeof v === 'number' && Number.isFinite(v) && (!positive || v > 0))) {
    throw createHandlerError.MARINA_ERR_HANDLER_CONFIG_INVALID(`model-config.yaml handler.${key} must be a list of 3 ${positive ? 'positive ' : ''}numbers (one per RGB channel), got ${JSON.stringify(value)}`);
  }
  return value as [number, number, number];
}

/**
 * Reads the image_classifier knobs from model-config.yaml's `handler:` section, filling defaults
 * from the model's input shape (`[N,3,H,W]`).
 * @throws MARINA_ERR_HANDLER_CONFIG_INVALID naming the bad key.
 */
export function resolveImageClassifierOptions(modelYamlConfig: Record<string, unknown>, inputShape: ReadonlyArray<number | string>): ImageClassifierOptions {
  const section = modelYamlConfig['handler'];
  const h = (section && typeof section === 'object' && !Array.isArray(section) ? section : {}) as Record<string, unknown>;
  const modelH = inputShape.length === 4 && !isDynamicDim(inputShape[2]) ? Number(inputShape[2]) : undefined;
  const modelW = inputShape.length === 4 && !isDynamicDim(inputShape[3]) ? Number(inputShape[3]) : undefined;
  let crop: [number, number];
  if (h['crop'] !== undefined) {
    crop = Array.isArray(h['crop'])
      ? [positiveInt(h['crop'][0], 'crop[0]'), positiveInt(h['crop'][1], 'crop[1]')]
      : [positiveInt(h['crop'], 'crop'), positiveInt(h['crop'], 'crop')];
  } else {
    crop = [modelH ?? modelW ?? 224, modelW ?? modelH ?? 224];
  }
  if ((modelH !== undefined && modelH !== crop[0]) || (modelW !== undefined && modelW !== crop[1])) {
    throw createHandlerError.MARINA_ERR_HANDLER_CONFIG_INVALID(`model-config.yaml handler.crop is ${crop.join('x')} but the model's input takes ${modelH}x${modelW} images; remove handler.crop or make it match`);
  }
  const resize = h['resize'] !== undefined ? positiveInt(h['resize'], 'resize') : Math.round((Math.max(...crop) * 256) / 224);
  if (resize < Math.min(...crop)) {
    throw createHandlerError.MARINA_ERR_HANDLER_CONFIG_INVALID(`model-config.yaml handler.resize (${resize}) is smaller than the crop (${crop.join('x')}); the shorter side must be at least the crop`);
  }
  return {
    resize,
    crop,
    mean: h['mean'] !== undefined ? triple(h['mean'], 'mean', false) : [...IMAGENET_MEAN],
    std: h['std'] !== undefined ? triple(h['std'], 'std', true) : [...IMAGENET_STD],
    topk: h['topk'] !== undefined ? positiveInt(h['topk'], 'topk') : 5,
  };
}

/**
 * Decodes an image and writes it into `out` (float32, CHW, normalised) at `offset`.
 * Steps as torchvision's Resize(resize) → CenterCrop(crop) → ToTensor → Normalize(mean, std):
 * the shorter side becomes `resize` (the longer one int(resize × long/short), as torchvision),
 * bilinear ('linear' kernel, sharp's closest to PIL's antialiased bilinear), then the centre crop.
 * @throws MARINA_ERR_IMAGE_DECODE_FAILED or MARINA_ERR_IMAGE_TOO_LARGE.
 */
export async function decodeImageInto(bytes: Buffer, options: ImageClassifierOptions & { limitInputPixels: boolean }, out: Float32Array, offset: number): Promise<void> {
  const limitInputPixels = options.limitInputPixels ? DEFAULT_PIXEL_LIMIT : false;
  const [cropH, cropW] = options.crop;
  let raw: Buffer;
  let channels: number;
  try {
    const meta = await sharp(bytes, { limitInputPixels }).metadata();
    if (!meta.width || !meta.height) throw new Error('image has no dimensions');
    // EXIF orientation is applied as PIL does not: what the user sees is what gets classified.
    const swap = (meta.orientation ?? 1) >= 5;
    const w = swap ? meta.height : meta.width;
    const ht = swap ? meta.width : meta.height;
    const short = Math.min(w, ht);
    const newW = w === short ? options.resize : Math.floor((options.resize * w) / short);
    const newH = ht === short ? options.resize : Math.floor((options.resize * ht) / short);
    const left = Math.round((newW - cropW) / 2);
    const top = Math.round((newH - cropH) / 2);
    const result = await sharp(bytes, { limitInputPixels, failOn: 'error' })
      .rotate()
      .removeAlpha()
      .toColourspace('srgb')
      .resize(newW, newH, { fit: 'fill', kernel: 'linear' })
      .extract({ left, top, width: cropW, height: cropH })
      .raw()
      .toBuffer({ resolveWithObject: true });
    raw = result.data;
    channels = result.info.channels;
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error);
    if (/pixel limit/i.test(message)) {
      throw createHandlerError.MARINA_ERR_IMAGE_TOO_LARGE(`the image is larger than the pixel limit (${DEFAULT_PIXEL_LIMIT} pixels); send a smaller image or set limit_max_image_pixels=false`, { cause: error });
    }
    throw createHandlerError.MARINA_ERR_IMAGE_DECODE_FAILED(`the request body (${bytes.length} bytes) is not a decodable image: ${message}`, { cause: error });
  }
  const plane = cropH * cropW;
  const { mean, std } = options;
  for (let c = 0; c < 3; c++) {
    const src = channels === 1 ? 0 : c;
    const scale = 1 / (255 * std[c]!);
    const shift = mean[c]! / std[c]!;
    const base = offset + c * plane;
    for (let p = 0; p < plane; p++) out[base + p] = raw[p * channels + src]! * scale - shift;
  }
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

/** Softmax over one row, then the k best as an ordered Map label → probability (a Map keeps the order for numeric labels). */
export function topK(logits: Float32Array | number[], k: number, labels: Map<number, string> | undefined): Map<string, number> {
  let max = -Infinity;
  for (const v of logits) if (v > max) max = v;
  const probs = new Float64Array(logits.length);
  let sum = 0;
  for (let i = 0; i < logits.length; i++) {
    probs[i] = Math.exp(logits[i]! - max);
    sum += probs[i]!;
  }
  const order = Array.from(probs.keys()).sort((a, b) => probs[b]! - probs[a]!).slice(0, Math.min(k, probs.length));
  const result = new Map<string, number>();
  for (const i of order) result.set(labels?.get(i) ?? String(i), probs[i]! / sum);
  return result;
}

/**
 * TorchServe's image_classifier: each request's `data`/`body` is an image; the answer is its
 * top-k `{label: probability}` (a Map, serialised as a JSON object in rank order). A request
 * whose image cannot be decoded gets its own 400 while the rest of the batch is served.
 */
export function createImageClassifier(): Handler {
  let session: ort.InferenceSession;
  let inputName: string;
  let outputName: string;
  let options: ImageClassifierOptions;
  let labels: Map<number, string> | undefined;
  let isFixedBatchOfOne = false;
  let limitInputPixels = true;

  return {
    async initialize(context: HandlerContext) {
      session = await context.createSession();
      const input = session.inputMetadata[0];
      const output = session.outputMetadata[0];
      if (!input || !output) throw createHandlerError.MARINA_ERR_MODEL_OUTPUT_UNEXPECTED('image_classifier needs a model with one input and one output');
      inputName = input.name;
      outputName = output.name;
      const shape = input.isTensor ? input.shape : [];
      options = resolveImageClassifierOptions(context.modelYamlConfig, shape);
      isFixedBatchOfOne = shape.length === 4 && shape[0] === 1;
      labels = await readIndexToName(context.modelDir);
      limitInputPixels = context.systemProperties.limit_max_image_pixels;
    },

    async handle(rows: RequestRow[], _context: HandlerContext) {
      const [h, w] = options.crop;
      const perImage = 3 * h * w;
      const results: Array<Map<string, number> | MarinaError> = new Array(rows.length);
      const decoded = new Float32Array(perImage * rows.length);
      // Decode concurrently: sharp works on libuv's pool, several images in flight is faster than one.
      const outcomes = await Promise.allSettled(rows.map(async (row, i) => {
        const bytes = payloadBytes(rowPayload(row));
        if (!bytes) throw createHandlerError.MARINA_ERR_IMAGE_DECODE_FAILED('image_classifier needs image bytes, but the body was parsed as JSON; send the image with Content-Type application/octet-stream or image/*');
        await decodeImageInto(bytes, { ...options, limitInputPixels }, decoded, i * perImage);
      }));
      const good: number[] = [];
      outcomes.forEach((o, i) => {
        if (o.status === 'fulfilled') good.push(i);
        else results[i] = isMarinaError(o.reason) ? o.reason : createHandlerError.MARINA_ERR_IMAGE_DECODE_FAILED(String(o.reason));
      });
      if (good.length === 0) return results;

      const runOn = async (indices: number[]) => {
        const data = new Float32Array(perImage * indices.length);
        indices.forEach((src, dst) => data.set(decoded.subarray(src * perImage, (src + 1) * perImage), dst * perImage));
        const feeds = { [inputName]: new ort.Tensor('float32', data, [indices.length, 3, h, w]) };
        const out = (await session.run(feeds))[outputName];
        if (!out || out.dims.length !== 2 || out.dims[0] !== indices.length) {
          throw createHandlerError.MARINA_ERR_MODEL_OUTPUT_UNEXPECTED(`image_classifier expected output '${outputName}' of shape [${indices.length}, classes], got [${out?.dims.join(', ') ?? ''}]`);
        }
        const classes = out.dims[1]!;
        const values = out.data as Float32Array;
        indices.forEach((row, n) => {
          results[row] = topK(values.subarray(n * classes, (n + 1) * classes), options.topk, labels);
        });
      };
      if (isFixedBatchOfOne) for (const i of good) await runOn([i]);
      else await runOn(good);
      return results;
    },
  };
}
