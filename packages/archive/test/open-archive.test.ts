import { existsSync } from 'node:fs';
import { mkdir, readdir, readFile, symlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import * as tar from 'tar';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  detectArchiveFormat,
  extractArchive,
  extractToCache,
  packArchive,
  readModelConfig,
  readManifest,
} from '../src/index.ts';
import { makeTempDir, manifestText, writeFiles, writeRawZip, zipFolder } from '../test-support/fixtures.ts';

let dir: string;
let cleanup: () => Promise<void>;
beforeEach(async () => ({ dir, cleanup } = await makeTempDir()));
afterEach(() => cleanup());

describe('detectArchiveFormat', () => {
  it('detects the container by content, whatever the file name', async () => {
    await writeFiles(join(dir, 'src'), { 'MAR-INF/MANIFEST.json': manifestText() });
    await zipFolder(join(dir, 'src'), join(dir, 'zip-named.tar.gz'));
    await tar.c({ gzip: true, file: join(dir, 'tgz-named.mar'), cwd: join(dir, 'src') }, ['MAR-INF']);
    await writeFile(join(dir, 'text.mar'), 'hello');
    expect(await detectArchiveFormat(join(dir, 'zip-named.tar.gz'))).toBe('zip');
    expect(await detectArchiveFormat(join(dir, 'tgz-named.mar'))).toBe('tgz');
    expect(await detectArchiveFormat(join(dir, 'src'))).toBe('folder');
    await expect(detectArchiveFormat(join(dir, 'text.mar'))).rejects.toMatchObject({
      code: 'MARINA_ERR_ARCHIVE_UNREADABLE',
    });
    await expect(detectArchiveFormat(join(dir, 'missing.mar'))).rejects.toMatchObject({
      code: 'MARINA_ERR_ARCHIVE_NOT_FOUND',
    });
  });
});

describe('extractArchive never writes outside the destination', () => {
  const cases: Array<[string, { name: string; data: string; unixMode?: number }]> = [
    ["a '..' entry", { name: '../escape.txt', data: 'x' }],
    ['a nested .. entry', { name: 'a/../../escape.txt', data: 'x' }],
    ['an absolute entry', { name: '/tmp/escape.txt', data: 'x' }],
    ['a symbolic link entry', { name: 'link', data: '/etc/passwd', unixMode: 0o120777 }],
  ];
  for (const [label, bad] of cases) {
    it(`refuses a zip with ${label} before writing anything`, async () => {
      await writeRawZip(join(dir, 'bad.mar'), [{ name: 'MAR-INF/MANIFEST.json', data: manifestText() }, bad]);
      await expect(
        extractArchive({ archivePath: join(dir, 'bad.mar'), destDir: join(dir, 'out/dest') }),
      ).rejects.toMatchObject({ code: 'MARINA_ERR_ARCHIVE_PATH_ESCAPE', details: { entries: [bad.name] } });
      expect(existsSync(join(dir, 'out'))).toBe(false);
      expect(existsSync(join(dir, 'escape.txt'))).toBe(false);
    });
  }

  it('skips only the unsafe entries when asked to', async () => {
    await writeRawZip(join(dir, 'bad.mar'), [
      { name: 'MAR-INF/MANIFEST.json', data: manifestText() },
      { name: '../escape.txt', data: 'x' },
    ]);
    const result = await extractArchive({
      archivePath: join(dir, 'bad.mar'),
      destDir: join(dir, 'out'),
      onUnsafeEntry: 'skip',
    });
    expect(result.skippedEntries.map((e) => e.name)).toEqual(['../escape.txt']);
    expect(await readdir(join(dir, 'out'))).toEqual(['MAR-INF']);
    expect(existsSync(join(dir, 'escape.txt'))).toBe(false);
  });

  it('refuses a tgz with a .. entry or a symbolic link', async () => {
    await writeFiles(join(dir, 'src'), { 'x/MAR-INF/MANIFEST.json': manifestText(), 'evil.txt': 'x' });
    await symlink('/etc/passwd', join(dir, 'src/x/link'));
    await tar.c({ gzip: true, file: join(dir, 'link.tar.gz'), cwd: join(dir, 'src') }, ['x']);
    await expect(
      extractArchive({ archivePath: join(dir, 'link.tar.gz'), destDir: join(dir, 'out') }),
    ).rejects.toMatchObject({ code: 'MARINA_ERR_ARCHIVE_PATH_ESCAPE' });
    await tar.c({ gzip: true, file: join(dir, 'dotdot.tar.gz'), cwd: join(dir, 'src/x'), preservePaths: true }, [
      'MAR-INF',
      '../evil.txt',
    ]);
    await expect(
      extractArchive({ archivePath: join(dir, 'dotdot.tar.gz'), destDir: join(dir, 'out') }),
    ).rejects.toMatchObject({ code: 'MARINA_ERR_ARCHIVE_PATH_ESCAPE', details: { entries: ['../evil.txt'] } });
    expect(existsSync(join(dir, 'out'))).toBe(false);
  });

  it('refuses a truncated zip as unreadable', async () => {
    await writeFiles(join(dir, 'src'), {
      'MAR-INF/MANIFEST.json': manifestText(),
      'model.onnx': Buffer.alloc(5000, 7),
    });
    await zipFolder(join(dir, 'src'), join(dir, 'whole.mar'));
    const bytes = await readFile(join(dir, 'whole.mar'));
    await writeFile(join(dir, 'cut.mar'), bytes.subarray(0, bytes.length - 200));
    await expect(
      extractArchive({ archivePath: join(dir, 'cut.mar'), destDir: join(dir, 'out') }),
    ).rejects.toMatchObject({ code: 'MARINA_ERR_ARCHIVE_UNREADABLE' });
  });
});

describe('extractToCache', () => {
  it('extracts once per content into <cacheDir>/<sha256> and reuses it', async () => {
    await writeFiles(join(dir, 'in'), {
      'model.onnx': 'not really',
      'model-config.yaml': 'batchSize: 4\nhandler:\n  topk: 3\ncustom: true\n',
    });
    const { outputPath } = await packArchive({
      modelName: 'm',
      modelVersion: '1.0',
      handler: 'tensor',
      serializedFile: join(dir, 'in/model.onnx'),
      configFile: join(dir, 'in/model-config.yaml'),
      exportPath: join(dir, 'store'),
    });
    const cacheDir = join(dir, 'cache');
    const first = await extractToCache({ archivePath: outputPath, cacheDir });
    expect(first.digest).toMatch(/^[0-9a-f]{64}$/);
    expect(first.modelDir).toBe(join(cacheDir, first.digest));
    expect(first.manifest.model).toMatchObject({ modelName: 'm', modelVersion: '1.0', handler: 'tensor' });
    await writeFile(join(first.modelDir, 'marker'), 'x');
    const second = await extractToCache({ archivePath: outputPath, cacheDir });
    expect(second.modelDir).toBe(first.modelDir);
    expect(existsSync(join(second.modelDir, 'marker'))).toBe(true);
    expect((await readdir(cacheDir)).filter((n) => n.startsWith('.tmp'))).toEqual([]);
    expect(await readModelConfig(first.modelDir, first.manifest)).toEqual({
      batchSize: 4,
      handler: { topk: 3 },
      custom: true,
    });
  });

  it("uses the '<name>/' root folder of a tgz as the model folder", async () => {
    await writeFiles(join(dir, 'in'), { 'model.onnx': 'x' });
    const { outputPath } = await packArchive({
      modelName: 'm',
      modelVersion: '1.0',
      handler: 'tensor',
      serializedFile: join(dir, 'in/model.onnx'),
      exportPath: join(dir, 'store'),
      archiveFormat: 'tgz',
    });
    const result = await extractToCache({ archivePath: outputPath, cacheDir: join(dir, 'cache') });
    expect(result.modelDir).toBe(join(dir, 'cache', result.digest, 'm'));
    expect(await readManifest(result.modelDir)).toMatchObject({ model: { modelName: 'm' } });
  });

  it('uses a folder in place and derives a manifest for a folder without one', async () => {
    await mkdir(join(dir, 'my-model'));
    await writeFile(join(dir, 'my-model/model.onnx'), 'x');
    const result = await extractToCache({ archivePath: join(dir, 'my-model'), cacheDir: join(dir, 'cache') });
    expect(result.modelDir).toBe(join(dir, 'my-model'));
    expect(result.manifest.model).toEqual({ modelName: 'my_model', modelVersion: '1.0' });
    expect(existsSync(join(dir, 'cache'))).toBe(false);
  });

  it('leaves no cache entry when extraction fails', async () => {
    await writeRawZip(join(dir, 'bad.mar'), [{ name: '../escape.txt', data: 'x' }]);
    await expect(
      extractToCache({ archivePath: join(dir, 'bad.mar'), cacheDir: join(dir, 'cache') }),
    ).rejects.toMatchObject({ code: 'MARINA_ERR_ARCHIVE_PATH_ESCAPE' });
    expect(await readdir(join(dir, 'cache'))).toEqual([]);
  });
});

describe('readModelConfig', () => {
  it('returns {} without configFile and rejects a config that breaks the schema', async () => {
    expect(await readModelConfig(dir, { model: { modelName: 'm', modelVersion: '1' } })).toEqual({});
    await writeFile(join(dir, 'c.yaml'), 'batchSize: many\nhandler:\n  mean: [1, 2]\n');
    await expect(
      readModelConfig(dir, { model: { modelName: 'm', modelVersion: '1', configFile: 'c.yaml' } }),
    ).rejects.toMatchObject({
      code: 'MARINA_ERR_MODEL_CONFIG_INVALID',
      details: { errors: [expect.stringContaining('batchSize'), expect.stringContaining('handler.mean')] },
    });
    await expect(
      readModelConfig(dir, { model: { modelName: 'm', modelVersion: '1', configFile: '../c.yaml' } }),
    ).rejects.toMatchObject({ code: 'MARINA_ERR_ARCHIVE_PATH_ESCAPE' });
    await expect(
      readModelConfig(dir, { model: { modelName: 'm', modelVersion: '1', configFile: 'none.yaml' } }),
    ).rejects.toMatchObject({ code: 'MARINA_ERR_ARCHIVE_FILE_MISSING' });
  });
});
