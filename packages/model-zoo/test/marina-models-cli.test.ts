import { readdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import * as ort from 'onnxruntime-node';
import { describe, expect, it } from 'vitest';
import { runCli, type CliOutput } from '../src/index.ts';
import { useTempDir } from './helpers.ts';

function collector(): CliOutput & { stdout: () => string; stderr: () => string } {
  let out = '';
  let err = '';
  return { out: (t) => (out += t), err: (t) => (err += t), stdout: () => out, stderr: () => err };
}

async function cli(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const io = collector();
  const code = await runCli(args, io);
  return { code, stdout: io.stdout(), stderr: io.stderr() };
}

describe('marina-models generate', () => {
  it('writes the models, labels and sample image, then skips them on a second run with the same seed', async () => {
    const dir = await useTempDir('cli');
    const first = await cli(['generate', '--out', dir, '--models', 'tiny,tiny-tensor']);
    expect(first).toMatchObject({ code: 0, stderr: '' });
    expect((await readdir(dir)).sort()).toEqual(['index_to_name.json', 'kitten.jpg', 'tiny-tensor.onnx', 'tiny.onnx']);
    expect(first.stdout).toMatch(/wrote +.*tiny\.onnx/);
    expect(first.stdout).toMatch(/done: 4 written, 0 skipped/);

    const second = await cli(['generate', '--out', dir, '--models', 'tiny,tiny-tensor']);
    expect(second.stdout).toMatch(/done: 0 written, 4 skipped/);

    const reseeded = await cli(['generate', '--out', dir, '--models', 'tiny', '--seed', '7']);
    expect(reseeded.stdout).toMatch(/wrote +.*tiny\.onnx/);

    const forced = await cli(['generate', '--out', dir, '--models', 'tiny', '--seed', '7', '--force']);
    expect(forced.stdout).toMatch(/done: 3 written, 0 skipped/);
  });

  it('writes the mixed-types model the README serves as `mixed`, with its signature, and skips it on a second run', async () => {
    const dir = await useTempDir('cli');
    const first = await cli(['generate', '--out', dir, '--models', 'mixed-types']);
    expect(first).toMatchObject({ code: 0, stderr: '' });
    const session = await ort.InferenceSession.create(join(dir, 'mixed-types.onnx'));
    try {
      expect(session.inputNames).toEqual(['x', 'scale', 'ids', 'mask', 'half', 'small', 'wide']);
      expect(session.outputNames).toEqual(['y', 'ids_out', 'mask_out', 'half_out', 'small_out', 'wide_out']);
    } finally {
      await session.release();
    }
    const second = await cli(['generate', '--out', dir, '--models', 'mixed-types']);
    expect(second.stdout).toMatch(/done: 0 written, 3 skipped/);
  });

  it('writes ResNet weights to a .onnx.data file with --external-data', async () => {
    const dir = await useTempDir('cli-external');
    const result = await cli(['generate', '--out', dir, '--models', 'resnet-18', '--external-data']);
    expect(result.code).toBe(0);
    expect(await readdir(dir)).toEqual(expect.arrayContaining(['resnet-18.onnx', 'resnet-18.onnx.data']));
  });

  it('refuses to overwrite a model file it did not write unless --force', async () => {
    const dir = await useTempDir('cli-foreign');
    await writeFile(join(dir, 'tiny.onnx'), 'not a marina model');
    const refused = await cli(['generate', '--out', dir, '--models', 'tiny']);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain('MARINA_ERR_MODEL_ZOO_OUTPUT_EXISTS');
    const forced = await cli(['generate', '--out', dir, '--models', 'tiny', '--force']);
    expect(forced.code).toBe(0);
  });

  it('exits 1 with a coded error for an unknown model, listing the choices', async () => {
    const result = await cli(['generate', '--out', '/tmp/unused', '--models', 'resnet-34']);
    expect(result.code).toBe(1);
    expect(result.stderr).toContain('MARINA_ERR_MODEL_ZOO_UNKNOWN_MODEL');
    expect(result.stderr).toContain('resnet-18, resnet-50, resnet-152, tiny');
  });

  it('rejects a non-numeric seed as a usage error', async () => {
    const result = await cli(['generate', '--out', '/tmp/unused', '--seed', 'abc']);
    expect(result.code).not.toBe(0);
    expect(result.stderr).toContain("'abc' is not an integer");
  });
});
