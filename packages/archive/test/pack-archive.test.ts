import { existsSync } from 'node:fs';
import { mkdir, readdir, readFile, rm, stat, unlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { writeIndexToName, writeTinyClassifier } from '@marina/model-zoo';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  extractArchive,
  listArchive,
  packArchive,
  validateArchive,
  type ArchiveFormatOption,
  type PackProgress,
} from '../src/index.ts';
import { makeTempDir, writeFiles } from '../test-support/fixtures.ts';

let dir: string;
let cleanup: () => Promise<void>;
let modelPath: string;

beforeEach(async () => {
  ({ dir, cleanup } = await makeTempDir());
  modelPath = join(dir, 'in', 'tiny.onnx');
  await mkdir(join(dir, 'in'));
  await writeTinyClassifier({ outputPath: modelPath, numClasses: 3 });
  await writeIndexToName(join(dir, 'in', 'index_to_name.json'), ['cat', 'dog', 'bird']);
});
afterEach(() => cleanup());

const exportPath = (): string => join(dir, 'model_store');

describe('packArchive output formats', () => {
  const cases: Array<[ArchiveFormatOption, string, 'zip' | 'tgz' | 'folder']> = [
    ['default', 'tiny.mar', 'zip'],
    ['zip-store', 'tiny.mar', 'zip'],
    ['tgz', 'tiny.tar.gz', 'tgz'],
    ['no-archive', 'tiny', 'folder'],
  ];
  for (const [archiveFormat, fileName, format] of cases) {
    it(`round-trips ${archiveFormat}: pack, validate with the model loaded, extract`, async () => {
      const result = await packArchive({
        modelName: 'tiny',
        modelVersion: '1.0',
        handler: 'image_classifier',
        serializedFile: modelPath,
        extraFiles: [join(dir, 'in', 'index_to_name.json')],
        exportPath: exportPath(),
        archiveFormat,
      });
      expect(result.outputPath).toBe(join(exportPath(), fileName));
      const report = await validateArchive(result.outputPath);
      expect(report.problems).toEqual([]);
      expect(report).toMatchObject({
        isValid: true,
        format,
        manifest: { model: { modelName: 'tiny', handler: 'image_classifier', serializedFile: 'tiny.onnx' } },
      });
      expect(report.model?.outputs[0]?.shape).toEqual(['batch_size', 3]);
      const extracted = await extractArchive({ archivePath: result.outputPath, destDir: join(dir, 'out') });
      expect((await readdir(extracted.modelDir)).sort()).toEqual(['MAR-INF', 'index_to_name.json', 'tiny.onnx']);
      expect(await readFile(join(extracted.modelDir, 'tiny.onnx'))).toEqual(await readFile(modelPath));
      expect(JSON.parse(await readFile(join(extracted.modelDir, 'MAR-INF/MANIFEST.json'), 'utf8'))).toEqual(
        result.manifest,
      );
    });
  }

  it('compresses with deflate by default and stores with zip-store', async () => {
    await writeFile(join(dir, 'in', 'zeros.bin'), Buffer.alloc(200_000));
    const deflated = await packArchive({
      modelName: 'a',
      modelVersion: '1',
      handler: 'tensor',
      extraFiles: [join(dir, 'in', 'zeros.bin')],
      exportPath: exportPath(),
    });
    const stored = await packArchive({
      modelName: 'b',
      modelVersion: '1',
      handler: 'tensor',
      extraFiles: [join(dir, 'in', 'zeros.bin')],
      exportPath: exportPath(),
      archiveFormat: 'zip-store',
    });
    expect(deflated.bytes).toBeLessThan(10_000);
    expect(stored.bytes).toBeGreaterThan(200_000);
  });

  it("puts every tgz entry under a '<name>/' root folder, as TorchServe does", async () => {
    const result = await packArchive({
      modelName: 'tiny',
      modelVersion: '1.0',
      handler: 'image_classifier',
      serializedFile: modelPath,
      exportPath: exportPath(),
      archiveFormat: 'tgz',
    });
    const { entries } = await listArchive(result.outputPath);
    expect(entries.map((e) => e.name).sort()).toEqual(['tiny/MAR-INF/MANIFEST.json', 'tiny/tiny.onnx']);
  });
});

describe('packArchive inputs', () => {
  it('stores every input flat by basename and records each in the manifest', async () => {
    await writeFiles(join(dir, 'in'), {
      'def/model.py': 'class M: pass',
      'req/requirements.txt': 'numpy',
      'cfg/model-config.yaml': 'batchSize: 4\n',
    });
    const result = await packArchive({
      modelName: 'tiny',
      modelVersion: '2.0',
      handler: 'image_classifier',
      serializedFile: modelPath,
      modelFile: join(dir, 'in/def/model.py'),
      requirementsFile: join(dir, 'in/req/requirements.txt'),
      configFile: join(dir, 'in/cfg/model-config.yaml'),
      exportPath: exportPath(),
      archiveFormat: 'no-archive',
      runtime: 'python3',
    });
    expect(result.manifest).toMatchObject({
      runtime: 'python3',
      model: {
        modelName: 'tiny',
        serializedFile: 'tiny.onnx',
        handler: 'image_classifier',
        modelFile: 'model.py',
        modelVersion: '2.0',
        requirementsFile: 'requirements.txt',
        configFile: 'model-config.yaml',
      },
    });
    expect((await readdir(result.outputPath)).sort()).toEqual([
      'MAR-INF',
      'model-config.yaml',
      'model.py',
      'requirements.txt',
      'tiny.onnx',
    ]);
  });

  it('copies an extra-files folder recursively, skipping __pycache__, __MACOSX and dot-folders, and expands globs', async () => {
    await writeFiles(join(dir, 'assets'), {
      'vocab.txt': 'a',
      'sub/deep.txt': 'b',
      '__pycache__/x.pyc': 'c',
      '__MACOSX/y': 'd',
      '.git/HEAD': 'e',
      '.keep': 'f',
    });
    await writeFiles(join(dir, 'globbed'), { 'one.json': '1', 'two.json': '2', 'three.txt': '3' });
    const result = await packArchive({
      modelName: 'x',
      modelVersion: '1',
      handler: 'tensor',
      extraFiles: [join(dir, 'assets'), join(dir, 'globbed/*.json')],
      exportPath: exportPath(),
    });
    const names = (await listArchive(result.outputPath)).entries.map((e) => e.name).sort();
    expect(names).toEqual(['.keep', 'MAR-INF/MANIFEST.json', 'one.json', 'sub/deep.txt', 'two.json', 'vocab.txt']);
  });

  it('resolves relative paths against cwd and warns about a glob that matches nothing', async () => {
    const result = await packArchive({
      modelName: 'x',
      modelVersion: '1',
      handler: 'image_classifier',
      serializedFile: 'in/tiny.onnx',
      extraFiles: ['in/*.nothing'],
      exportPath: 'store',
      cwd: dir,
    });
    expect(result.outputPath).toBe(join(dir, 'store', 'x.mar'));
    expect(result.warnings).toEqual(["--extra-files: the pattern 'in/*.nothing' matched no files"]);
  });

  it('copies a JavaScript handler module and writes its file name, keeping a :fn suffix', async () => {
    await writeFiles(join(dir, 'src'), { 'my-handler.mjs': 'export function run(data) { return data; }' });
    const plain = await packArchive({
      modelName: 'a',
      modelVersion: '1',
      handler: join(dir, 'src/my-handler.mjs'),
      exportPath: exportPath(),
    });
    expect(plain.manifest.model.handler).toBe('my-handler.mjs');
    const withFn = await packArchive({
      modelName: 'b',
      modelVersion: '1',
      handler: `${join(dir, 'src/my-handler')}:run`,
      exportPath: exportPath(),
    });
    expect(withFn.manifest.model.handler).toBe('my-handler.mjs:run');
    expect((await listArchive(withFn.outputPath)).entries.map((e) => e.name)).toContain('my-handler.mjs');
    expect((await validateArchive(withFn.outputPath)).problems).toEqual([]);
  });

  it('does not copy a built-in handler', async () => {
    const result = await packArchive({
      modelName: 'a',
      modelVersion: '1',
      handler: 'image_classifier',
      serializedFile: modelPath,
      exportPath: exportPath(),
    });
    expect((await listArchive(result.outputPath)).entries.map((e) => e.name).sort()).toEqual([
      'MAR-INF/MANIFEST.json',
      'tiny.onnx',
    ]);
  });

  it('reports progress up to the total input bytes', async () => {
    const seen: PackProgress[] = [];
    await packArchive({
      modelName: 'a',
      modelVersion: '1',
      handler: 'image_classifier',
      serializedFile: modelPath,
      exportPath: exportPath(),
      onProgress: (p) => seen.push(p),
    });
    const total = (await stat(modelPath)).size;
    expect(seen[0]).toEqual({ bytesDone: 0, bytesTotal: total });
    expect(seen.at(-1)).toEqual({ bytesDone: total, bytesTotal: total });
  });
});

describe('packArchive errors leave nothing behind', () => {
  const base = () => ({
    modelName: 'tiny',
    modelVersion: '1.0',
    handler: 'image_classifier',
    serializedFile: modelPath,
    exportPath: exportPath(),
  });

  it("refuses a model name outside TorchServe's rule", async () => {
    for (const modelName of ['bad name', '-lead', 'a/b', '']) {
      await expect(packArchive({ ...base(), modelName })).rejects.toMatchObject({
        code: 'MARINA_ERR_ARCHIVE_MODEL_NAME_INVALID',
        message: expect.stringContaining('^[A-Za-z0-9][A-Za-z0-9_\\-.]*$'),
      });
    }
    expect(existsSync(exportPath())).toBe(false);
  });

  it("refuses to overwrite without force, with TorchServe's wording, and overwrites with it", async () => {
    const first = await packArchive(base());
    await expect(packArchive(base())).rejects.toMatchObject({
      code: 'MARINA_ERR_ARCHIVE_OUTPUT_EXISTS',
      message: `${first.outputPath} already exists.\nPlease specify --force/-f option to overwrite the model archive output file.\nSee -h/--help for more details.`,
    });
    await packArchive({ ...base(), modelVersion: '2.0', isForced: true });
    expect((await validateArchive(first.outputPath, { isModelLoadChecked: false })).manifest?.model.modelVersion).toBe(
      '2.0',
    );
    await packArchive({ ...base(), archiveFormat: 'no-archive' });
    await packArchive({ ...base(), archiveFormat: 'no-archive', modelVersion: '3.0', isForced: true });
    expect(
      (await validateArchive(join(exportPath(), 'tiny'), { isModelLoadChecked: false })).manifest?.model.modelVersion,
    ).toBe('3.0');
    expect((await readdir(exportPath())).sort()).toEqual(['tiny', 'tiny.mar']);
  });

  it('names a missing input file', async () => {
    await expect(packArchive({ ...base(), serializedFile: join(dir, 'nope.onnx') })).rejects.toMatchObject({
      code: 'MARINA_ERR_ARCHIVE_INPUT_MISSING',
      message: expect.stringContaining(`File does not exist: ${join(dir, 'nope.onnx')}`),
    });
    await expect(packArchive({ ...base(), extraFiles: [join(dir, 'missing.txt')] })).rejects.toMatchObject({
      code: 'MARINA_ERR_ARCHIVE_INPUT_MISSING',
    });
    await expect(packArchive({ ...base(), configFile: join(dir, 'in') })).rejects.toMatchObject({
      code: 'MARINA_ERR_ARCHIVE_INPUT_MISSING',
      message: expect.stringContaining('is not a file'),
    });
    expect(existsSync(exportPath())).toBe(false);
  });

  it("refuses an export path that is a file, with TorchServe's wording", async () => {
    await writeFile(join(dir, 'file'), 'x');
    await expect(packArchive({ ...base(), exportPath: join(dir, 'file') })).rejects.toMatchObject({
      code: 'MARINA_ERR_ARCHIVE_EXPORT_PATH_NOT_DIR',
      message: `Given export-path ${join(dir, 'file')} is not a directory. Point to a valid export-path directory.`,
    });
  });

  it('suggests the built-in handler a typo was meant to be', async () => {
    await expect(packArchive({ ...base(), handler: 'image_clasifier' })).rejects.toMatchObject({
      code: 'MARINA_ERR_HANDLER_NOT_FOUND',
      message: expect.stringContaining(
        "'image_clasifier' is not a built-in handler (did you mean 'image_classifier'?)",
      ),
    });
    await expect(packArchive({ ...base(), handler: 'no_such_handler' })).rejects.toMatchObject({
      message: expect.not.stringContaining('did you mean'),
    });
  });

  it('refuses a handler that cannot be found, listing the built-ins', async () => {
    for (const handler of ['no_such_handler', join(dir, 'missing.js'), 'handler.py', 'text_classifier']) {
      await expect(packArchive({ ...base(), handler })).rejects.toMatchObject({
        code: 'MARINA_ERR_HANDLER_NOT_FOUND',
        message: expect.stringContaining('image_classifier, image_segmenter, object_detector, tensor'),
      });
    }
  });

  it('refuses two inputs that land on the same name and inputs inside MAR-INF', async () => {
    await writeFiles(join(dir, 'other'), { 'tiny.onnx': 'x', 'MAR-INF/MANIFEST.json': '{}' });
    await expect(packArchive({ ...base(), extraFiles: [join(dir, 'other/tiny.onnx')] })).rejects.toMatchObject({
      code: 'MARINA_ERR_ARCHIVE_ENTRY_CONFLICT',
    });
    await expect(packArchive({ ...base(), extraFiles: [join(dir, 'other')] })).rejects.toMatchObject({
      code: 'MARINA_ERR_ARCHIVE_ENTRY_CONFLICT',
    });
  });

  it('refuses an unknown archive format or runtime', async () => {
    await expect(packArchive({ ...base(), archiveFormat: 'rar' as never })).rejects.toMatchObject({
      code: 'MARINA_ERR_ARCHIVE_OPTION_INVALID',
    });
    await expect(packArchive({ ...base(), runtime: 'jvm' as never })).rejects.toMatchObject({
      code: 'MARINA_ERR_ARCHIVE_OPTION_INVALID',
    });
  });

  for (const archiveFormat of ['default', 'tgz', 'no-archive'] as const) {
    it(`removes the partial ${archiveFormat} output when an input vanishes mid-write`, async () => {
      await writeFiles(join(dir, 'extra'), { 'a.bin': Buffer.alloc(3_000_000, 1), 'b.bin': Buffer.alloc(1000, 2) });
      let isRemoved = false;
      const onProgress = ({ bytesDone }: PackProgress): void => {
        if (bytesDone > 0 && !isRemoved) {
          isRemoved = true;
          void unlink(join(dir, 'extra/b.bin'));
        }
      };
      await expect(
        packArchive({
          ...base(),
          extraFiles: [join(dir, 'extra/a.bin'), join(dir, 'extra/b.bin')],
          archiveFormat,
          onProgress,
        }),
      ).rejects.toMatchObject({ code: 'MARINA_ERR_ARCHIVE_WRITE_FAILED' });
      expect(await readdir(exportPath())).toEqual([]);
      await rm(join(dir, 'extra'), { recursive: true });
    });
  }
});
