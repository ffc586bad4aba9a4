/**
 * Every workspace package whose `test` script runs vitest has a vitest.config.ts with the shared
 * settings: the temp-folder guard, and a 120 s hang guard for tests and hooks (vitest's 5 s / 10 s
 * defaults fail tests that do real work on a loaded 2-core CI machine).
 * And the one type check `pnpm test` runs (tsconfig.check.json, every package in one program)
 * covers every folder each package's own tsconfig.json includes.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { describe, expect, it } from 'vitest';
import { repoRoot } from './helpers.ts';

/** The workspace's package folders, from pnpm-workspace.yaml's `packages:` list (plain paths and `dir/*`). */
function workspaceFolders(): string[] {
  const yaml = readFileSync(path.join(repoRoot, 'pnpm-workspace.yaml'), 'utf8');
  const block = /^packages:\n((?:\s+-\s+.+\n)+)/m.exec(yaml);
  if (!block) throw new Error('pnpm-workspace.yaml has no packages: list');
  const globs = block[1]!
    .split('\n')
    .map((line) => line.replace(/^\s+-\s+/, '').trim())
    .filter(Boolean);
  return globs.flatMap((glob) => {
    if (!glob.endsWith('/*')) return [glob];
    const parent = glob.slice(0, -2);
    return readdirSync(path.join(repoRoot, parent), { withFileTypes: true })
      .filter((entry) => entry.isDirectory() && existsSync(path.join(repoRoot, parent, entry.name, 'package.json')))
      .map((entry) => `${parent}/${entry.name}`);
  });
}

const vitestPackages = workspaceFolders().filter((folder) => {
  const manifest = JSON.parse(readFileSync(path.join(repoRoot, folder, 'package.json'), 'utf8')) as {
    scripts?: Record<string, string>;
  };
  return /\bvitest\b/.test(manifest.scripts?.test ?? '');
});

describe('vitest configuration of every package', () => {
  it('finds the packages that test with vitest', () => {
    expect(vitestPackages).toEqual(
      expect.arrayContaining(['packages/serve', 'packages/archive', 'packages/client', 'test']),
    );
  });

  it.each(vitestPackages)(
    '%s: vitest.config.ts has the temp-folder guard and 120 s test and hook timeouts',
    async (folder) => {
      const configPath = path.join(repoRoot, folder, 'vitest.config.ts');
      expect(existsSync(configPath), `${folder} has no vitest.config.ts`).toBe(true);
      const config = (
        (await import(pathToFileURL(configPath).href)) as {
          default: { test?: { testTimeout?: number; hookTimeout?: number; globalSetup?: string[] } };
        }
      ).default;
      expect(config.test?.testTimeout).toBe(120_000);
      expect(config.test?.hookTimeout).toBe(120_000);
      const setups = (config.test?.globalSetup ?? []).map((entry) => path.resolve(repoRoot, folder, entry));
      expect(setups).toContain(path.join(repoRoot, 'scripts', 'vitest-temp-guard.ts'));
    },
  );
});

/** `pattern` (a tsconfig include: `*` is one path segment) as a regular expression over '/'-joined paths. */
function includePattern(pattern: string): RegExp {
  const escaped = pattern
    .replace(/\/+$/, '')
    .split('*')
    .map((part) => part.replace(/[.+?^${}()|[\]\\]/g, '\\$&'))
    .join('[^/]*');
  return new RegExp(`^${escaped}(/.*)?$`);
}

describe('the type check pnpm test runs', () => {
  const check = JSON.parse(readFileSync(path.join(repoRoot, 'tsconfig.check.json'), 'utf8')) as {
    extends: string;
    include: string[];
  };
  const patterns = check.include.map(includePattern);
  const folders = workspaceFolders().filter((folder) => existsSync(path.join(repoRoot, folder, 'tsconfig.json')));

  it('runs first in the root test script, with the root compiler options', () => {
    const manifest = JSON.parse(readFileSync(path.join(repoRoot, 'package.json'), 'utf8')) as {
      scripts: Record<string, string>;
    };
    expect(manifest.scripts.test).toMatch(/^tsc -p tsconfig\.check\.json && /);
    expect(check.extends).toBe('./tsconfig.json');
    expect(folders).toEqual(expect.arrayContaining(['packages/serve', 'packages/bench', 'test']));
  });

  it.each(folders)('%s: every folder and file its tsconfig.json includes is in tsconfig.check.json', (folder) => {
    const own = JSON.parse(readFileSync(path.join(repoRoot, folder, 'tsconfig.json'), 'utf8')) as {
      include?: string[];
    };
    expect(own.include?.length, `${folder}/tsconfig.json has no include list`).toBeGreaterThan(0);
    for (const entry of own.include!) {
      const included = path.posix.normalize(`${folder}/${entry}`).replace(/\/$/, '');
      expect(
        patterns.some((p) => p.test(included)),
        `${included} (from ${folder}/tsconfig.json) is not in tsconfig.check.json's include`,
      ).toBe(true);
    }
  });
});
