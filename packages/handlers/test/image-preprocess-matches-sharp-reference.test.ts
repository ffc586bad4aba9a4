import sharp, { type Sharp } from 'sharp';
import { describe, expect, it } from 'vitest';
import { preprocessImage, resolveImagePreprocessOptions, type ImagePreprocessOptions } from '../src/index.ts';
import { patternPng } from './handler-harness.ts';

/** Python's round(): halves go to the even neighbour (torchvision's CenterCrop uses it). */
function pythonRound(value: number): number {
  const floor = Math.floor(value);
  return value - floor === 0.5 ? (floor % 2 === 0 ? floor : floor + 1) : Math.round(value);
}

/**
 * The same preprocessing written out from its sources' formulas, with sharp doing the
 * resampling and padding: shorter side to `resize` + torchvision's CenterCrop for crop, ultralytics'
 * letterbox for letterbox (new size round(side·r), padding split round(d/2 ∓ 0.1)), fit: fill
 * for stretch; then (pixel/255 − mean)/std per plane in the configured channel order.
 */
async function reference(png: Buffer, o: ImagePreprocessOptions): Promise<Float32Array> {
  const { width: w, height: h } = await sharp(png).metadata();
  let image: Sharp;
  if (o.resizeMode === 'crop') {
    // The shorter side to `resize` (sharp's fit: outside), then torchvision's CenterCrop offsets.
    const resized = await sharp(png)
      .resize({ width: o.resize, height: o.resize, fit: 'outside', kernel: 'linear' })
      .raw()
      .toBuffer({ resolveWithObject: true });
    const { width: rw, height: rh } = resized.info;
    expect(Math.min(rw, rh)).toBe(o.resize);
    image = sharp(resized.data, { raw: { width: rw, height: rh, channels: 3 } }).extract({
      left: pythonRound((rw - o.width) / 2),
      top: pythonRound((rh - o.height) / 2),
      width: o.width,
      height: o.height,
    });
  } else if (o.resizeMode === 'letterbox') {
    const r = Math.min(o.width / w, o.height / h);
    const [nw, nh] = [Math.round(w * r), Math.round(h * r)];
    const [dw, dh] = o.padPosition === 'center' ? [(o.width - nw) / 2, (o.height - nh) / 2] : [0, 0];
    const [left, top] = [Math.round(dw - 0.1), Math.round(dh - 0.1)];
    const [r0, g0, b0] = o.padValue;
    const resized = await sharp(png).resize({ width: nw, height: nh, fit: 'fill', kernel: 'linear' }).raw().toBuffer();
    image = sharp(resized, { raw: { width: nw, height: nh, channels: 3 } }).extend({
      left,
      top,
      right: o.width - nw - left,
      bottom: o.height - nh - top,
      background: { r: r0, g: g0, b: b0 },
    });
  } else {
    image = sharp(png).resize({ width: o.width, height: o.height, fit: 'fill', kernel: 'linear' });
  }
  const { data } = await image.removeAlpha().raw().toBuffer({ resolveWithObject: true });
  const plane = o.width * o.height;
  const out = new Float32Array(3 * plane);
  for (let c = 0; c < 3; c++) {
    const src = o.channelOrder === 'BGR' ? 2 - c : c;
    for (let i = 0; i < plane; i++) out[c * plane + i] = (data[i * 3 + src]! / 255 - o.mean[src]!) / o.std[src]!;
  }
  return out;
}

/** Largest difference per plane, in 0..1 pixel units (the tensor difference times the plane's std). */
function maxPixelError(actual: Float32Array, expected: Float32Array, o: ImagePreprocessOptions): number {
  const plane = o.width * o.height;
  let worst = 0;
  for (let i = 0; i < actual.length; i++) {
    const c = Math.floor(i / plane);
    const std = o.std[o.channelOrder === 'BGR' ? 2 - c : c]!;
    worst = Math.max(worst, Math.abs(actual[i]! - expected[i]!) * std);
  }
  return worst;
}

const cases: Array<{
  name: string;
  image: [number, number];
  shape: Array<number | string>;
  handler: Record<string, unknown>;
}> = [
  { name: 'crop (TorchServe default), landscape', image: [97, 61], shape: [1, 3, 32, 32], handler: {} },
  {
    name: 'crop, portrait, custom resize, mean and std',
    image: [45, 90],
    shape: ['n', 3, 24, 24],
    handler: { resize: 30, mean: [0.5, 0.4, 0.3], std: [0.2, 0.3, 0.4] },
  },
  {
    name: 'letterbox centred, wide image, pad 114',
    image: [120, 40],
    shape: [1, 3, 48, 48],
    handler: { resize_mode: 'letterbox', pad_value: 114 },
  },
  {
    name: 'letterbox top-left (text line), dynamic width from size',
    image: [50, 20],
    shape: ['n', 3, 32, 'w'],
    handler: {
      resize_mode: 'letterbox',
      pad_position: 'top-left',
      size: [32, 128],
      pad_value: [0, 0, 0],
      mean: [0.5, 0.5, 0.5],
      std: [0.5, 0.5, 0.5],
    },
  },
  {
    name: 'letterbox centred, tall image, enlarged',
    image: [10, 30],
    shape: [1, 3, 40, 40],
    handler: { resize_mode: 'letterbox', pad_value: [10, 200, 30] },
  },
  {
    name: 'stretch, BGR',
    image: [70, 33],
    shape: [1, 3, 20, 36],
    handler: { resize_mode: 'stretch', channel_order: 'BGR' },
  },
];

describe('image preprocessing matches an independent sharp computation within 1/255', () => {
  for (const c of cases) {
    it(c.name, async () => {
      const png = await patternPng(...c.image);
      const options = resolveImagePreprocessOptions({ handler: c.handler }, c.shape);
      const actual = new Float32Array(3 * options.height * options.width + 5).fill(Number.NaN);
      const geometry = await preprocessImage(png, { ...options, limitInputPixels: true }, actual, 5);
      const expected = await reference(png, options);
      expect(actual.subarray(0, 5).every(Number.isNaN)).toBe(true); // nothing written before the offset
      expect(maxPixelError(actual.subarray(5), expected, options)).toBeLessThanOrEqual(1 / 255);
      expect(geometry).toMatchObject({ originalWidth: c.image[0], originalHeight: c.image[1] });
    });
  }

  it('grayscale models get one plane of BT.601 luma, normalised with the first mean/std', async () => {
    const png = await patternPng(40, 40);
    const options = resolveImagePreprocessOptions(
      { handler: { resize_mode: 'stretch', mean: [0.5, 0, 0], std: [0.25, 1, 1] } },
      [1, 1, 40, 40],
    );
    expect(options.channels).toBe(1);
    const actual = new Float32Array(40 * 40);
    await preprocessImage(png, { ...options, limitInputPixels: true }, actual, 0);
    const { data } = await sharp(png).raw().toBuffer({ resolveWithObject: true });
    let worst = 0;
    for (let i = 0; i < 40 * 40; i++) {
      const luma = (0.299 * data[i * 3]! + 0.587 * data[i * 3 + 1]! + 0.114 * data[i * 3 + 2]!) / 255;
      worst = Math.max(worst, Math.abs(actual[i]! * 0.25 + 0.5 - luma));
    }
    expect(worst).toBeLessThanOrEqual(1 / 255);
  });
});

describe('image preprocessing errors say what the image was and what the model wants', () => {
  it('a text line too narrow for the centre crop is refused with advice to letterbox, not to raise resize', async () => {
    const png = await patternPng(64, 32);
    const options = resolveImagePreprocessOptions({ handler: { resize: 32 } }, [1, 3, 32, 128]);
    const error = await preprocessImage(
      png,
      { ...options, limitInputPixels: true },
      new Float32Array(3 * 32 * 128),
      0,
    ).catch((e: unknown) => e);
    expect(error).toMatchObject({ code: 'MARINA_ERR_IMAGE_TOO_SMALL', statusCode: 400 });
    expect((error as Error).message).toMatch(
      /the image is 64x32 .* smaller than the model's 128x32 input.*resize_mode: letterbox/,
    );
    expect((error as Error).message).not.toMatch(/raise handler.resize/);
  });

  it('letterbox and stretch need a size when the model input is dynamic; a size that contradicts the model is refused', () => {
    expect(() => resolveImagePreprocessOptions({ handler: { resize_mode: 'letterbox' } }, ['n', 3, 'h', 'w'])).toThrow(
      /dynamic height or width; set handler.size/,
    );
    expect(() => resolveImagePreprocessOptions({ handler: { size: [32, 100] } }, ['n', 3, 32, 128])).toThrow(
      /handler.size is 32x100 but the model's input takes 32x128/,
    );
    expect(() => resolveImagePreprocessOptions({ handler: { resize_mode: 'zoom' } }, ['n', 3, 32, 32])).toThrow(
      /resize_mode must be one of crop, letterbox, stretch/,
    );
    expect(() => resolveImagePreprocessOptions({ handler: { color: 'grayscale' } }, ['n', 3, 32, 32])).toThrow(
      /model's input has 3 channel/,
    );
  });
});
