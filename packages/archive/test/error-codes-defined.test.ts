import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { archiveErrors } from '../src/index.ts';

const root = new URL('..', import.meta.url).pathname;

async function codesUsedIn(files: string[]): Promise<Set<string>> {
  const texts = await Promise.all(files.map((file) => readFile(file, 'utf8')));
  return new Set(texts.join('\n').match(/MARINA_ERR_[A-Z0-9_]+/g));
}

describe('archive error codes', () => {
  it('defines every MARINA_ERR_ code the archive code uses or the validator passes on from the signature checks', async () => {
    const src = join(root, 'src');
    const files = (await readdir(src)).filter((name) => /\.(ts|mjs)$/.test(name)).map((name) => join(src, name));
    files.push(join(root, '../handlers/src/signature-checks.ts'));
    const defined = Object.keys(archiveErrors.definitions);
    expect([...(await codesUsedIn(files))].filter((code) => !defined.includes(code))).toEqual([]);
  });
});
