import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import sharp from 'sharp';
import { describe, expect, it } from 'vitest';
import { writeCorruptJpeg, writeSampleJpeg } from '../src/index.ts';
import { useTempDir } from './helpers.ts';

describe('sample images', () => {
  it('writes a deterministic, varied 640x480 JPEG by default', async () => {
    const dir = await useTempDir('images');
    await writeSampleJpeg({ outputPath: join(dir, 'a.jpg') });
    await writeSampleJpeg({ outputPath: join(dir, 'b.jpg') });
    const metadata = await sharp(join(dir, 'a.jpg')).metadata();
    expect(metadata).toMatchObject({ format: 'jpeg', width: 640, height: 480, channels: 3 });
    expect((await readFile(join(dir, 'a.jpg'))).equals(await readFile(join(dir, 'b.jpg')))).toBe(true);
    const { channels } = await sharp(join(dir, 'a.jpg')).stats();
    for (const channel of channels) expect(channel.stdev).toBeGreaterThan(20);
  });

  it('honours width, height and seed', async () => {
    const dir = await useTempDir('images-size');
    await writeSampleJpeg({ outputPath: join(dir, 'small.jpg'), width: 100, height: 60, seed: 3 });
    await writeSampleJpeg({ outputPath: join(dir, 'other.jpg'), width: 100, height: 60, seed: 4 });
    expect(await sharp(join(dir, 'small.jpg')).metadata()).toMatchObject({ width: 100, height: 60 });
    expect((await readFile(join(dir, 'small.jpg'))).equals(await readFile(join(dir, 'other.jpg')))).toBe(false);
  });

  it('writes a corrupt JPEG that has a JPEG signature but fails to decode', async () => {
    const dir = await useTempDir('images-corrupt');
    const path = join(dir, 'corrupt.jpg');
    await writeCorruptJpeg(path);
    const bytes = await readFile(path);
    expect([...bytes.subarray(0, 3)]).toEqual([0xff, 0xd8, 0xff]);
    await expect(sharp(path).raw().toBuffer()).rejects.toThrow();
  });
});
