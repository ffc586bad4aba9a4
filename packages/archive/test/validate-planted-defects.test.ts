import { readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import * as tar from 'tar';
import { writeIndexToName, writeTinyClassifier, writeTinyTensorModel } from '@marina/model-zoo';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { validateArchive, type ValidationReport } from '../src/index.ts';
import { makeTempDir, manifestText, writeFiles, writeRawZip, zipFolder } from '../test-support/fixtures.ts';

let dir: string;
let cleanup: () => Promise<void>;
let src: string;

/** A good image_classifier archive folder (3 classes, dynamic batch), for each test to break. */
beforeEach(async () => {
  ({ dir, cleanup } = await makeTempDir());
  src = join(dir, 'src');
  await writeFiles(src, { 'MAR-INF/MANIFEST.json': manifestText() });
  await writeTinyClassifier({ outputPath: join(src, 'model.onnx'), numClasses: 3 });
  await writeIndexToName(join(src, 'index_to_name.json'), ['cat', 'dog', 'bird']);
});
afterEach(() => cleanup());

async function zipped(): Promise<string> {
  const path = join(dir, 'planted.mar');
  await zipFolder(src, path);
  return path;
}

function codes(report: ValidationReport): string[] {
  return report.problems.map((p) => p.code);
}

describe('validateArchive on a good archive', () => {
  it('passes a zip, a folder and a TorchServe-layout tgz with the model loaded', async () => {
    const zip = await validateArchive(await zipped());
    expect(zip.problems).toEqual([]);
    expect(zip).toMatchObject({
      isValid: true,
      format: 'zip',
      model: {
        inputs: [{ name: 'input', type: 'float32', shape: ['batch_size', 3, 32, 32] }],
        outputs: [{ name: 'output', shape: ['batch_size', 3] }],
      },
    });
    expect((await validateArchive(src)).isValid).toBe(true);
    await tar.c({ gzip: true, file: join(dir, 'tiny.tar.gz'), cwd: dir }, ['src']);
    const tgz = await validateArchive(join(dir, 'tiny.tar.gz'));
    expect(tgz.problems).toEqual([]);
    expect(tgz.format).toBe('tgz');
  });

  it('checks a large serialized file is present without extracting it when the model is not loaded', async () => {
    await writeFile(join(src, 'model.onnx'), Buffer.alloc(3_000_000, 1));
    expect((await validateArchive(await zipped(), { isModelLoadChecked: false })).problems).toEqual([]);
    expect(codes(await validateArchive(await zipped()))).toEqual(['MARINA_ERR_MODEL_LOAD_FAILED']);
    await writeFile(join(src, 'MAR-INF/MANIFEST.json'), manifestText({ serializedFile: 'other.onnx' }));
    expect(codes(await validateArchive(await zipped(), { isModelLoadChecked: false }))).toEqual([
      'MARINA_ERR_ARCHIVE_FILE_MISSING',
    ]);
  });

  it('reads a hand-built TorchServe manifest with modelServerVersion and specificationVersion', async () => {
    await writeFile(
      join(src, 'MAR-INF/MANIFEST.json'),
      manifestText(
        { description: 'from TorchServe' },
        { modelServerVersion: '1.0', specificationVersion: '1.0', implementationVersion: '1.0', description: 'x' },
      ),
    );
    const report = await validateArchive(await zipped());
    expect(report.problems).toEqual([]);
    expect(report.manifest?.modelServerVersion).toBe('1.0');
  });
});

describe('validateArchive reports each planted defect with its own code', () => {
  it('MARINA_ERR_ARCHIVE_PATH_ESCAPE for a ../escape.txt entry, and keeps checking the rest', async () => {
    const path = join(dir, 'escape.mar');
    await zipFolder(src, path, [{ name: '../escape.txt', data: 'x' }]);
    const report = await validateArchive(path);
    expect(report.problems).toEqual([
      {
        code: 'MARINA_ERR_ARCHIVE_PATH_ESCAPE',
        severity: 'error',
        message: expect.stringContaining("'..'"),
        file: '../escape.txt',
      },
    ]);
    expect(report.model).toBeDefined();
  });

  it('MARINA_ERR_ARCHIVE_UNREADABLE for a truncated zip and for a file that is no archive', async () => {
    const path = await zipped();
    const bytes = await readFile(path);
    await writeFile(path, bytes.subarray(0, Math.floor(bytes.length / 2)));
    expect(codes(await validateArchive(path))).toEqual(['MARINA_ERR_ARCHIVE_UNREADABLE']);
    await writeFile(path, 'plain text');
    expect(codes(await validateArchive(path))).toEqual(['MARINA_ERR_ARCHIVE_UNREADABLE']);
  });

  it('MARINA_ERR_ARCHIVE_NOT_FOUND for a path that does not exist', async () => {
    const report = await validateArchive(join(dir, 'nothing.mar'));
    expect(report).toMatchObject({ isValid: false, format: 'unknown' });
    expect(codes(report)).toEqual(['MARINA_ERR_ARCHIVE_NOT_FOUND']);
  });

  it('MARINA_ERR_ARCHIVE_MANIFEST_MISSING when MAR-INF/MANIFEST.json is absent', async () => {
    await writeRawZip(join(dir, 'nomanifest.mar'), [
      { name: 'model.onnx', data: await readFile(join(src, 'model.onnx')) },
    ]);
    expect(codes(await validateArchive(join(dir, 'nomanifest.mar')))).toEqual(['MARINA_ERR_ARCHIVE_MANIFEST_MISSING']);
  });

  it('MARINA_ERR_ARCHIVE_MANIFEST_INVALID for broken JSON and for each schema error', async () => {
    await writeFile(join(src, 'MAR-INF/MANIFEST.json'), '{ "model": ');
    expect(codes(await validateArchive(await zipped()))).toEqual(['MARINA_ERR_ARCHIVE_MANIFEST_INVALID']);
    await writeFile(
      join(src, 'MAR-INF/MANIFEST.json'),
      JSON.stringify({
        runtime: 'jvm',
        model: { modelName: 'tiny', serializedFile: 'model.onnx', handler: 'image_classifier' },
      }),
    );
    const report = await validateArchive(await zipped());
    expect(
      report.problems
        .filter((p) => p.code === 'MARINA_ERR_ARCHIVE_MANIFEST_INVALID')
        .map((p) => p.message)
        .join('\n'),
    ).toMatch(/runtime[\s\S]*modelVersion|modelVersion[\s\S]*runtime/);
    expect(report.problems.filter((p) => p.severity === 'warning').map((p) => p.code)).toEqual([
      'MARINA_ERR_ARCHIVE_MANIFEST_INCOMPLETE',
    ]);
  });

  it('MARINA_ERR_ARCHIVE_FILE_MISSING for a serialized file the manifest names but the archive lacks', async () => {
    await writeFile(join(src, 'MAR-INF/MANIFEST.json'), manifestText({ serializedFile: 'missing.onnx' }));
    const report = await validateArchive(await zipped());
    expect(report.problems).toEqual([
      {
        code: 'MARINA_ERR_ARCHIVE_FILE_MISSING',
        severity: 'error',
        message: expect.stringContaining("'missing.onnx'"),
        file: 'missing.onnx',
      },
    ]);
  });

  it('MARINA_ERR_ARCHIVE_PATH_ESCAPE for a manifest that names a file outside the archive', async () => {
    await writeFile(join(src, 'MAR-INF/MANIFEST.json'), manifestText({ serializedFile: '../../etc/passwd' }));
    expect(codes(await validateArchive(await zipped()))).toEqual(['MARINA_ERR_ARCHIVE_PATH_ESCAPE']);
  });

  it('MARINA_ERR_HANDLER_NOT_FOUND for an unknown handler, a missing module and a Python handler', async () => {
    for (const handler of ['no_such_handler', 'handler.mjs', 'handler.py']) {
      await writeFile(join(src, 'MAR-INF/MANIFEST.json'), manifestText({ handler }));
      expect(codes(await validateArchive(await zipped())), handler).toEqual(['MARINA_ERR_HANDLER_NOT_FOUND']);
    }
  });

  it('MARINA_ERR_HANDLER_CONTRACT for a custom handler that exports no handle or inference', async () => {
    await writeFiles(src, { 'handler.mjs': 'export function predict() {}\nexport default { name: "x" };\n' });
    await writeFile(join(src, 'MAR-INF/MANIFEST.json'), manifestText({ handler: 'handler.mjs' }));
    const report = await validateArchive(await zipped());
    expect(report.problems).toEqual([
      {
        code: 'MARINA_ERR_HANDLER_CONTRACT',
        severity: 'error',
        message: expect.stringContaining('no handle or inference'),
        file: 'handler.mjs',
      },
    ]);
  });

  it('MARINA_ERR_HANDLER_IMPORT_FAILED for a custom handler that throws or hangs on import, without harming the validator', async () => {
    await writeFiles(src, { 'throws.mjs': 'throw new Error("boom at import");\n', 'hangs.mjs': 'while (true) {}\n' });
    await writeFile(join(src, 'MAR-INF/MANIFEST.json'), manifestText({ handler: 'throws.mjs' }));
    const thrown = await validateArchive(await zipped());
    expect(thrown.problems).toEqual([
      expect.objectContaining({
        code: 'MARINA_ERR_HANDLER_IMPORT_FAILED',
        message: expect.stringContaining('boom at import'),
      }),
    ]);
    await writeFile(join(src, 'MAR-INF/MANIFEST.json'), manifestText({ handler: 'hangs.mjs' }));
    const hung = await validateArchive(await zipped(), { handlerImportTimeoutMs: 500 });
    expect(hung.problems).toEqual([
      expect.objectContaining({ code: 'MARINA_ERR_HANDLER_IMPORT_FAILED', message: expect.stringContaining('500 ms') }),
    ]);
  });

  it('accepts each shape of the custom handler contract', async () => {
    const shapes: Record<string, string> = {
      'named.mjs': 'export async function handle(data) { return data; }',
      'object.mjs': 'export default { initialize() {}, inference(x) { return x; } };',
      'klass.mjs': 'class Base { handle(d) { return d; } }\nexport default class H extends Base {}',
      'factory.mjs': 'export default () => ({ handle: (d) => d });',
      'fn.mjs': 'export function run(data, context) { return data; }',
      'common.cjs': 'module.exports = { handle(d) { return d; } };',
    };
    await writeFiles(src, shapes);
    for (const name of Object.keys(shapes)) {
      await writeFile(
        join(src, 'MAR-INF/MANIFEST.json'),
        manifestText({ handler: name === 'fn.mjs' ? 'fn.mjs:run' : name }),
      );
      expect((await validateArchive(src, { isModelLoadChecked: false })).problems, name).toEqual([]);
    }
  });

  it('MARINA_ERR_MODEL_CONFIG_INVALID for a model-config.yaml that is not YAML or breaks the schema', async () => {
    await writeFiles(src, { 'model-config.yaml': 'batchSize: [oops\n' });
    await writeFile(join(src, 'MAR-INF/MANIFEST.json'), manifestText({ configFile: 'model-config.yaml' }));
    expect(codes(await validateArchive(await zipped()))).toEqual(['MARINA_ERR_MODEL_CONFIG_INVALID']);
    await writeFiles(src, { 'model-config.yaml': 'minWorkers: -1\ndeviceType: tpu\nhandler:\n  topk: 0\n' });
    expect(codes(await validateArchive(await zipped()))).toEqual([
      'MARINA_ERR_MODEL_CONFIG_INVALID',
      'MARINA_ERR_MODEL_CONFIG_INVALID',
      'MARINA_ERR_MODEL_CONFIG_INVALID',
    ]);
  });

  it('names the unknown key when model-config.yaml misspells an onnxruntime setting', async () => {
    await writeFiles(src, { 'model-config.yaml': 'onnxruntime:\n  graphOptimizationLevl: all\n' });
    await writeFile(join(src, 'MAR-INF/MANIFEST.json'), manifestText({ configFile: 'model-config.yaml' }));
    const report = await validateArchive(await zipped(), { isModelLoadChecked: false });
    expect(codes(report)).toEqual(['MARINA_ERR_MODEL_CONFIG_INVALID']);
    expect(report.problems[0]?.message).toContain("unknown key 'graphOptimizationLevl'");
  });

  it('MARINA_ERR_MODEL_LOAD_FAILED for a garbage .onnx', async () => {
    await writeFile(join(src, 'model.onnx'), 'this is not a protobuf');
    const report = await validateArchive(await zipped());
    expect(report.problems).toEqual([
      {
        code: 'MARINA_ERR_MODEL_LOAD_FAILED',
        severity: 'error',
        message: expect.stringContaining("cannot load 'model.onnx'"),
        file: 'model.onnx',
      },
    ]);
    expect(report.problems[0]?.message).not.toContain(dir);
    expect((await validateArchive(await zipped(), { isModelLoadChecked: false })).problems).toEqual([]);
  });

  it('MARINA_ERR_HANDLER_SIGNATURE_MISMATCH for a tensor-shaped model under image_classifier', async () => {
    await writeTinyTensorModel({ outputPath: join(src, 'model.onnx') });
    await rm(join(src, 'index_to_name.json'));
    const report = await validateArchive(await zipped());
    expect(new Set(codes(report))).toEqual(
      new Set(['MARINA_ERR_HANDLER_SIGNATURE_MISMATCH', 'MARINA_ERR_INDEX_TO_NAME_MISSING']),
    );
    expect(report.problems.find((p) => p.code === 'MARINA_ERR_INDEX_TO_NAME_MISSING')).toMatchObject({
      severity: 'warning',
      file: 'index_to_name.json',
    });
    expect(report.problems.find((p) => p.code === 'MARINA_ERR_HANDLER_SIGNATURE_MISMATCH')?.message).toContain('4-D');
  });

  it('MARINA_ERR_MODEL_BATCH_NOT_DYNAMIC is a warning (the archive serves) for a fixed-batch classifier with batchSize 8, from model-config.yaml or the option', async () => {
    await writeTinyClassifier({ outputPath: join(src, 'model.onnx'), numClasses: 3, fixedBatch: 1 });
    expect((await validateArchive(await zipped())).problems).toEqual([]);
    const warned = {
      isValid: true,
      problems: [
        {
          code: 'MARINA_ERR_MODEL_BATCH_NOT_DYNAMIC',
          severity: 'warning',
          file: 'model.onnx',
          message: expect.stringMatching(/batchSize is 8 .*fixed batch dimension of 1: Marina serves it/),
        },
      ],
    };
    expect(await validateArchive(await zipped(), { batchSize: 8 })).toMatchObject(warned);
    await writeFiles(src, { 'model-config.yaml': 'batchSize: 8\nmaxBatchDelay: 50\n' });
    await writeFile(join(src, 'MAR-INF/MANIFEST.json'), manifestText({ configFile: 'model-config.yaml' }));
    expect(await validateArchive(await zipped())).toMatchObject(warned);
  });

  it("MARINA_ERR_MODEL_CONFIG_INVALID when model-config.yaml's handler knobs do not fit the model", async () => {
    await writeFiles(src, { 'model-config.yaml': 'handler:\n  size: [20, 20]\n' });
    await writeFile(join(src, 'MAR-INF/MANIFEST.json'), manifestText({ configFile: 'model-config.yaml' }));
    const report = await validateArchive(await zipped());
    expect(report.problems).toEqual([
      {
        code: 'MARINA_ERR_MODEL_CONFIG_INVALID',
        severity: 'error',
        file: 'model-config.yaml',
        message: expect.stringContaining("handler.size is 20x20 but the model's input takes 32x32"),
      },
    ]);
  });

  it('MARINA_ERR_INDEX_TO_NAME_MISMATCH for index_to_name.json with the wrong count', async () => {
    await writeIndexToName(join(src, 'index_to_name.json'), ['cat', 'dog']);
    const report = await validateArchive(await zipped());
    expect(report.problems).toEqual([
      {
        code: 'MARINA_ERR_INDEX_TO_NAME_MISMATCH',
        severity: 'error',
        message: expect.stringContaining('2 names'),
        file: 'index_to_name.json',
      },
    ]);
  });

  it('MARINA_ERR_INDEX_TO_NAME_INVALID for index_to_name.json that is not a map of indices to names', async () => {
    for (const text of ['[1, 2, 3]', '{"a": "cat"}', '{"0": 5}', 'nope']) {
      await writeFile(join(src, 'index_to_name.json'), text);
      expect(codes(await validateArchive(await zipped(), { isModelLoadChecked: false })), text).toEqual([
        'MARINA_ERR_INDEX_TO_NAME_INVALID',
      ]);
    }
    await writeFile(
      join(src, 'index_to_name.json'),
      JSON.stringify({ 0: ['n01', 'cat'], 1: ['n02', 'dog'], 2: ['n03', 'bird'] }),
    );
    expect((await validateArchive(await zipped())).problems).toEqual([]);
  });

  it('MARINA_ERR_ARCHIVE_NO_MODEL for a built-in handler without a serialized file', async () => {
    await writeFile(join(src, 'MAR-INF/MANIFEST.json'), manifestText({ serializedFile: undefined }));
    expect(codes(await validateArchive(await zipped()))).toEqual(['MARINA_ERR_ARCHIVE_NO_MODEL']);
  });

  it('collects several defects in one report instead of stopping at the first', async () => {
    await writeFiles(src, { 'model-config.yaml': 'batchSize: nope\n' });
    await writeFile(
      join(src, 'MAR-INF/MANIFEST.json'),
      manifestText({ configFile: 'model-config.yaml', modelFile: 'model.py' }),
    );
    await writeIndexToName(join(src, 'index_to_name.json'), ['only-one']);
    const path = join(dir, 'many.mar');
    await zipFolder(src, path, [{ name: '../escape.txt', data: 'x' }]);
    expect(codes(await validateArchive(path)).sort()).toEqual([
      'MARINA_ERR_ARCHIVE_FILE_MISSING',
      'MARINA_ERR_ARCHIVE_PATH_ESCAPE',
      'MARINA_ERR_INDEX_TO_NAME_MISMATCH',
      'MARINA_ERR_MODEL_CONFIG_INVALID',
    ]);
  });
});
