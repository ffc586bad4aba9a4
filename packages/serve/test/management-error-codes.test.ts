import { readFile } from 'node:fs/promises';
import { describe, expect, it } from 'vitest';
import { authErrors } from '../src/auth/auth-errors.ts';
import { downloadErrors } from '../src/model-download/download-errors.ts';
import { snapshotErrors } from '../src/snapshot/snapshot-errors.ts';
import { managementErrors } from '../src/routes/management-errors.ts';
import { trafficErrors } from '../src/registry/traffic-policy.ts';

const registries = [authErrors, downloadErrors, snapshotErrors, managementErrors, trafficErrors];

describe('operator-facing error codes', () => {
  it('are unique across the modules', () => {
    const codes = registries.flatMap((r) => Object.keys(r.definitions));
    expect(new Set(codes).size).toBe(codes.length);
  });

  it('are each documented in ERRORS-OPS.md with their status', async () => {
    const doc = await readFile(new URL('../ERRORS-OPS.md', import.meta.url), 'utf8');
    for (const registry of registries) {
      for (const [code, definition] of Object.entries(registry.definitions)) {
        expect(doc, code).toContain(`| \`${code}\` | ${definition.statusCode} |`);
      }
    }
  });
});
