/**
 * The reference pages under docs/reference are generated from the code (scripts/docs-gen.ts): each
 * must be exactly what the script writes now, so a new config key, flag, route, gRPC method or metric
 * cannot be left out. When this fails, run `npx -y pnpm@10.34.9 docs:gen` and commit the pages.
 * (errors.md is checked by test/error-codes.test.ts.)
 */
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { generateReference, referenceDir, referencePages } from '../scripts/docs-gen.ts';

const files = [...referencePages.keys()].filter((file) => file !== 'errors.md');

describe('docs/reference', () => {
  it.each(files)('%s is what docs:gen writes now', async (file) => {
    const generated = (await generateReference([file])).get(file)!;
    const current = readFileSync(path.join(referenceDir, file), 'utf8');
    // On a difference, show the first line that differs rather than two whole pages.
    const generatedLines = generated.split('\n');
    const currentLines = current.split('\n');
    const length = Math.max(generatedLines.length, currentLines.length);
    const line = Array.from({ length }, (_, i) => i).find((i) => generatedLines[i] !== currentLines[i]);
    const difference =
      line === undefined
        ? 'none'
        : `line ${line + 1}: ${currentLines[line] ?? '(none)'} -> ${generatedLines[line] ?? '(none)'}`;
    expect(difference, `docs/reference/${file} is out of date: run npx -y pnpm@10.34.9 docs:gen`).toBe('none');
  });

  it('has a generator for every page in docs/reference, and a page for every generator', () => {
    expect(readdirSync(referenceDir).sort()).toEqual([...referencePages.keys()].sort());
  });
});
