/**
 * Installable Marina, as on a machine that never saw this repository: `pnpm tarballs` packs the
 * packages (pnpm pack; each prepack builds dist/ with tsc), `npm install -g --prefix <temp>`
 * installs the tarballs (their third-party dependencies come from the npm registry, or npm's
 * cache), and the tutorial flow runs from the installed bins alone, found on PATH, in a folder
 * outside the repository: marina-models generate, model-archiver, model-archiver validate,
 * serve --start with token authorization on, a prediction, serve --stop. Also checks that the
 * installed code is compiled JavaScript with no TypeScript loader, and the opt-in TorchServe names;
 * the installed server answers gRPC (OIP) with the .proto files it shipped; the client library's
 * own tarball, installed into a project, classifies an image through the installed server.
 * The Dockerfile runs the same install command.
 */
import { execFile } from 'node:child_process';
import { existsSync, readFileSync, readdirSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort, makeTempDir, repoRoot, runCommand, type RunResult } from './helpers.ts';

const execFileAsync = promisify(execFile);

let root: string;
let prefix: string;
let work: string;
let env: NodeJS.ProcessEnv;
let clientTarball: string;

/** Runs a command found on the test's PATH (the temporary prefix's bin first), never rejecting. */
function run(
  command: string,
  args: string[],
  options: { cwd?: string; env?: NodeJS.ProcessEnv } = {},
): Promise<RunResult> {
  return runCommand(command, args, { cwd: options.cwd ?? work, env: options.env ?? env });
}

/** pnpm as the test runs under it (`pnpm test` sets npm_execpath), else the version package.json pins, through npx. */
function pnpmCommand(): [string, string[]] {
  const execPath = process.env.npm_execpath;
  if (execPath && /pnpm/.test(execPath)) return [process.execPath, [execPath]];
  const { packageManager } = JSON.parse(readFileSync(path.join(repoRoot, 'package.json'), 'utf8')) as {
    packageManager: string;
  };
  return ['npx', ['-y', packageManager]];
}

beforeAll(async () => {
  root = makeTempDir('packaging');
  prefix = path.join(root, 'prefix');
  work = path.join(root, 'work');
  const packed = path.join(root, 'packed');
  const [pnpm, pnpmArgs] = pnpmCommand();
  const { stdout } = await execFileAsync(pnpm, [...pnpmArgs, 'run', '--silent', 'tarballs', packed], {
    cwd: repoRoot,
    maxBuffer: 16 << 20,
  });
  const tarballs = stdout
    .trim()
    .split('\n')
    .filter((line) => line.endsWith('.tgz'));
  expect(tarballs.map((file) => path.basename(file)).sort()).toEqual([
    'marina-cli-0.1.0.tgz',
    'marina-client-0.1.0.tgz',
    'marina-torchserve-compat-0.1.0.tgz',
  ]);
  clientTarball = tarballs.find((file) => path.basename(file).startsWith('marina-client-'))!;
  const globalTarballs = tarballs.filter((file) => file !== clientTarball);

  // The README's install command. ONNXRUNTIME_NODE_INSTALL=skip: onnxruntime-node's install script
  // fetches GPU files from outside the npm registry; the CPU binary ships inside the package.
  await execFileAsync('npm', ['install', '-g', '--prefix', prefix, '--no-audit', '--no-fund', ...globalTarballs], {
    cwd: root,
    env: { ...process.env, ONNXRUNTIME_NODE_INSTALL: 'skip' },
    maxBuffer: 16 << 20,
  });
  await execFileAsync('mkdir', [work]);
  // Only the installed bins and node: the repository's node_modules/.bin is not on this PATH.
  env = {
    HOME: process.env.HOME,
    PATH: `${path.join(prefix, 'bin')}:${path.dirname(process.execPath)}:/usr/bin:/bin`,
    TMPDIR: work,
  };
}, 600_000);

afterAll(async () => {
  if (work && existsSync(work)) await run('serve', ['--stop']);
  if (root) rmSync(root, { recursive: true, force: true });
}, 120_000);

describe('npm install -g of the packed tarballs', () => {
  it('puts serve, model-archiver, marina-models and the opt-in TorchServe names on PATH, with --help', {
    timeout: 120_000,
  }, async () => {
    for (const bin of [
      'serve',
      'marina-serve',
      'model-archiver',
      'marina-models',
      'torchserve',
      'torch-model-archiver',
    ]) {
      expect(realpathSync(path.join(prefix, 'bin', bin)).startsWith(realpathSync(prefix)), bin).toBe(true);
      const help = await run(bin, ['--help']);
      expect(help.code, `${bin} --help: ${help.stderr}`).toBe(0);
      expect(help.stdout).toMatch(/^Usage: /);
    }
    expect((await run('serve', ['--version'])).stdout).toBe('Marina Version is 0.1.0\n');
    expect((await run('torchserve', ['--version'])).stdout).toBe('Marina Version is 0.1.0\n');
  });

  it('installs compiled JavaScript only: no sources, no TypeScript loader, one copy of onnxruntime-node', () => {
    const modules = path.join(prefix, 'lib', 'node_modules', '@marina', 'cli', 'node_modules');
    for (const name of ['errors', 'handlers', 'quantize', 'archive', 'model-archiver', 'model-zoo', 'serve']) {
      const dir = path.join(modules, '@marina', name);
      expect(existsSync(path.join(dir, 'dist', 'index.js')), name).toBe(true);
      expect(existsSync(path.join(dir, 'dist', 'index.d.ts')), name).toBe(true);
      expect(existsSync(path.join(dir, 'src')), `${name} ships no src/`).toBe(false);
    }
    expect(existsSync(path.join(modules, '@marina', 'serve', 'dist', 'workers', 'worker-bootstrap.mjs'))).toBe(true);
    // The gRPC services' .proto files, which the server reads at start-up (dist/protocols/../../protos).
    for (const proto of [
      'grpc_predict_v2.proto',
      'open_inference_grpc.proto',
      'inference.proto',
      'management.proto',
      'model-runtime.proto',
      'marina_residency.proto',
      'google/rpc/status.proto',
    ]) {
      expect(existsSync(path.join(modules, '@marina', 'serve', 'protos', proto)), proto).toBe(true);
    }
    expect(existsSync(path.join(modules, 'tsx'))).toBe(false);
    expect(existsSync(path.join(modules, 'typescript'))).toBe(false);
    expect(readdirSync(path.join(prefix, 'lib', 'node_modules')).sort()).toEqual(['@marina']);
    expect(readdirSync(path.join(prefix, 'lib', 'node_modules', '@marina')).sort()).toEqual([
      'cli',
      'torchserve-compat',
    ]);
  });

  it('runs the tutorial flow from the installed bins: generate, archive, validate, serve with token auth, predict, stop', {
    timeout: 180_000,
  }, async () => {
    const generated = await run('marina-models', ['generate', '--out', 'generated', '--models', 'tiny']);
    expect(generated.code, generated.stderr).toBe(0);
    const archived = await run('torch-model-archiver', [
      '--model-name',
      'tiny',
      '--serialized-file',
      'generated/tiny.onnx',
      '--handler',
      'image_classifier',
      '--extra-files',
      'generated/index_to_name.json',
      '--version',
      '1.0',
      '--export-path',
      'model_store',
    ]);
    expect(archived.code, archived.stderr).toBe(0);
    const validated = await run('model-archiver', ['validate', 'model_store/tiny.mar', '--json']);
    expect(validated.code, validated.stderr).toBe(0);
    expect(JSON.parse(validated.stdout)).toMatchObject({ isValid: true });

    const [inference, management, metrics, grpcInference, grpcManagement] = [
      await freePort(),
      await freePort(),
      await freePort(),
      await freePort(),
      await freePort(),
    ];
    writeFileSync(
      path.join(work, 'config.properties'),
      [
        `inference_address=http://127.0.0.1:${inference}`,
        `management_address=http://127.0.0.1:${management}`,
        `metrics_address=http://127.0.0.1:${metrics}`,
        `grpc_inference_port=${grpcInference}`,
        `grpc_management_port=${grpcManagement}`,
        'model_store=model_store',
        'load_models=tiny.mar',
        '',
      ].join('\n'),
    );
    const started = await run('serve', ['--start', '--ts-config', 'config.properties']);
    expect(started.code, started.stderr + started.stdout).toBe(0);
    expect(started.stdout).toContain('Model loaded: tiny (version 1.0)');
    try {
      const keys = JSON.parse(readFileSync(path.join(work, 'key_file.json'), 'utf8')) as { inference: { key: string } };
      const image = readFileSync(path.join(work, 'generated', 'kitten.jpg'));
      const unauthorized = await fetch(`http://127.0.0.1:${inference}/predictions/tiny`, {
        method: 'POST',
        body: new Uint8Array(image),
      });
      expect(unauthorized.status).toBe(401);
      const response = await fetch(`http://127.0.0.1:${inference}/predictions/tiny`, {
        method: 'POST',
        headers: { authorization: `Bearer ${keys.inference.key}`, 'content-type': 'application/octet-stream' },
        body: new Uint8Array(image),
      });
      const body = await response.text();
      expect(response.status, body).toBe(200);
      expect(Object.keys(JSON.parse(body) as object)).toHaveLength(5);

      // gRPC from the installed server: the Open Inference Protocol's service, with a client built
      // from the .proto files the tarball installed (the server read the same files from its dist/).
      expect(started.stdout).toMatch(
        new RegExp(`^gRPC Inference API bound to \\S*127\\.0\\.0\\.1:${grpcInference}$`, 'm'),
      );
      const protos = path.join(
        prefix,
        'lib',
        'node_modules',
        '@marina',
        'cli',
        'node_modules',
        '@marina',
        'serve',
        'protos',
      );
      const oip = grpc.loadPackageDefinition(
        protoLoader.loadSync(path.join(protos, 'grpc_predict_v2.proto'), {
          keepCase: true,
          defaults: true,
          includeDirs: [protos],
        }),
      );
      const Service = (oip.inference as grpc.GrpcObject).GRPCInferenceService as grpc.ServiceClientConstructor;
      const client = new Service(`127.0.0.1:${grpcInference}`, grpc.credentials.createInsecure());
      const call = (method: string, request: object, key?: string) =>
        new Promise<unknown>((resolve, reject) => {
          const metadata = new grpc.Metadata();
          if (key) metadata.set('authorization', `Bearer ${key}`);
          (
            client[method] as (
              r: object,
              m: grpc.Metadata,
              cb: (e: grpc.ServiceError | null, v: unknown) => void,
            ) => void
          ).call(client, request, metadata, (error, value) => (error ? reject(error) : resolve(value)));
        });
      try {
        expect(await call('ServerReady', {}, keys.inference.key)).toEqual({ ready: true });
        expect(await call('ModelReady', { name: 'tiny', version: '' }, keys.inference.key)).toEqual({ ready: true });
        await expect(call('ModelReady', { name: 'tiny', version: '' })).rejects.toMatchObject({
          code: grpc.status.UNAUTHENTICATED,
        });
      } finally {
        client.close();
      }

      // The Node client library from its own tarball, installed into a job's project as a user would.
      const job = path.join(root, 'job');
      await execFileAsync('npm', ['install', '--prefix', job, '--no-audit', '--no-fund', clientTarball], {
        cwd: root,
        maxBuffer: 16 << 20,
      });
      expect(existsSync(path.join(job, 'node_modules', '@marina', 'client', 'dist', 'index.js'))).toBe(true);
      expect(existsSync(path.join(job, 'node_modules', '@marina', 'client', 'src'))).toBe(false);
      writeFileSync(
        path.join(job, 'job.mjs'),
        [
          "import { readFileSync } from 'node:fs';",
          "import { createMarinaClient } from '@marina/client';",
          'const client = createMarinaClient();',
          "console.log(JSON.stringify(await client.predict('tiny', readFileSync(process.argv[2]))));",
          '',
        ].join('\n'),
      );
      const classified = await run('node', ['job.mjs', path.join(work, 'generated', 'kitten.jpg')], {
        cwd: job,
        env: { ...env, MARINA_URL: `http://127.0.0.1:${inference}`, MARINA_KEY_FILE: path.join(work, 'key_file.json') },
      });
      expect(classified.code, classified.stderr).toBe(0);
      expect(Object.keys(JSON.parse(classified.stdout) as object)).toHaveLength(5);

      // The server and its workers run from the installed, compiled files.
      const pid = Number(readFileSync(path.join(work, '.marina_server.pid'), 'utf8').split('\n')[0]);
      const commandLine = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
      expect(commandLine[1]).toBe(
        path.join(realpathSync(prefix), 'lib/node_modules/@marina/cli/node_modules/@marina/serve/bin/serve.js'),
      );
      const maps = readFileSync(`/proc/${pid}/maps`, 'utf8');
      expect(maps).toContain(
        path.join(realpathSync(prefix), 'lib/node_modules/@marina/cli/node_modules/onnxruntime-node'),
      );
      expect(maps).not.toContain(repoRoot);
    } finally {
      const stopped = await run('torchserve', ['--stop']);
      expect(stopped.code, stopped.stderr).toBe(0);
    }
  });
});
