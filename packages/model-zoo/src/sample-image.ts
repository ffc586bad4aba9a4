import { writeFile } from 'node:fs/promises';
import sharp from 'sharp';
import { createError } from './errors.ts';
import { createPrng } from './prng.ts';
import { integerOption, pathOption, seedOption } from './validate-options.ts';

async function writeOrFail(outputPath: string, write: () => Promise<unknown>): Promise<void> {
  try {
    await write();
  } catch (error) {
    throw createError.MARINA_ERR_MODEL_ZOO_WRITE_FAILED(
      `could not write '${outputPath}': ${(error as Error).message}; check the directory exists and is writable`,
      { cause: error },
    );
  }
}

/**
 * Writes a synthetic but photo-like JPEG (quality 90): a sky-to-ground gradient, soft
 * coloured discs and rectangles, and sensor-like noise, so decoders and resizers do real
 * work and classifiers see varied pixels. Deterministic for a seed. Defaults: 640×480, seed 7.
 *
 * @throws MARINA_ERR_MODEL_ZOO_INVALID_OPTION for a bad size; MARINA_ERR_MODEL_ZOO_WRITE_FAILED when writing fails.
 */
export async function writeSampleJpeg(options: {
  outputPath: string;
  width?: number;
  height?: number;
  seed?: number;
}): Promise<void> {
  const outputPath = pathOption('outputPath', options.outputPath);
  const width = integerOption('width', options.width, 640, 1, 16_384);
  const height = integerOption('height', options.height, 480, 1, 16_384);
  const prng = createPrng(seedOption(options.seed, 7));
  const pixels = new Float32Array(width * height * 3);
  for (let y = 0; y < height; y += 1) {
    const t = y / Math.max(1, height - 1);
    for (let x = 0; x < width; x += 1) {
      const u = x / Math.max(1, width - 1);
      const i = (y * width + x) * 3;
      pixels[i] = 70 + 120 * t + 30 * u;
      pixels[i + 1] = 130 + 40 * (1 - t) - 20 * u;
      pixels[i + 2] = 220 - 150 * t;
    }
  }
  const shapeCount = 12;
  for (let s = 0; s < shapeCount; s += 1) {
    const color = [prng.next() * 255, prng.next() * 255, prng.next() * 255];
    const cx = prng.next() * width;
    const cy = prng.next() * height;
    const radius = (0.05 + prng.next() * 0.2) * Math.min(width, height);
    const isDisc = prng.next() < 0.6;
    const x0 = Math.max(0, Math.floor(cx - radius));
    const x1 = Math.min(width, Math.ceil(cx + radius));
    const y0 = Math.max(0, Math.floor(cy - radius));
    const y1 = Math.min(height, Math.ceil(cy + radius));
    for (let y = y0; y < y1; y += 1) {
      for (let x = x0; x < x1; x += 1) {
        const d = Math.hypot(x - cx, y - cy) / radius;
        // Soft edges and shading look more like photographed objects than hard flat shapes do.
        const coverage = isDisc ? Math.min(1, Math.max(0, (1 - d) * 4)) : 0.85;
        const shade = 1.15 - 0.35 * ((y - y0) / Math.max(1, y1 - y0));
        const i = (y * width + x) * 3;
        for (let c = 0; c < 3; c += 1) pixels[i + c] = pixels[i + c]! * (1 - coverage) + color[c]! * shade * coverage;
      }
    }
  }
  const bytes = Buffer.allocUnsafe(pixels.length);
  for (let i = 0; i < pixels.length; i += 1) {
    const noisy = pixels[i]! + (prng.next() + prng.next() + prng.next() - 1.5) * 16;
    bytes[i] = Math.max(0, Math.min(255, Math.round(noisy)));
  }
  await writeOrFail(outputPath, () =>
    sharp(bytes, { raw: { width, height, channels: 3 } })
      .jpeg({ quality: 90 })
      .toFile(outputPath),
  );
}

/**
 * Writes a file that starts like a JPEG (SOI and a JFIF APP0 segment) and continues with
 * seeded garbage, for bad-input tests: decoders accept the signature and then fail.
 *
 * @throws MARINA_ERR_MODEL_ZOO_WRITE_FAILED when writing fails.
 */
export async function writeCorruptJpeg(outputPath: string): Promise<void> {
  pathOption('outputPath', outputPath);
  const header = Buffer.from([
    0xff, 0xd8, 0xff, 0xe0, 0x00, 0x10, 0x4a, 0x46, 0x49, 0x46, 0x00, 0x01, 0x01, 0x00, 0x00, 0x01, 0x00, 0x01, 0x00,
    0x00,
  ]);
  const garbage = Buffer.alloc(2048);
  const prng = createPrng(0xbad);
  for (let i = 0; i < garbage.length; i += 1) garbage[i] = Math.floor(prng.next() * 256);
  await writeOrFail(outputPath, () => writeFile(outputPath, Buffer.concat([header, garbage])));
}
