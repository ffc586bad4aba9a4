import { describe, expect, it } from 'vitest';
import { readFile } from 'node:fs/promises';
import { serveErrors } from '../src/errors.ts';
import { handlerErrors } from '@marina/handlers';

describe('error codes', () => {
  it('are unique across serve and the handlers, and each is documented in ERRORS.md with its status', async () => {
    const serve = Object.keys(serveErrors.definitions);
    const handlers = Object.keys(handlerErrors.definitions);
    expect(new Set([...serve, ...handlers]).size).toBe(serve.length + handlers.length);
    const doc = await readFile(new URL('../ERRORS.md', import.meta.url), 'utf8');
    const missing = [];
    for (const [code, def] of [
      ...Object.entries(serveErrors.definitions),
      ...Object.entries(handlerErrors.definitions),
    ]) {
      const row = doc.split('\n').find((line) => line.startsWith(`| \`${code}\` |`));
      if (!row?.includes(`| ${def.statusCode} |`)) missing.push(`${code} (${def.statusCode})`);
    }
    expect(missing).toEqual([]);
  });
});
