import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { configErrors } from '../src/config/config-errors.ts';

const configDoc = readFileSync(new URL('../CONFIG.md', import.meta.url), 'utf8');

describe('configuration and launcher error codes', () => {
  const codes = Object.keys(configErrors.definitions);

  it.each(codes)('documents %s in CONFIG.md', (code) => {
    expect(configDoc).toContain(`| \`${code}\` |`);
  });

  it('documents no code that does not exist', () => {
    const documented = [...configDoc.matchAll(/^\| `(MARINA_ERR_[A-Z0-9_]+)` \|/gm)].map((match) => match[1]);
    expect(documented.sort()).toEqual([...codes].sort());
  });
});
