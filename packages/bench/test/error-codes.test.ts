import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { benchErrors } from '../src/errors.ts';

describe('bench error codes', () => {
  it('documents every code in the README', () => {
    const readme = readFileSync(new URL('../README.md', import.meta.url), 'utf8');
    for (const code of Object.keys(benchErrors.definitions)) expect(readme, code).toContain(`\`${code}\``);
  });
});
