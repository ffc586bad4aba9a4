import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import sharp from 'sharp';
import * as ort from 'onnxruntime-node';
import { isMarinaError, type MarinaError } from '@marina/errors';
import { createHandlerError } from './errors.ts';
import { isDynamicDim } from './signature-checks.ts';
import { payloadBytes, rowPayload } from './row-input.ts';
import { binaryHeaderLength, parseTensorRequest, selectedOutputNames, tensorAnswer, type ParsedTensorRequest } from './tensor-request.ts';
import type { Handler, HandlerContext, RequestRow } from './types.ts';
import { rawToOrt } from './v2-tensors.ts';

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
 * the shorter side becomes `resize` (bilinear, 'linear' kernel, sharp's closest to PIL's
 * antialiased bilinear), then the centre crop, taken while converting to float.
 * One sharp call (no separate metadata read): the whole decode runs on libuv's pool without
 * needing this thread in between, so it proceeds even while a `run()` blocks the thread.
 * @throws MARINA_ERR_IMAGE_DECODE_FAILED or MARINA_ERR_IMAGE_TOO_LARGE.
 */
export async function decodeImageInto(bytes: Buffer, options: ImageClassifierOptions & { limitInputPixels: boolean }, out: Float32Array, offset: number): Promise<void> {
  const limitInputPixels = options.limitInputPixels ? DEFAULT_PIXEL_LIMIT : false;
  const [cropH, cropW] = options.crop;
  let raw: Buffer;
  let channels: number;
  let width: number;
  let height: number;
  try {
    // EXIF orientation is applied (rotate()) as PIL does not: what the user sees is what gets classified.
    // fit 'outside' on a resize × resize box makes the shorter side exactly `resize`.
    const result = await sharp(bytes, { limitInputPixels, failOn: 'error' })
      .rotate()
      .removeAlpha()
      .toColourspace('srgb')
      .resize({ width: options.resize, height: options.resize, fit: 'outside', kernel: 'linear' })
      .raw()
      .toBuffer({ resolveWithObject: true });
    raw = result.data;
    channels = result.info.channels;
    width = result.info.width;
    height = result.info.height;
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error);
    if (/pixel limit/i.test(message)) {
      throw createHandlerError.MARINA_ERR_IMAGE_TOO_LARGE(`the image is larger than the pixel limit (${DEFAULT_PIXEL_LIMIT} pixels); send a smaller image or set limit_max_image_pixels=false`, { cause: error });
    }
    throw createHandlerError.MARINA_ERR_IMAGE_DECODE_FAILED(`the request body (${bytes.length} bytes) is not a decodable image: ${message}`, { cause: error });
  }
  if (width < cropW || height < cropH) {
    throw createHandlerError.MARINA_ERR_IMAGE_DECODE_FAILED(`the image resized to ${width}x${height} (shorter side ${options.resize}) is smaller than the crop ${cropH}x${cropW}; raise handler.resize in model-config.yaml`);
  }
  const left = Math.round((width - cropW) / 2);
  const top = Math.round((height - cropH) / 2);
  const plane = cropH * cropW;
  const { mean, std } = options;
  for (let c = 0; c < 3; c++) {
    const src = channels === 1 ? 0 : c;
    const scale = 1 / (255 * std[c]!);
    const shift = mean[c]! / std[c]!;
    let dst = offset + c * plane;
    for (let y = 0; y < cropH; y++) {
      let p = ((top + y) * width + left) * channels + src;
      for (let x = 0; x < cropW; x++, p += channels) out[dst++] = raw[p]! * scale - shift;
    }
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

/** image_classifier's preprocess output: the decoded images of a batch and the rows that failed. */
interface DecodedBatch {
  /** float32 NCHW: one image per image row, `shape[0]` images per raw-tensor row (failed rows' slots unused). */
  pixels: Float32Array;
  /** Rows that decoded. */
  good: number[];
  /** Per row: the decode error, or undefined. */
  errors: Array<MarinaError | undefined>;
  /** Per row: its first image slot in `pixels`, and how many slots it has. */
  slotStart: number[];
  slotCount: number[];
  /** Per row: the raw-tensor request (v2 binary layout), or undefined for an image. */
  tensorRequests: Array<ParsedTensorRequest | undefined>;
}

/** image_classifier's inference output. */
interface Inferred {
  decoded: DecodedBatch;
  /** Logits per slot of the good rows (`classes` values each), in `good` order. */
  logits: Float32Array;
  classes: number;
}

/**
 * TorchServe's image_classifier: each request's `data`/`body` is an image; the answer is its
 * top-k `{label: probability}` (a Map, serialised as a JSON object in rank order). A request
 * whose image cannot be decoded gets its own 400 while the rest of the batch is served.
 * Split into preprocess (decode, on libuv's pool) → inference (run) → postprocess (top-k), and
 * pipeline-safe: the server may decode the next batch while this one runs.
 */
export function createImageClassifier(): Handler {
  let session: ort.InferenceSession;
  let inputName: string;
  let outputName: string;
  let options: ImageClassifierOptions;
  let labels: Map<number, string> | undefined;
  let isFixedBatchOfOne = false;
  let limitInputPixels = true;

  const runOn = async (pixels: Float32Array, count: number): Promise<{ values: Float32Array; classes: number }> => {
    const [h, w] = options.crop;
    const feeds = { [inputName]: new ort.Tensor('float32', pixels, [count, 3, h, w]) };
    const out = (await session.run(feeds))[outputName];
    if (!out || out.dims.length !== 2 || out.dims[0] !== count) {
      throw createHandlerError.MARINA_ERR_MODEL_OUTPUT_UNEXPECTED(`image_classifier expected output '${outputName}' of shape [${count}, classes], got [${out?.dims.join(', ') ?? ''}]`);
    }
    return { values: out.data as Float32Array, classes: out.dims[1]! };
  };

  return {
    isPipelineSafe: true,

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

    async preprocess(rows: RequestRow[], context: HandlerContext): Promise<DecodedBatch> {
      const [h, w] = options.crop;
      const perImage = 3 * h * w;
      // Rows in the v2 binary layout carry the model's input tensor itself (the Open Inference
      // Protocol's infer): they skip decoding and share the batch with the images.
      const errors: Array<MarinaError | undefined> = new Array(rows.length).fill(undefined);
      const tensorRequests = rows.map((row, i) => {
        try {
          const headerLength = binaryHeaderLength(context, i);
          if (headerLength === undefined) return undefined;
          const parsed = parseTensorRequest(rowPayload(row), [{ name: inputName, type: 'float32', shape: ['batch', 3, h, w] }], { headerLength });
          selectedOutputNames(parsed, [outputName]);
          return parsed;
        } catch (error) {
          errors[i] = isMarinaError(error) ? error : createHandlerError.MARINA_ERR_TENSOR_INPUT_INVALID(String(error));
          return undefined;
        }
      });
      const slotCount = rows.map((_, i) => (tensorRequests[i] ? tensorRequests[i].tensors.get(inputName)!.shape[0]! : 1));
      const slotStart: number[] = [];
      let slots = 0;
      for (const n of slotCount) {
        slotStart.push(slots);
        slots += n;
      }
      const pixels = new Float32Array(perImage * slots);
      // Decode concurrently: sharp works on libuv's pool, several images in flight is faster than one.
      const outcomes = await Promise.allSettled(rows.map(async (row, i) => {
        if (errors[i]) throw errors[i];
        const tensor = tensorRequests[i]?.tensors.get(inputName);
        if (tensor) {
          pixels.set(rawToOrt([tensor]).data as Float32Array, slotStart[i]! * perImage);
          return;
        }
        const bytes = payloadBytes(rowPayload(row));
        if (!bytes) throw createHandlerError.MARINA_ERR_IMAGE_DECODE_FAILED('image_classifier needs image bytes, but the body was parsed as JSON; send the image with Content-Type application/octet-stream or image/*');
        await decodeImageInto(bytes, { ...options, limitInputPixels }, pixels, slotStart[i]! * perImage);
      }));
      const good: number[] = [];
      outcomes.forEach((o, i) => {
        if (o.status === 'fulfilled') good.push(i);
        else errors[i] = isMarinaError(o.reason) ? o.reason : createHandlerError.MARINA_ERR_IMAGE_DECODE_FAILED(String(o.reason));
      });
      return { pixels, good, errors, slotStart, slotCount, tensorRequests };
    },

    async inference(input: unknown): Promise<Inferred> {
      const decoded = input as DecodedBatch;
      const [h, w] = options.crop;
      const perImage = 3 * h * w;
      const { good, pixels, slotStart, slotCount } = decoded;
      if (good.length === 0) return { decoded, logits: new Float32Array(0), classes: 0 };
      const images = good.reduce((n, row) => n + slotCount[row]!, 0);
      // Compact the good images to the front only when some rows failed (no copy otherwise).
      const packed = images === pixels.length / perImage ? pixels : new Float32Array(perImage * images);
      if (packed !== pixels) {
        let dst = 0;
        for (const row of good) {
          packed.set(pixels.subarray(slotStart[row]! * perImage, (slotStart[row]! + slotCount[row]!) * perImage), dst * perImage);
          dst += slotCount[row]!;
        }
      }
      if (!isFixedBatchOfOne) {
        const { values, classes } = await runOn(packed, images);
        return { decoded, logits: values, classes };
      }
      let logits = new Float32Array(0);
      let classes = 0;
      for (let n = 0; n < images; n++) {
        const out = await runOn(packed.subarray(n * perImage, (n + 1) * perImage), 1);
        if (logits.length === 0) {
          classes = out.classes;
          logits = new Float32Array(classes * images);
        }
        logits.set(out.values, n * classes);
      }
      return { decoded, logits, classes };
    },

    postprocess(output: unknown, context: HandlerContext): unknown[] {
      const { decoded, logits, classes } = output as Inferred;
      const results: unknown[] = decoded.errors.map((e) => e as MarinaError);
      const images = logits.length / Math.max(classes, 1);
      const tensor = { [outputName]: new ort.Tensor('float32', logits, [images, classes]) };
      let at = 0;
      for (const row of decoded.good) {
        const request = decoded.tensorRequests[row];
        const n = decoded.slotCount[row]!;
        results[row] = request
          ? tensorAnswer({ request, names: [outputName], outputs: tensor, rows: { start: at, end: at + n }, context, index: row })
          : topK(logits.subarray(at * classes, (at + 1) * classes), options.topk, labels);
        at += n;
      }
      return results;
    },
  };
}
