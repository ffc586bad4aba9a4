import { existsSync } from 'node:fs';
import { mkdir, readdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { extractArchive, listArchive, validateArchive } from '@marina/archive';
import { makeTempDir, writeFiles } from '@marina/archive/testing';
import { writeIndexToName, writeTinyClassifier, writeTinySegmenter } from '@marina/model-zoo';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { runCli } from './run-cli.ts';

let dir: string;
let cleanup: () => Promise<void>;
beforeEach(async () => {
  ({ dir, cleanup } = await makeTempDir('marina-cli-test-'));
  await writeTinyClassifier({ outputPath: join(dir, 'resnet-152.onnx'), numClasses: 4 });
  await writeIndexToName(join(dir, 'index_to_name.json'), ['a', 'b', 'c', 'd']);
});
afterEach(() => cleanup());

const tutorial = [
  '--model-name',
  'resnet-152',
  '--serialized-file',
  'resnet-152.onnx',
  '--handler',
  'image_classifier',
  '--version',
  '1.0',
  '--export-path',
  'model_store',
];

describe('model-archiver archiving', () => {
  it("runs TorchServe's tutorial command and writes a valid model_store/resnet-152.mar", async () => {
    const run = await runCli([...tutorial, '--extra-files', 'index_to_name.json'], { cwd: dir });
    expect(run).toMatchObject({ exitCode: 0, stderr: '' });
    expect(run.stdout).toContain(join(dir, 'model_store', 'resnet-152.mar'));
    const report = await validateArchive(join(dir, 'model_store/resnet-152.mar'));
    expect(report.problems).toEqual([]);
    expect(report.manifest).toMatchObject({
      runtime: 'python',
      model: {
        modelName: 'resnet-152',
        serializedFile: 'resnet-152.onnx',
        handler: 'image_classifier',
        modelVersion: '1.0',
      },
    });
    expect(Object.keys(report.manifest!)).toEqual(['createdOn', 'runtime', 'model', 'archiverVersion']);
  });

  it('takes every TorchServe flag, short forms included', async () => {
    await writeFiles(dir, {
      'model.py': 'x',
      'requirements.txt': 'numpy',
      'model-config.yaml': 'batchSize: 2\nhandler:\n  topk: 3\n',
      'assets/vocab.txt': 'v',
      'labels/one.json': '1',
    });
    const run = await runCli(
      [
        '--model-name',
        'full',
        '-v',
        '3.1',
        '--handler',
        'image_classifier',
        '--serialized-file',
        'resnet-152.onnx',
        '--model-file',
        'model.py',
        '--extra-files',
        'index_to_name.json,assets,labels/*.json',
        '-r',
        'requirements.txt',
        '-c',
        'model-config.yaml',
        '--runtime',
        'python3',
        '--export-path',
        'out',
        '--archive-format',
        'no-archive',
      ],
      { cwd: dir },
    );
    expect(run.exitCode).toBe(0);
    expect((await readdir(join(dir, 'out/full'))).sort()).toEqual([
      'MAR-INF',
      'index_to_name.json',
      'model-config.yaml',
      'model.py',
      'one.json',
      'requirements.txt',
      'resnet-152.onnx',
      'vocab.txt',
    ]);
    const report = await validateArchive(join(dir, 'out/full'));
    expect(report.problems).toEqual([]);
    expect(report.manifest).toMatchObject({
      runtime: 'python3',
      model: {
        modelVersion: '3.1',
        modelFile: 'model.py',
        requirementsFile: 'requirements.txt',
        configFile: 'model-config.yaml',
      },
    });
  });

  it('writes each --archive-format and overwrites only with -f', async () => {
    for (const [format, name] of [
      ['default', 'm.mar'],
      ['zip-store', 'm.mar'],
      ['tgz', 'm.tar.gz'],
      ['no-archive', 'm'],
    ] as const) {
      const args = [
        '--model-name',
        'm',
        '-v',
        '1',
        '--handler',
        'image_classifier',
        '--serialized-file',
        'resnet-152.onnx',
        '--export-path',
        format,
        '--archive-format',
        format,
      ];
      expect((await runCli(args, { cwd: dir })).exitCode, format).toBe(0);
      const again = await runCli(args, { cwd: dir });
      expect(again.exitCode).toBe(1);
      expect(again.stderr).toContain(
        `${join(dir, format, name)} already exists.\nPlease specify --force/-f option to overwrite the model archive output file.`,
      );
      expect((await runCli([...args, '-f'], { cwd: dir })).exitCode).toBe(0);
      const extracted = await extractArchive({ archivePath: join(dir, format, name), destDir: join(dir, 'x', format) });
      expect((await readdir(extracted.modelDir)).sort()).toEqual(['MAR-INF', 'resnet-152.onnx']);
    }
  });

  it('copies a JavaScript --handler module into the archive', async () => {
    await writeFiles(dir, { 'handlers/echo.mjs': 'export function handle(data) { return data; }' });
    const run = await runCli(
      ['--model-name', 'echo', '-v', '1', '--handler', 'handlers/echo.mjs', '--export-path', 'out'],
      { cwd: dir },
    );
    expect(run).toMatchObject({ exitCode: 0, stderr: '' });
    expect((await listArchive(join(dir, 'out/echo.mar'))).entries.map((e) => e.name).sort()).toEqual([
      'MAR-INF/MANIFEST.json',
      'echo.mjs',
    ]);
  });

  it("prints the archiver's own version with -V; -v is the model version", async () => {
    const run = await runCli(['-V'], { cwd: dir });
    expect(run.exitCode).toBe(0);
    expect(run.stdout.trim()).toMatch(/^\d+\.\d+\.\d+/);
  });

  it('draws a progress bar on a terminal and none otherwise', async () => {
    const labelled = [...tutorial, '--extra-files', 'index_to_name.json', '-f'];
    const onTty = await runCli(labelled, { cwd: dir, isTTY: true });
    expect(onTty.exitCode).toBe(0);
    expect(onTty.stderr).toContain('Archiving resnet-152');
    const piped = await runCli(labelled, { cwd: dir });
    expect(piped.stderr).toBe('');
  });
});

describe('model-archiver errors: exit 1, a message saying what to do, nothing written', () => {
  const cases: Array<[string, string[], RegExp]> = [
    ['a bad model name', ['--model-name', 'resnet 152'], /contains special characters[\s\S]*\^\[A-Za-z0-9\]/],
    ['a missing serialized file', ['--serialized-file', 'nope.onnx'], /File does not exist: .*nope\.onnx/],
    ['a missing extra file', ['--extra-files', 'index_to_name.json,gone.txt'], /File does not exist: .*gone\.txt/],
    [
      'a handler that cannot be found',
      ['--handler', 'resnet_handler'],
      /'resnet_handler'[\s\S]*image_classifier, image_segmenter, object_detector, tensor/,
    ],
    [
      'an unknown archive format',
      ['--archive-format', 'rar'],
      /Allowed choices are default, zip-store, tgz, no-archive/,
    ],
  ];
  for (const [label, override, message] of cases) {
    it(`rejects ${label}`, async () => {
      const args = [...tutorial];
      for (let i = 0; i < override.length; i += 2) {
        const at = args.indexOf(override[i]!);
        if (at >= 0) args[at + 1] = override[i + 1]!;
        else args.push(override[i]!, override[i + 1]!);
      }
      const run = await runCli(args, { cwd: dir });
      expect(run.exitCode).toBe(1);
      expect(run.stderr).toMatch(message);
      expect(run.stdout).toBe('');
      expect(existsSync(join(dir, 'model_store'))).toBe(false);
    });
  }

  it('rejects an export path that is a file', async () => {
    await writeFile(join(dir, 'model_store'), 'a file');
    const run = await runCli(tutorial, { cwd: dir });
    expect(run.exitCode).toBe(1);
    expect(run.stderr).toContain(`Given export-path ${join(dir, 'model_store')} is not a directory.`);
  });

  it('names a missing required flag', async () => {
    const run = await runCli(['--model-name', 'm', '--handler', 'tensor'], { cwd: dir });
    expect(run.exitCode).toBe(1);
    expect(run.stderr).toContain("required option '-v, --version <version>' not specified");
  });

  it('exits 2 and writes nothing when the archive would fail validation, printing each problem', async () => {
    await mkdir(join(dir, 'h'));
    await writeFiles(dir, { 'h/bad.mjs': 'export const nothing = 1;', 'model-config.yaml': 'batchSize: lots\n' });
    const run = await runCli(
      ['--model-name', 'bad', '-v', '1', '--handler', 'h/bad.mjs', '-c', 'model-config.yaml', '--export-path', 'out'],
      { cwd: dir },
    );
    expect(run.exitCode).toBe(2);
    expect(run.stderr).toContain('MARINA_ERR_HANDLER_CONTRACT');
    expect(run.stderr).toContain('MARINA_ERR_MODEL_CONFIG_INVALID');
    expect(run.stderr).toContain('nothing was written');
    expect(await readdir(join(dir, 'out'))).toEqual([]);
  });
});

describe('model-archiver checks what it packs', () => {
  /** Runs the archiver expecting a refusal with `code`; the export folder must stay empty (no archive, no temp file). */
  async function refused(args: string[], code: string): Promise<string> {
    const run = await runCli(['--model-name', 'm', '-v', '1', '--export-path', 'out', ...args], { cwd: dir });
    expect(run.exitCode, run.stderr).toBe(2);
    expect(run.stderr).toContain(code);
    expect(run.stdout).toBe('');
    expect(await readdir(join(dir, 'out'))).toEqual([]);
    return run.stderr;
  }

  it('refuses a serialized file that is not ONNX, whatever the handler', async () => {
    await writeFiles(dir, {
      'model.pt': 'PK not really a torch file',
      'h/echo.mjs': 'export function handle(data) { return data; }',
    });
    await refused(['--serialized-file', 'model.pt', '--handler', 'h/echo.mjs'], 'MARINA_ERR_MODEL_LOAD_FAILED');
    await refused(['--serialized-file', 'model.pt', '--handler', 'tensor'], 'MARINA_ERR_MODEL_LOAD_FAILED');
  });

  it('refuses a model whose outputs do not fit the built-in handler (a segmenter under image_classifier)', async () => {
    await writeTinySegmenter({ outputPath: join(dir, 'seg.onnx'), classes: 3, inputSize: 32 });
    const stderr = await refused(
      ['--serialized-file', 'seg.onnx', '--handler', 'image_classifier', '--extra-files', 'index_to_name.json'],
      'MARINA_ERR_HANDLER_SIGNATURE_MISMATCH',
    );
    expect(stderr).toMatch(
      /image_classifier needs a 2-D output \[N,classes\], got 'output' float32\[batch_size,3,32,32\]; for per-pixel classes use image_segmenter/,
    );
    const ok = await runCli(
      [
        '--model-name',
        'seg',
        '-v',
        '1',
        '--export-path',
        'out',
        '--serialized-file',
        'seg.onnx',
        '--handler',
        'image_segmenter',
      ],
      { cwd: dir },
    );
    expect(ok).toMatchObject({ exitCode: 0, stderr: '' });
  });

  it('refuses a built-in handler without --serialized-file, leaving nothing behind', async () => {
    await refused(['--handler', 'image_classifier'], 'MARINA_ERR_ARCHIVE_NO_MODEL');
  });

  it('a refused run with --force keeps the archive that was there', async () => {
    expect((await runCli(tutorial, { cwd: dir })).exitCode).toBe(0);
    const before = await listArchive(join(dir, 'model_store/resnet-152.mar'));
    await writeFile(join(dir, 'resnet-152.onnx'), 'junk');
    const run = await runCli([...tutorial, '-f'], { cwd: dir });
    expect(run.exitCode).toBe(2);
    expect((await listArchive(join(dir, 'model_store/resnet-152.mar'))).entries).toEqual(before.entries);
    expect(await readdir(join(dir, 'model_store'))).toEqual(['resnet-152.mar']);
  });

  it('--skip-checks writes what it is given', async () => {
    await writeFiles(dir, { 'model.pt': 'junk' });
    const run = await runCli(
      [
        '--model-name',
        'junk',
        '-v',
        '1',
        '--export-path',
        'out',
        '--serialized-file',
        'model.pt',
        '--handler',
        'image_classifier',
        '--skip-checks',
      ],
      { cwd: dir },
    );
    expect(run).toMatchObject({ exitCode: 0, stderr: '' });
    expect(existsSync(join(dir, 'out/junk.mar'))).toBe(true);
  });

  it('warns when image_classifier has no index_to_name.json, and when batchSize exceeds a fixed batch dimension, but writes the archive', async () => {
    await writeTinyClassifier({ outputPath: join(dir, 'fixed.onnx'), numClasses: 4, fixedBatch: 1 });
    await writeFiles(dir, { 'model-config.yaml': 'batchSize: 4\n' });
    const run = await runCli(
      [
        '--model-name',
        'fixed',
        '-v',
        '1',
        '--export-path',
        'out',
        '--serialized-file',
        'fixed.onnx',
        '--handler',
        'image_classifier',
        '-c',
        'model-config.yaml',
      ],
      { cwd: dir },
    );
    expect(run.exitCode).toBe(0);
    expect(run.stderr).toMatch(
      /warning: MARINA_ERR_INDEX_TO_NAME_MISSING: handler image_classifier answers with class indices/,
    );
    expect(run.stderr).toMatch(
      /warning: MARINA_ERR_MODEL_BATCH_NOT_DYNAMIC: batchSize is 4 but input 'input' float32\[1,3,32,32\] has a fixed batch dimension of 1/,
    );
    expect(existsSync(join(dir, 'out/fixed.mar'))).toBe(true);
  });
});
