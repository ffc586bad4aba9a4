/**
 * Every error a user can meet has one stable code: with one meaning and one HTTP status across all of
 * Marina's packages, a description that says when it happens, and a row in docs/reference/errors.md,
 * which scripts/docs-gen.ts writes from the registries (this test fails when the page is not what the
 * script writes now: run `npx -y pnpm@10.34.9 docs:gen`).
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { generateReference, referenceDir } from '../scripts/docs-gen.ts';
import { allErrorAliases, errorRegistries } from '../scripts/error-registries.ts';

const allCodes = errorRegistries.flatMap(({ owner, definitions }) =>
  Object.entries(definitions).map(([code, def]) => ({ owner, code, def })),
);

describe('error codes', () => {
  it('are defined by exactly one package, or by several with the same HTTP status', () => {
    const byCode = new Map<string, typeof allCodes>();
    for (const entry of allCodes) byCode.set(entry.code, [...(byCode.get(entry.code) ?? []), entry]);
    const conflicts = [...byCode.entries()]
      .filter(([, entries]) => new Set(entries.map((e) => e.def.statusCode)).size > 1)
      .map(([code, entries]) => `${code}: ${entries.map((e) => `${e.owner}=${e.def.statusCode}`).join(', ')}`);
    expect(conflicts).toEqual([]);
  });

  it('each have a description that says when it happens', () => {
    const undescribed = allCodes.filter(({ def }) => def.description.trim().length < 20).map(({ code }) => code);
    expect(undescribed).toEqual([]);
  });

  it('are all in docs/reference/errors.md, exactly as docs:gen writes it', async () => {
    const page = readFileSync(path.join(referenceDir, 'errors.md'), 'utf8');
    const missing = [...new Set(allCodes.map(({ code }) => code))].filter((code) => !page.includes(`| \`${code}\` |`));
    expect(missing).toEqual([]);
    const generated = (await generateReference(['errors.md'])).get('errors.md');
    expect(page === generated, 'docs/reference/errors.md is out of date: run npx -y pnpm@10.34.9 docs:gen').toBe(true);
  });

  it('keep merged codes working as aliases: each names a defined code, is no code itself, and is in the reference', () => {
    const codes = new Set(allCodes.map(({ code }) => code));
    const page = readFileSync(path.join(referenceDir, 'errors.md'), 'utf8');
    const aliases = allErrorAliases();
    expect(aliases.length).toBeGreaterThan(0);
    for (const { alias, code } of aliases) {
      expect(codes.has(code), `${alias} -> ${code}`).toBe(true);
      expect(codes.has(alias), alias).toBe(false);
      expect(page, alias).toContain(`| \`${alias}\` | \`${code}\` |`);
    }
  });
});
