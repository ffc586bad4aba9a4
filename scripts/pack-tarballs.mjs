#!/usr/bin/env node
// Makes Marina's installable tarballs. Run: pnpm tarballs [destination]   (default: ./packed)
//
// 1. `pnpm -r pack` packs every package that is published (each package's prepack builds its
//    dist/ with tsc; workspace:* versions become real ones).
// 2. The packages are bundled into the one tarball that users install, marina-cli-<version>.tgz:
//    @marina/cli with the other @marina/* packages inside it (bundleDependencies) and their
//    third-party dependencies as its own. `npm install -g` gives every top-level package a tree of
//    its own, so installing the seven tarballs side by side would put three copies of
//    onnxruntime-node and sharp on disk (1.1 GB) and two onnxruntime instances in one server.
//    One tarball gives one tree, one copy of each, and no @marina/* lookups on the npm registry.
// 3. marina-torchserve-compat-<version>.tgz stays separate and opt-in (`torchserve`,
//    `torch-model-archiver`); it finds @marina/cli beside it in the global folder.
// 4. marina-client-<version>.tgz is the Node client library (@marina/client, no dependencies) for
//    pipeline jobs: installed into the job's project (`npm install ./marina-client-<version>.tgz`),
//    not globally.
//
// Prints the tarballs, one a line. Install: npm install -g <marina-cli.tgz> [<compat.tgz>]
import { execFileSync } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

const BUNDLED = ['errors', 'handlers', 'quantize', 'archive', 'model-archiver', 'model-zoo', 'serve'];
const destination = resolve(process.argv[2] ?? 'packed');
const staging = mkdtempSync(join(tmpdir(), 'marina-pack-'));

function run(command, args, cwd) {
  execFileSync(command, args, { cwd, stdio: ['ignore', 'ignore', 'inherit'] });
}

try {
  // pnpm's own path when run as a pnpm script (npm_execpath), else pnpm from the PATH.
  const pnpm = process.env.npm_execpath ? [process.execPath, process.env.npm_execpath] : ['pnpm'];
  const filters = [...BUNDLED, 'cli', 'torchserve-compat', 'client'].flatMap((name) => ['--filter', `@marina/${name}`]);
  run(pnpm[0], [...pnpm.slice(1), '-r', ...filters, 'pack', '--pack-destination', staging]);

  const unpack = (name) => {
    const [tarball] = readdirSync(staging).filter(
      (file) => file.startsWith(`marina-${name}-`) && file.endsWith('.tgz'),
    );
    if (!tarball) throw new Error(`pnpm pack made no tarball for @marina/${name}`);
    const dir = join(staging, name);
    mkdirSync(dir);
    run('tar', ['-xzf', join(staging, tarball), '-C', dir, '--strip-components=1']);
    return dir;
  };

  const cliDir = unpack('cli');
  const cli = JSON.parse(readFileSync(join(cliDir, 'package.json'), 'utf8'));
  const dependencies = {};
  for (const name of BUNDLED) {
    const dir = unpack(name);
    const manifest = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8'));
    for (const [dependency, range] of Object.entries(manifest.dependencies ?? {})) {
      if (dependency.startsWith('@marina/')) continue;
      if (dependencies[dependency] !== undefined && dependencies[dependency] !== range) {
        throw new Error(
          `${dependency} is wanted as ${dependencies[dependency]} and as ${range} (@marina/${name}): make the ranges the same (pnpm-workspace.yaml's catalog)`,
        );
      }
      dependencies[dependency] = range;
    }
    // npm counts every dependency of a bundled package as part of the bundle (and then installs
    // nothing for it), so the bundled copies declare none: @marina/cli declares them all, and
    // Node finds them in its node_modules, one folder up from the bundled packages.
    delete manifest.dependencies;
    writeFileSync(join(dir, 'package.json'), `${JSON.stringify(manifest, null, 2)}\n`);
    cpSync(dir, join(cliDir, 'node_modules', '@marina', name), { recursive: true });
  }
  cli.dependencies = {
    ...Object.fromEntries(BUNDLED.map((name) => [`@marina/${name}`, cli.version])),
    ...dependencies,
  };
  cli.bundleDependencies = BUNDLED.map((name) => `@marina/${name}`);
  writeFileSync(join(cliDir, 'package.json'), `${JSON.stringify(cli, null, 2)}\n`);
  const packed = execFileSync('npm', ['pack', '--silent', '--pack-destination', staging], {
    cwd: cliDir,
    encoding: 'utf8',
  })
    .trim()
    .split('\n')
    .pop();

  mkdirSync(destination, { recursive: true });
  const outputs = [
    packed,
    ...['torchserve-compat', 'client'].map((name) =>
      readdirSync(staging).find((file) => file.startsWith(`marina-${name}-`)),
    ),
  ];
  for (const file of outputs) renameSync(join(staging, file), join(destination, file));
  process.stdout.write(`${outputs.map((file) => join(destination, file)).join('\n')}\n`);
} finally {
  rmSync(staging, { recursive: true, force: true });
}
