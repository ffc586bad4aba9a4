import { readFile } from 'node:fs/promises';
import { describe, expect, it } from 'vitest';
import { modelZooErrors } from '../src/index.ts';

describe('model-zoo error codes', () => {
  it('documents every code in the README error table', async () => {
    const readme = await readFile(new URL('../README.md', import.meta.url), 'utf8');
    for (const code of Object.keys(modelZooErrors.definitions)) expect(readme).toContain(`\`${code}\``);
  });
});
