#!/usr/bin/env node
// Builds one workspace package for publishing: tsc emits JavaScript and declarations from src/
// into dist/ (tsconfig.build.json), then the files tsc does not emit are copied beside them:
// plain .mjs modules (worker bootstraps, loader hooks) and, for packages that read them, the
// JSON Schemas of the repository's schemas/ folder (into dist/schemas/).
// Run from the package's folder: `node ../../scripts/build-package.mjs [--schemas a.json,b.json]`.
import { execFileSync } from 'node:child_process';
import { cpSync, mkdirSync, readdirSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const packageDir = process.cwd();
const repoRoot = dirname(dirname(fileURLToPath(import.meta.url)));
const srcDir = join(packageDir, 'src');
const distDir = join(packageDir, 'dist');

rmSync(distDir, { recursive: true, force: true });
const tsc = createRequire(join(packageDir, 'package.json')).resolve('typescript/bin/tsc');
execFileSync(process.execPath, [tsc, '-p', 'tsconfig.build.json'], { cwd: packageDir, stdio: 'inherit' });

function copyPlainModules(dir) {
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) copyPlainModules(path);
    else if (entry.name.endsWith('.mjs')) {
      const target = join(distDir, relative(srcDir, path));
      mkdirSync(dirname(target), { recursive: true });
      cpSync(path, target);
    }
  }
}
copyPlainModules(srcDir);

const schemasFlag = process.argv.indexOf('--schemas');
if (schemasFlag !== -1) {
  mkdirSync(join(distDir, 'schemas'), { recursive: true });
  for (const name of (process.argv[schemasFlag + 1] ?? '').split(',').filter(Boolean)) {
    cpSync(join(repoRoot, 'schemas', name), join(distDir, 'schemas', name));
  }
}
