/**
 * Every error a user can meet has one stable code: unique across all of Marina's packages,
 * with one meaning and one HTTP status, and listed in the README's error table.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { allErrorAliases, errorRegistries } from '../scripts/error-registries.ts';
import { repoRoot } from './helpers.ts';

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

  it('are all listed in the README', () => {
    const readme = readFileSync(path.join(repoRoot, 'README.md'), 'utf8');
    const missing = [...new Set(allCodes.map(({ code }) => code))].filter((code) => !readme.includes(`\`${code}\``));
    expect(missing).toEqual([]);
  });

  it('keep merged codes working as aliases: each names a defined code, is no code itself, and is listed in the README', () => {
    const codes = new Set(allCodes.map(({ code }) => code));
    const readme = readFileSync(path.join(repoRoot, 'README.md'), 'utf8');
    const aliases = allErrorAliases();
    expect(aliases.length).toBeGreaterThan(0);
    for (const { alias, code } of aliases) {
      expect(codes.has(code), `${alias} -> ${code}`).toBe(true);
      expect(codes.has(alias), alias).toBe(false);
      expect(readme, alias).toContain(`| \`${alias}\` |`);
    }
  });
});
