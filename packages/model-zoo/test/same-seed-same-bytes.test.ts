import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { readModelMetadata, writeResnet, writeTinyClassifier } from '../src/index.ts';
import { useTempDir } from './helpers.ts';

describe('seeded weights', () => {
  // Writes three 47 MB models: the limit only stops a hang, it measures nothing (2 shared cores can take over 5 s).
  it('writes byte-identical ResNet-18 files for the same seed and different ones for another seed', {
    timeout: 120_000,
  }, async () => {
    const dir = await useTempDir('seed');
    const paths = ['a', 'b', 'c'].map((n) => join(dir, `${n}.onnx`));
    await writeResnet({ depth: 18, outputPath: paths[0]!, seed: 7 });
    await writeResnet({ depth: 18, outputPath: paths[1]!, seed: 7 });
    await writeResnet({ depth: 18, outputPath: paths[2]!, seed: 8 });
    const [a, b, c] = await Promise.all(paths.map((p) => readFile(p)));
    expect(a!.equals(b!)).toBe(true);
    expect(a!.length).toBe(c!.length);
    expect(a!.equals(c!)).toBe(false);
  });

  it('records the seed in the model metadata, readable without parsing the weights', async () => {
    const dir = await useTempDir('metadata');
    const outputPath = join(dir, 'tiny.onnx');
    await writeTinyClassifier({ outputPath, seed: 1234 });
    expect(await readModelMetadata(outputPath)).toMatchObject({
      'marina.model': 'tiny-classifier',
      'marina.seed': '1234',
    });
    expect(await readModelMetadata(join(dir, 'missing.onnx'))).toEqual({});
  });
});
