import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { makeTempDir } from '@marina/archive/testing';
import { writeTinyClassifier } from '@marina/model-zoo';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';

const bin = new URL('../bin/model-archiver.js', import.meta.url).pathname;
const run = promisify(execFile);

let dir: string;
let cleanup: () => Promise<void>;
beforeEach(async () => ({ dir, cleanup } = await makeTempDir('marina-bin-test-')));
afterEach(() => cleanup());

describe('the model-archiver bin', () => {
  it('archives and validates through the real executable, with exit codes', { timeout: 30_000 }, async () => {
    await writeTinyClassifier({ outputPath: join(dir, 'm.onnx') });
    const archived = await run(
      bin,
      [
        '--model-name',
        'm',
        '-v',
        '1.0',
        '--handler',
        'image_classifier',
        '--serialized-file',
        'm.onnx',
        '--export-path',
        'store',
      ],
      { cwd: dir },
    );
    expect(archived.stdout).toContain(join(dir, 'store/m.mar'));
    // No index_to_name.json: archived, with the warning that answers will name classes by index.
    expect(archived.stderr).toMatch(/^warning: MARINA_ERR_INDEX_TO_NAME_MISSING: /);
    const validated = await run(bin, ['validate', 'store/m.mar', '--json'], { cwd: dir });
    expect(JSON.parse(validated.stdout)).toMatchObject({ isValid: true, format: 'zip' });
    await expect(run(bin, ['validate', 'store/m.mar', '--batch-size', 'x'], { cwd: dir })).rejects.toMatchObject({
      code: 1,
    });
    await expect(
      run(
        bin,
        [
          '--model-name',
          'm',
          '-v',
          '1.0',
          '--handler',
          'image_classifier',
          '--serialized-file',
          'm.onnx',
          '--export-path',
          'store',
        ],
        { cwd: dir },
      ),
    ).rejects.toMatchObject({ code: 1, stderr: expect.stringContaining('already exists') });
  });
});
