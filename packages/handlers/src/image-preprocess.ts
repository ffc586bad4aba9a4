import sharp from 'sharp';
import { createHandlerError } from './errors.ts';
import { isDynamicDim } from './signature-checks.ts';

/** ImageNet statistics, as torchvision's and TorchServe's image handlers use. */
export const IMAGENET_MEAN = [0.485, 0.456, 0.406] as const;
export const IMAGENET_STD = [0.229, 0.224, 0.225] as const;

/** sharp's own default pixel limit (TorchServe follows PIL's, of the same order). */
const DEFAULT_PIXEL_LIMIT = 268_402_689;

/**
 * How an image becomes the model's input size:
 * - `crop`: TorchServe's default: the shorter side becomes `resize`, then the centre `height×width` is cut out;
 * - `letterbox`: scaled to fit inside `height×width` keeping its aspect ratio, the rest padded with `padValue`;
 * - `stretch`: scaled to exactly `height×width`, aspect ratio not kept.
 */
export type ResizeMode = 'crop' | 'letterbox' | 'stretch';
export const RESIZE_MODES: readonly ResizeMode[] = ['crop', 'letterbox', 'stretch'];

/** The image knobs shared by the built-in image handlers (model-config.yaml `handler:`). */
export interface ImagePreprocessOptions {
  resizeMode: ResizeMode;
  /** The model input's height and width, px. */
  height: number;
  width: number;
  /** crop mode: the shorter side after resizing, px (default: size × 256/224, torchvision's ratio). */
  resize: number;
  /** letterbox: the padding's pixel value per channel (0..255, before normalisation). */
  padValue: [number, number, number];
  /** letterbox: where the scaled image sits: centred, or in the top-left corner (text-line models pad on the right). */
  padPosition: 'center' | 'top-left';
  /** Order of the colour planes in the input tensor. */
  channelOrder: 'RGB' | 'BGR';
  /** 1 (grayscale) or 3 (colour) planes. */
  channels: 1 | 3;
  /** Per-channel mean and std on 0..1 pixel values, in RGB order (the first entry only for grayscale). */
  mean: [number, number, number];
  std: [number, number, number];
}

/** Where the model's input pixels came from in the original image, to map outputs back. */
export interface ImageGeometry {
  /** The image as decoded (EXIF orientation applied), px; 0 when the caller did not need it. */
  originalWidth: number;
  originalHeight: number;
  /** Scale from original to resized pixels, per axis. */
  scaleX: number;
  scaleY: number;
  /** Where the resized image's (0,0) sits in the input tensor (negative: cropped away; positive: padding). */
  offsetX: number;
  offsetY: number;
  /** The resized image's size, px. */
  resizedWidth: number;
  resizedHeight: number;
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function invalid(message: string): Error {
  return createHandlerError.MARINA_ERR_HANDLER_CONFIG_INVALID(message);
}

export function positiveInt(value: unknown, key: string): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value <= 0)
    throw invalid(`model-config.yaml handler.${key} must be a positive integer, got ${JSON.stringify(value)}`);
  return value;
}

function triple(value: unknown, key: string, check: (v: number) => boolean, what: string): [number, number, number] {
  if (typeof value === 'number' && check(value)) return [value, value, value];
  if (
    !Array.isArray(value) ||
    value.length !== 3 ||
    !value.every((v) => typeof v === 'number' && Number.isFinite(v) && check(v))
  ) {
    throw invalid(
      `model-config.yaml handler.${key} must be a list of 3 ${what} (one per RGB channel), got ${JSON.stringify(value)}`,
    );
  }
  return value as [number, number, number];
}

function oneOf<T extends string>(value: unknown, key: string, choices: readonly T[], fallback: T): T {
  if (value === undefined) return fallback;
  const match = choices.find((c) => typeof value === 'string' && c.toLowerCase() === value.toLowerCase());
  if (match === undefined)
    throw invalid(
      `model-config.yaml handler.${key} must be one of ${choices.join(', ')}, got ${JSON.stringify(value)}`,
    );
  return match;
}

function size(value: unknown, key: string): [number, number] {
  return Array.isArray(value)
    ? [positiveInt(value[0], `${key}[0]`), positiveInt(value[1], `${key}[1]`)]
    : [positiveInt(value, key), positiveInt(value, key)];
}

/** model-config.yaml's `handler:` section, or `{}`. */
export function handlerSection(modelYamlConfig: Record<string, unknown>): Record<string, unknown> {
  const section = modelYamlConfig.handler;
  return isRecord(section) ? section : {};
}

/**
 * Reads the image knobs from model-config.yaml's `handler:` section and the model input's
 * shape ([N,C,H,W]): the size comes from the model (`size`/`crop` must agree with a fixed
 * H/W and are required for letterbox/stretch when H/W are dynamic), the channel count from
 * C (or `color`), the rest from the config or TorchServe's defaults.
 * @throws MARINA_ERR_HANDLER_CONFIG_INVALID naming the bad key.
 */
export function resolveImagePreprocessOptions(
  modelYamlConfig: Record<string, unknown>,
  inputShape: ReadonlyArray<number | string>,
  defaults: { resizeMode?: ResizeMode; mean?: readonly number[]; std?: readonly number[] } = {},
): ImagePreprocessOptions {
  const h = handlerSection(modelYamlConfig);
  const resizeMode = oneOf(h.resize_mode, 'resize_mode', RESIZE_MODES, defaults.resizeMode ?? 'crop');
  const modelH = inputShape.length === 4 && !isDynamicDim(inputShape[2]) ? Number(inputShape[2]) : undefined;
  const modelW = inputShape.length === 4 && !isDynamicDim(inputShape[3]) ? Number(inputShape[3]) : undefined;
  const sizeKey = h.size !== undefined ? 'size' : h.crop !== undefined ? 'crop' : undefined;
  let height: number;
  let width: number;
  if (sizeKey !== undefined) {
    [height, width] = size(h[sizeKey], sizeKey);
    if ((modelH !== undefined && modelH !== height) || (modelW !== undefined && modelW !== width)) {
      throw invalid(
        `model-config.yaml handler.${sizeKey} is ${height}x${width} but the model's input takes ${modelH ?? 'any'}x${modelW ?? 'any'} images (height x width); remove handler.${sizeKey} or make it match`,
      );
    }
  } else if (modelH !== undefined && modelW !== undefined) {
    [height, width] = [modelH, modelW];
  } else if (resizeMode === 'crop') {
    // TorchServe's 224 crop; a fixed side of the model wins.
    [height, width] = [modelH ?? modelW ?? 224, modelW ?? modelH ?? 224];
  } else {
    throw invalid(
      `the model's input [${inputShape.join(',')}] has a dynamic height or width; set handler.size: [height, width] in model-config.yaml to the size to ${resizeMode} images to`,
    );
  }
  const resize =
    h.resize !== undefined ? positiveInt(h.resize, 'resize') : Math.round((Math.max(height, width) * 256) / 224);
  if (resizeMode === 'crop' && resize < Math.min(height, width)) {
    throw invalid(
      `model-config.yaml handler.resize (${resize}) is smaller than the crop (${height}x${width}); the shorter side must be at least the crop`,
    );
  }
  const modelChannels = inputShape.length === 4 && !isDynamicDim(inputShape[1]) ? Number(inputShape[1]) : undefined;
  const color = oneOf(h.color, 'color', ['rgb', 'grayscale'] as const, modelChannels === 1 ? 'grayscale' : 'rgb');
  const channels = color === 'grayscale' ? 1 : 3;
  if (modelChannels !== undefined && modelChannels !== channels) {
    throw invalid(
      `model-config.yaml handler.color is ${color} but the model's input has ${modelChannels} channel(s); ${modelChannels === 1 ? 'use color: grayscale' : 'use color: rgb'} or remove the key`,
    );
  }
  return {
    resizeMode,
    height,
    width,
    resize,
    padValue:
      h.pad_value !== undefined
        ? triple(h.pad_value, 'pad_value', (v) => v >= 0 && v <= 255, 'numbers from 0 to 255')
        : [0, 0, 0],
    padPosition: oneOf(h.pad_position, 'pad_position', ['center', 'top-left'] as const, 'center'),
    channelOrder: oneOf(h.channel_order, 'channel_order', ['RGB', 'BGR'] as const, 'RGB'),
    channels,
    mean:
      h.mean !== undefined
        ? triple(h.mean, 'mean', Number.isFinite, 'numbers')
        : ((defaults.mean ? [...defaults.mean] : [...IMAGENET_MEAN]) as [number, number, number]),
    std:
      h.std !== undefined
        ? triple(h.std, 'std', (v) => v > 0, 'positive numbers')
        : ((defaults.std ? [...defaults.std] : [...IMAGENET_STD]) as [number, number, number]),
  };
}

/**
 * Decodes an image, resizes it as `options.resizeMode` says and writes it into `out`
 * (float32, CHW, normalised: (pixel/255 − mean)/std) at `offset`. EXIF orientation is
 * applied; alpha is dropped; sharp's 'linear' kernel (its closest to PIL's antialiased
 * bilinear) resizes: crop with fit 'outside' (the shorter side becomes `resize`), stretch with
 * fit 'fill', letterbox to a size computed from the original's. For crop and stretch the decode
 * and resize are one sharp call, so they run on libuv's pool even while a `run()` blocks this
 * thread; the original size (a header read first) is asked for only by letterbox and when
 * `isGeometryNeeded` (default true), to map outputs back.
 * Returns where the input's pixels came from (original sizes 0 when not read).
 * @throws MARINA_ERR_IMAGE_DECODE_FAILED (not an image), MARINA_ERR_IMAGE_TOO_SMALL (too small
 *   for the centre crop; says the image's size and the model's), MARINA_ERR_IMAGE_TOO_LARGE.
 */
export async function preprocessImage(
  bytes: Buffer,
  options: ImagePreprocessOptions & { limitInputPixels: boolean; isGeometryNeeded?: boolean },
  out: Float32Array,
  offset: number,
): Promise<ImageGeometry> {
  const limitInputPixels = options.limitInputPixels ? DEFAULT_PIXEL_LIMIT : false;
  const { height: H, width: W } = options;
  let originalWidth = 0;
  let originalHeight = 0;
  const readSize = async (): Promise<void> => {
    const meta = await sharp(bytes, { limitInputPixels, failOn: 'error' }).metadata();
    originalWidth = meta.autoOrient?.width ?? meta.width ?? 0;
    originalHeight = meta.autoOrient?.height ?? meta.height ?? 0;
  };
  let targetW: number;
  let targetH: number;
  let raw: Buffer;
  let channels: number;
  try {
    const kernel = 'linear';
    const pipeline = sharp(bytes, { limitInputPixels, failOn: 'error' }).rotate().removeAlpha().toColourspace('srgb');
    if (options.resizeMode === 'letterbox') {
      // The scaled size is computed here (YOLO's rounding) and resized to exactly: sharp's fit
      // 'inside' keeps one scale for both axes and drops the last partial column or row instead.
      await readSize();
      if (!(originalWidth > 0 && originalHeight > 0)) throw new Error('the image has no width or height');
      const scale = Math.min(W / originalWidth, H / originalHeight);
      pipeline.resize({
        width: Math.min(W, Math.max(1, Math.round(originalWidth * scale))),
        height: Math.min(H, Math.max(1, Math.round(originalHeight * scale))),
        fit: 'fill',
        kernel,
      });
    } else {
      if (options.isGeometryNeeded ?? true) await readSize();
      if (options.resizeMode === 'crop')
        pipeline.resize({ width: options.resize, height: options.resize, fit: 'outside', kernel });
      else pipeline.resize({ width: W, height: H, fit: 'fill', kernel });
    }
    const result = await pipeline.raw().toBuffer({ resolveWithObject: true });
    raw = result.data;
    channels = result.info.channels;
    targetW = result.info.width;
    targetH = result.info.height;
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error);
    if (/pixel limit/i.test(message)) {
      throw createHandlerError.MARINA_ERR_IMAGE_TOO_LARGE(
        `the image is larger than the pixel limit (${DEFAULT_PIXEL_LIMIT} pixels); send a smaller image or set limit_max_image_pixels=false`,
        { cause: error },
      );
    }
    throw createHandlerError.MARINA_ERR_IMAGE_DECODE_FAILED(
      `the request body (${bytes.length} bytes) is not a decodable image: ${message}`,
      { cause: error },
    );
  }
  let offsetX = 0;
  let offsetY = 0;
  if (options.resizeMode === 'crop') {
    if (targetW < W || targetH < H) {
      if (originalWidth === 0) await readSize().catch(() => undefined);
      throw createHandlerError.MARINA_ERR_IMAGE_TOO_SMALL(
        `the image is ${originalWidth}x${originalHeight} (width x height); resized to shorter side ${options.resize} it is ${targetW}x${targetH}, smaller than the model's ${W}x${H} input, so the centre crop cannot be cut. For images of this shape set handler.resize_mode: letterbox (keeps the aspect ratio and pads) or stretch in model-config.yaml`,
      );
    }
    // torchvision's CenterCrop: round((size − crop) / 2), Python's round (half to even).
    offsetX = -roundHalfEven((targetW - W) / 2);
    offsetY = -roundHalfEven((targetH - H) / 2);
  } else if (options.resizeMode === 'letterbox' && options.padPosition === 'center') {
    offsetX = Math.floor((W - targetW) / 2);
    offsetY = Math.floor((H - targetH) / 2);
  }
  writePlanes(raw, channels, { targetW, targetH, offsetX, offsetY }, options, out, offset);
  return {
    originalWidth,
    originalHeight,
    scaleX: targetW / originalWidth,
    scaleY: targetH / originalHeight,
    offsetX,
    offsetY,
    resizedWidth: targetW,
    resizedHeight: targetH,
  };
}

/**
 * Decodes a generated 640×480 JPEG through preprocessImage as an ImageNet classifier does (shorter
 * side to 256, centre 224), so that a new worker thread's first request does not pay for what a
 * thread's first decode of that size costs: measured in fresh worker threads, a 640×480 photo's
 * first decode took 11–16 ms and 3.4–4.7 ms after this (after a tiny image's decode, still 7.5–11
 * ms). A spare thread does it while it waits for a model. Never fails.
 */
export async function warmUpImageDecoding(): Promise<void> {
  try {
    const image = await sharp({
      create: { width: 640, height: 480, channels: 3, background: { r: 90, g: 120, b: 200 } },
    })
      .jpeg()
      .toBuffer();
    const options = {
      resizeMode: 'crop' as const,
      height: 224,
      width: 224,
      resize: 256,
      padValue: [0, 0, 0] as [number, number, number],
      padPosition: 'center' as const,
      channelOrder: 'RGB' as const,
      channels: 3 as const,
      mean: [...IMAGENET_MEAN] as [number, number, number],
      std: [...IMAGENET_STD] as [number, number, number],
      limitInputPixels: true,
      isGeometryNeeded: false,
    };
    await preprocessImage(image, options, new Float32Array(3 * 224 * 224), 0);
  } catch {
    // Only a warm-up: the first real image decodes (or reports its error) as it would have.
  }
}

function roundHalfEven(value: number): number {
  const floor = Math.floor(value);
  const diff = value - floor;
  if (diff !== 0.5) return Math.round(value);
  return floor % 2 === 0 ? floor : floor + 1;
}

/** Luma weights sharp and PIL use for RGB → grayscale (ITU-R BT.601). */
const LUMA = [0.299, 0.587, 0.114] as const;

/**
 * Writes the resized image's pixels into `out` as normalised NCHW planes (padding where the
 * image does not cover the input). The per-pixel loops live in writePlaneRows, which takes only
 * numbers and typed arrays: code optimised for one handler's options object stays valid for
 * every other (an options object of another shape made the optimised loop fall back to the
 * interpreter, 4–7 ms for a 224×224 image in place of about 0.2, measured in worker threads).
 */
function writePlanes(
  raw: Buffer,
  channels: number,
  place: { targetW: number; targetH: number; offsetX: number; offsetY: number },
  o: ImagePreprocessOptions,
  out: Float32Array,
  offset: number,
): void {
  const { height: H, width: W } = o;
  const plane = H * W;
  const isLuma = o.channels === 1 && channels >= 3;
  const y0 = Math.max(0, place.offsetY);
  const y1 = Math.min(H, place.offsetY + place.targetH);
  const x0 = Math.max(0, place.offsetX);
  const x1 = Math.min(W, place.offsetX + place.targetW);
  for (let c = 0; c < o.channels; c++) {
    // The tensor's plane c holds RGB channel `src` (BGR reverses them).
    const src = o.channels === 1 ? 0 : o.channelOrder === 'BGR' ? 2 - c : c;
    const scale = 1 / (255 * o.std[src]!);
    const shift = o.mean[src]! / o.std[src]!;
    const pad =
      o.channels === 1 ? LUMA[0] * o.padValue[0] + LUMA[1] * o.padValue[1] + LUMA[2] * o.padValue[2] : o.padValue[src]!;
    const base = offset + c * plane;
    out.fill(pad * scale - shift, base, base + plane);
    writePlaneRows(
      raw,
      channels,
      channels === 1 ? 0 : src,
      isLuma,
      scale,
      shift,
      out,
      base,
      W,
      y0,
      y1,
      x0,
      x1,
      place.offsetX,
      place.offsetY,
      place.targetW,
    );
  }
}

/** One plane's covered rows: raw channel `from` (or luma) of each pixel, scaled and shifted. */
function writePlaneRows(
  raw: Uint8Array,
  channels: number,
  from: number,
  isLuma: boolean,
  scale: number,
  shift: number,
  out: Float32Array,
  base: number,
  W: number,
  y0: number,
  y1: number,
  x0: number,
  x1: number,
  offsetX: number,
  offsetY: number,
  targetW: number,
): void {
  const l0 = LUMA[0];
  const l1 = LUMA[1];
  const l2 = LUMA[2];
  for (let y = y0; y < y1; y++) {
    let dst = base + y * W + x0;
    let p = ((y - offsetY) * targetW + (x0 - offsetX)) * channels;
    if (isLuma) {
      for (let x = x0; x < x1; x++, p += channels)
        out[dst++] = (l0 * raw[p]! + l1 * raw[p + 1]! + l2 * raw[p + 2]!) * scale - shift;
    } else {
      for (let x = x0; x < x1; x++, p += channels) out[dst++] = raw[p + from]! * scale - shift;
    }
  }
}

/** Maps a point of the model's input back to the original image's pixels. */
export function toOriginal(geometry: ImageGeometry, x: number, y: number): [number, number] {
  return [(x - geometry.offsetX) / geometry.scaleX, (y - geometry.offsetY) / geometry.scaleY];
}
