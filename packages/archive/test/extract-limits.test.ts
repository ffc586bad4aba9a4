import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { open, readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import * as tar from 'tar';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { DEFAULT_EXTRACT_LIMITS, extractArchive, extractToCache, listArchive, validateArchive } from '../src/index.ts';
import { makeTempDir, manifestText, writeFiles, writeRawZip, type RawZipEntry } from '../test-support/fixtures.ts';

const MiB = 1024 * 1024;
const BOMB_BYTES = 50 * MiB;
// One zeros buffer for every bomb: deflating 50 MiB takes a moment, the result is ~50 KiB.
const zeros = Buffer.alloc(BOMB_BYTES);

let dir: string;
let cleanup: () => Promise<void>;
beforeEach(async () => ({ dir, cleanup } = await makeTempDir()));
afterEach(() => cleanup());

const manifestEntry: RawZipEntry = { name: 'MAR-INF/MANIFEST.json', data: manifestText({ handler: 'tensor' }) };

async function cacheLeftovers(cacheDir: string): Promise<string[]> {
  return existsSync(cacheDir) ? readdir(cacheDir) : [];
}

async function writeTgz(name: string, files: Record<string, string | Buffer>): Promise<string> {
  const src = join(dir, `${name}-src`);
  await writeFiles(src, files);
  const path = join(dir, name);
  await tar.c({ gzip: true, file: path, cwd: src }, await readdir(src));
  return path;
}

describe('zip bombs are refused with their own code and leave nothing behind', () => {
  it('refuses an entry whose declared size is over maxExtractedBytes before writing anything', async () => {
    const bomb = join(dir, 'bomb.mar');
    await writeRawZip(bomb, [manifestEntry, { name: 'model.onnx', data: zeros, compression: 'deflate' }]);
    const cacheDir = join(dir, 'cache');
    const failure = extractToCache({
      archivePath: bomb,
      cacheDir,
      maxExtractedBytes: 10 * MiB,
      maxCompressionRatio: Infinity,
    });
    await expect(failure).rejects.toMatchObject({
      code: 'MARINA_ERR_ARCHIVE_TOO_LARGE',
      details: { limit: 10 * MiB, option: 'maxExtractedBytes', how: 'declared' },
    });
    await expect(failure).rejects.toThrow(/maxExtractedBytes/);
    expect(await cacheLeftovers(cacheDir)).toEqual([]);
  });

  it('refuses a small entry that inflates 1000:1 by the default compression ratio limit', async () => {
    const bomb = join(dir, 'bomb.mar');
    await writeRawZip(bomb, [manifestEntry, { name: 'model.onnx', data: zeros, compression: 'deflate' }]);
    expect((await readFile(bomb)).length).toBeLessThan(MiB);
    const cacheDir = join(dir, 'cache');
    await expect(extractToCache({ archivePath: bomb, cacheDir })).rejects.toMatchObject({
      code: 'MARINA_ERR_ARCHIVE_COMPRESSION_RATIO',
      message: expect.stringContaining("entry 'model.onnx'"),
      details: { limit: DEFAULT_EXTRACT_LIMITS.maxCompressionRatio, option: 'maxCompressionRatio' },
    });
    expect(await cacheLeftovers(cacheDir)).toEqual([]);
  });

  it('counts the bytes really inflated when a zip header lies about the uncompressed size, and stops at the limit', async () => {
    const liar = join(dir, 'liar.mar');
    await writeRawZip(liar, [
      manifestEntry,
      { name: 'model.onnx', data: zeros, compression: 'deflate', declaredUncompressedBytes: 1000 },
    ]);
    expect((await listArchive(liar)).entries.find((e) => e.name === 'model.onnx')?.sizeBytes).toBe(1000);
    const cacheDir = join(dir, 'cache');
    const error = await extractToCache({
      archivePath: liar,
      cacheDir,
      maxExtractedBytes: 10 * MiB,
      maxCompressionRatio: Infinity,
    }).catch((e: unknown) => e);
    expect(error).toMatchObject({ code: 'MARINA_ERR_ARCHIVE_TOO_LARGE', details: { limit: 10 * MiB, how: 'written' } });
    // Stopped within a chunk of the limit, not after inflating the whole 50 MiB.
    expect((error as { details: { value: number } }).details.value).toBeLessThan(11 * MiB);
    expect(await cacheLeftovers(cacheDir)).toEqual([]);
  });

  it('catches the lying header by its real compression ratio with the default limits', async () => {
    const liar = join(dir, 'liar.mar');
    await writeRawZip(liar, [
      manifestEntry,
      { name: 'model.onnx', data: zeros, compression: 'deflate', declaredUncompressedBytes: 1000 },
    ]);
    const cacheDir = join(dir, 'cache');
    await expect(extractToCache({ archivePath: liar, cacheDir })).rejects.toMatchObject({
      code: 'MARINA_ERR_ARCHIVE_COMPRESSION_RATIO',
      details: { how: 'written' },
    });
    expect(await cacheLeftovers(cacheDir)).toEqual([]);
  });

  it('refuses a tar.gz bomb by the stream ratio, and by its size when the ratio limit is off', async () => {
    const bomb = await writeTgz('bomb.tar.gz', {
      'MAR-INF/MANIFEST.json': manifestText({ handler: 'tensor' }),
      'model.onnx': zeros.subarray(0, 24 * MiB),
    });
    const cacheDir = join(dir, 'cache');
    await expect(extractToCache({ archivePath: bomb, cacheDir })).rejects.toMatchObject({
      code: 'MARINA_ERR_ARCHIVE_COMPRESSION_RATIO',
      message: expect.stringContaining('the gzip stream'),
    });
    await expect(
      extractToCache({ archivePath: bomb, cacheDir, maxExtractedBytes: 8 * MiB, maxCompressionRatio: Infinity }),
    ).rejects.toMatchObject({ code: 'MARINA_ERR_ARCHIVE_TOO_LARGE', details: { limit: 8 * MiB } });
    expect(await cacheLeftovers(cacheDir)).toEqual([]);
  });

  it('refuses archives with more entries than maxEntries, zip and tar.gz', async () => {
    const files: Record<string, string> = { 'MAR-INF/MANIFEST.json': manifestText({ handler: 'tensor' }) };
    for (let i = 0; i < 30; i += 1) files[`data/part-${i}.txt`] = `part ${i}`;
    const zip = join(dir, 'many.mar');
    await writeRawZip(
      zip,
      Object.entries(files).map(([name, data]) => ({ name, data })),
    );
    const tgz = await writeTgz('many.tar.gz', files);
    const cacheDir = join(dir, 'cache');
    await expect(extractToCache({ archivePath: zip, cacheDir, maxEntries: 20 })).rejects.toMatchObject({
      code: 'MARINA_ERR_ARCHIVE_TOO_MANY_ENTRIES',
      details: { limit: 20, value: 31 },
    });
    await expect(extractToCache({ archivePath: tgz, cacheDir, maxEntries: 20 })).rejects.toMatchObject({
      code: 'MARINA_ERR_ARCHIVE_TOO_MANY_ENTRIES',
      details: { limit: 20 },
    });
    expect(await cacheLeftovers(cacheDir)).toEqual([]);
    expect((await extractToCache({ archivePath: zip, cacheDir, maxEntries: 31 })).manifest.model.handler).toBe(
      'tensor',
    );
  });

  it('refuses a zip whose end record declares more entries than allowed before reading its directory', async () => {
    const zip = join(dir, 'forged.mar');
    await writeRawZip(zip, [manifestEntry]);
    const handle = await open(zip, 'r+');
    const { size } = await handle.stat();
    const count = Buffer.alloc(4);
    count.writeUInt16LE(0xfffe, 0);
    count.writeUInt16LE(0xfffe, 2);
    await handle.write(count, 0, 4, size - 22 + 8);
    await handle.close();
    await expect(
      extractArchive({ archivePath: zip, destDir: join(dir, 'out'), maxEntries: 1000 }),
    ).rejects.toMatchObject({ code: 'MARINA_ERR_ARCHIVE_TOO_MANY_ENTRIES', details: { value: 0xfffe } });
    expect(existsSync(join(dir, 'out'))).toBe(false);
  });

  it('removes only what it wrote when extracting into a folder that already has files', async () => {
    const liar = join(dir, 'liar.mar');
    await writeRawZip(liar, [
      manifestEntry,
      { name: 'model.onnx', data: zeros, compression: 'deflate', declaredUncompressedBytes: 1000 },
    ]);
    await writeFiles(join(dir, 'out'), { 'keep.txt': 'mine' });
    await expect(
      extractArchive({ archivePath: liar, destDir: join(dir, 'out'), maxExtractedBytes: 4 * MiB }),
    ).rejects.toMatchObject({ code: 'MARINA_ERR_ARCHIVE_TOO_LARGE' });
    expect(await readdir(join(dir, 'out'))).toEqual(['keep.txt']);
  });

  it('rejects a limit that is not a positive number', async () => {
    await writeRawZip(join(dir, 'ok.mar'), [manifestEntry]);
    await expect(
      extractArchive({ archivePath: join(dir, 'ok.mar'), destDir: join(dir, 'out'), maxEntries: 0 }),
    ).rejects.toMatchObject({ code: 'MARINA_ERR_ARCHIVE_OPTION_INVALID', details: { option: 'maxEntries' } });
    await expect(
      extractToCache({ archivePath: join(dir, 'ok.mar'), cacheDir: join(dir, 'cache'), maxExtractedBytes: Number.NaN }),
    ).rejects.toMatchObject({ code: 'MARINA_ERR_ARCHIVE_OPTION_INVALID' });
  });
});

describe('normal archives still extract under the default limits', () => {
  it('extracts a few MB of incompressible weights, deflated text and a tar.gz byte for byte', async () => {
    const weights = randomBytes(6 * MiB);
    const vocabulary = Array.from({ length: 50_000 }, (_, i) => `token-${i}`).join('\n');
    const zip = join(dir, 'model.mar');
    await writeRawZip(zip, [
      manifestEntry,
      { name: 'model.onnx', data: weights, compression: 'deflate' },
      { name: 'vocab.txt', data: vocabulary, compression: 'deflate' },
      { name: 'raw.bin', data: weights.subarray(0, MiB) },
    ]);
    const tgz = await writeTgz('model.tar.gz', {
      'MAR-INF/MANIFEST.json': manifestText({ handler: 'tensor' }),
      'model.onnx': weights,
      'vocab.txt': vocabulary,
    });
    const cacheDir = join(dir, 'cache');
    for (const archivePath of [zip, tgz]) {
      const { modelDir } = await extractToCache({ archivePath, cacheDir });
      expect((await readFile(join(modelDir, 'model.onnx'))).equals(weights)).toBe(true);
      expect(await readFile(join(modelDir, 'vocab.txt'), 'utf8')).toBe(vocabulary);
    }
    expect((await cacheLeftovers(cacheDir)).filter((n) => n.startsWith('.tmp'))).toEqual([]);
  });
});

describe('validateArchive reports the limits as problems', () => {
  it('reports the declared size, the real inflated size and the entry count, each with its code', async () => {
    const bomb = join(dir, 'bomb.mar');
    await writeRawZip(bomb, [manifestEntry, { name: 'model.onnx', data: zeros, compression: 'deflate' }]);
    const liar = join(dir, 'liar.mar');
    await writeRawZip(liar, [
      manifestEntry,
      { name: 'model.onnx', data: zeros, compression: 'deflate', declaredUncompressedBytes: 1000 },
    ]);
    const many = join(dir, 'many.mar');
    await writeRawZip(many, [
      manifestEntry,
      ...Array.from({ length: 10 }, (_, i) => ({ name: `f${i}.txt`, data: 'x' })),
    ]);

    const codes = async (path: string, options: Parameters<typeof validateArchive>[1]) =>
      (await validateArchive(path, { isModelLoadChecked: false, ...options })).problems.map((p) => p.code);
    expect(await codes(bomb, {})).toEqual(['MARINA_ERR_ARCHIVE_COMPRESSION_RATIO']);
    expect(await codes(bomb, { maxExtractedBytes: 10 * MiB })).toEqual(['MARINA_ERR_ARCHIVE_TOO_LARGE']);
    expect(await codes(liar, { maxExtractedBytes: 10 * MiB, maxCompressionRatio: Infinity })).toEqual([
      'MARINA_ERR_ARCHIVE_TOO_LARGE',
    ]);
    expect(await codes(many, { maxEntries: 5 })).toEqual(['MARINA_ERR_ARCHIVE_TOO_MANY_ENTRIES']);
    const report = await validateArchive(bomb, { isModelLoadChecked: false });
    expect(report.isValid).toBe(false);
    expect(report.problems[0]?.message).toMatch(/200:1.*maxCompressionRatio/);
  });
});

it('keeps a refused archive out of a cache that already holds good models', async () => {
  const good = join(dir, 'good.mar');
  await writeRawZip(good, [manifestEntry, { name: 'model.onnx', data: 'tiny' }]);
  const cacheDir = join(dir, 'cache');
  const { digest } = await extractToCache({ archivePath: good, cacheDir });
  const bomb = join(dir, 'bomb.mar');
  await writeRawZip(bomb, [manifestEntry, { name: 'model.onnx', data: zeros, compression: 'deflate' }]);
  await expect(extractToCache({ archivePath: bomb, cacheDir })).rejects.toMatchObject({
    code: 'MARINA_ERR_ARCHIVE_COMPRESSION_RATIO',
  });
  expect(await readdir(cacheDir)).toEqual([digest]);
});
