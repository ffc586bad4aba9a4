import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { makeTempDir, manifestText, writeFiles, zipFolder } from '@marina/archive/testing';
import { writeIndexToName, writeTinyClassifier } from '@marina/model-zoo';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { runCli } from './run-cli.ts';

let dir: string;
let cleanup: () => Promise<void>;
beforeEach(async () => {
  ({ dir, cleanup } = await makeTempDir('marina-cli-test-'));
  await writeFiles(join(dir, 'src'), { 'MAR-INF/MANIFEST.json': manifestText() });
  await writeTinyClassifier({ outputPath: join(dir, 'src/model.onnx'), numClasses: 3, fixedBatch: 1 });
  await writeIndexToName(join(dir, 'src/index_to_name.json'), ['a', 'b', 'c']);
  await zipFolder(join(dir, 'src'), join(dir, 'tiny.mar'));
});
afterEach(() => cleanup());

describe('model-archiver validate', () => {
  it('says a good archive will serve and exits 0', async () => {
    const run = await runCli(['validate', 'tiny.mar'], { cwd: dir });
    expect(run.exitCode).toBe(0);
    expect(run.stdout).toContain('will serve');
    expect(run.stdout).toContain('inputs: input float32[1,3,32,32]');
  });

  it('prints a JSON report with --json; --batch-size above a fixed batch dimension is the warning serve logs, not a refusal', async () => {
    const run = await runCli(['validate', 'tiny.mar', '--json', '--batch-size', '8'], { cwd: dir });
    expect(run.exitCode).toBe(0);
    const report = JSON.parse(run.stdout);
    expect(report).toMatchObject({
      isValid: true,
      format: 'zip',
      problems: [{ code: 'MARINA_ERR_MODEL_BATCH_NOT_DYNAMIC', severity: 'warning' }],
    });
    await writeFile(join(dir, 'src/index_to_name.json'), '{}');
    await zipFolder(join(dir, 'src'), join(dir, 'bad-names.mar'));
    const bad = await runCli(['validate', 'bad-names.mar', '--json'], { cwd: dir });
    expect(bad.exitCode).toBe(2);
    expect(JSON.parse(bad.stdout)).toMatchObject({
      isValid: false,
      problems: [{ code: 'MARINA_ERR_INDEX_TO_NAME_INVALID', severity: 'error' }],
    });
  });

  it('lists every problem with its code in the text report', async () => {
    await writeFile(join(dir, 'src/model.onnx'), 'garbage');
    await writeFile(join(dir, 'src/index_to_name.json'), '[]');
    await zipFolder(join(dir, 'src'), join(dir, 'bad.mar'), [{ name: '../escape.txt', data: 'x' }]);
    const run = await runCli(['validate', 'bad.mar'], { cwd: dir });
    expect(run.exitCode).toBe(2);
    for (const code of [
      'MARINA_ERR_ARCHIVE_PATH_ESCAPE',
      'MARINA_ERR_INDEX_TO_NAME_INVALID',
      'MARINA_ERR_MODEL_LOAD_FAILED',
    ])
      expect(run.stdout).toContain(code);
    expect(run.stdout).toContain('will NOT serve (3 errors)');
    const cheap = await runCli(['validate', 'bad.mar', '--no-model-load'], { cwd: dir });
    expect(cheap.stdout).not.toContain('MARINA_ERR_MODEL_LOAD_FAILED');
  });

  it('exits 1 for a path that does not exist', async () => {
    const run = await runCli(['validate', 'missing.mar'], { cwd: dir });
    expect(run.exitCode).toBe(1);
    expect(run.stdout).toContain('MARINA_ERR_ARCHIVE_NOT_FOUND');
  });

  it('rejects a --batch-size that is not a positive whole number', async () => {
    const run = await runCli(['validate', 'tiny.mar', '--batch-size', '0'], { cwd: dir });
    expect(run.exitCode).toBe(1);
    expect(run.stderr).toContain('not a whole number of 1 or more');
  });
});
