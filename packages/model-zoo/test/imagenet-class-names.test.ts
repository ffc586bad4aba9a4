import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { loadImagenetClassNames, parseImagenetClassesSource, writeIndexToName } from '../src/index.ts';
import { useTempDir } from './helpers.ts';

describe('ImageNet class names', () => {
  it('loads 1000 names from the mobilenet package, tench first and toilet tissue last', async () => {
    const names = await loadImagenetClassNames();
    expect(names).toHaveLength(1000);
    expect(names[0]).toBe('tench, Tinca tinca');
    expect(names[607]).toBe("jack-o'-lantern");
    expect(names[999]).toBe('toilet tissue, toilet paper, bathroom tissue');
  });

  it('joins concatenated and escaped string literals without evaluating the source', () => {
    const source = `exports.X = {\n 0: 'a, b',\n 1: 'long ' +\n   'name',\n 2: "it\\'s",\n};`;
    expect(parseImagenetClassesSource(source)).toEqual(['a, b', 'long name', "it's"]);
  });

  it("writes TorchServe's index_to_name.json with the first synonym as the label", async () => {
    const dir = await useTempDir('labels');
    const path = join(dir, 'index_to_name.json');
    await writeIndexToName(path, await loadImagenetClassNames());
    const mapping = JSON.parse(await readFile(path, 'utf8')) as Record<string, string>;
    expect(Object.keys(mapping)).toHaveLength(1000);
    expect(mapping['0']).toBe('tench');
    expect(mapping['2']).toBe('great white shark');
    expect(mapping['999']).toBe('toilet tissue');
  });
});
