/**
 * The extraction cache and the optimised-model cache are bounded (issue 9): an unregistered
 * model's extraction and optimised copies are removed with it, each cache is kept under its cap
 * by evicting the least recently used entries no model uses, and `serve --clean-cache` empties
 * both. Before, both caches only grew. Real server and HTTP on loopback, real archives, the real
 * CLI for --clean-cache (with its own TMPDIR).
 */
import { spawn } from 'node:child_process';
import { mkdir, readdir, readFile, utimes, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sha256File } from '@marina/archive';
import { optimizedModelCacheDir } from '../src/cache/model-caches.ts';
import {
  affineInput,
  call,
  createWorkspace,
  opsConfig,
  packModel,
  startOps,
  type OpsServer,
  type Workspace,
} from './ops-harness.ts';

const BIN = fileURLToPath(new URL('../bin/serve.js', import.meta.url));
let workspace: Workspace;
let ops: OpsServer;
let cacheDir: string;

/** A fake earlier extraction of `bytes`, last used `ageMs` ago. */
async function oldEntry(name: string, bytes: number, ageMs: number): Promise<string> {
  const dir = join(cacheDir, name);
  await mkdir(dir, { recursive: true });
  await writeFile(join(dir, 'weights.bin'), Buffer.alloc(bytes));
  const then = new Date(Date.now() - ageMs);
  await utimes(dir, then, then);
  return dir;
}

/** Optimised copies (in the real $TMPDIR/marina/ort-optimized) made from files under `modelDir`. */
async function optimizedCopiesOf(modelDir: string): Promise<string[]> {
  const found: string[] = [];
  for (const name of await readdir(optimizedModelCacheDir()).catch(() => [] as string[])) {
    const source = await readFile(join(optimizedModelCacheDir(), name, 'source.json'), 'utf8').catch(() => '');
    if (source.includes(modelDir)) found.push(name);
  }
  return found;
}

beforeAll(async () => {
  workspace = await createWorkspace('marina-cache-bounds-');
  cacheDir = join(workspace.root, 'cache');
  await packModel(workspace.store, { modelName: 'm', modelConfigYaml: 'onnxruntime:\n  cacheOptimizedModel: true\n' });
  await packModel(workspace.store, { modelName: 'n' });
  ops = await startOps(opsConfig(workspace, { extraction_cache_max_bytes: String(64 * 1024) }));
}, 60_000);
afterAll(async () => {
  await ops?.close();
  await workspace?.cleanup();
});

describe('the extraction cache', () => {
  it('evicts the least recently used extraction no model uses once over extraction_cache_max_bytes', async () => {
    await oldEntry('0'.repeat(64), 40 * 1024, 2 * 3600_000);
    await oldEntry('1'.repeat(64), 40 * 1024, 3600_000);
    const response = await call(ops.api, 'POST', '/models?url=n.mar&initial_workers=0');
    expect(response.status, response.text).toBe(200);
    const entries = await readdir(cacheDir);
    expect(entries).not.toContain('0'.repeat(64));
    expect(entries).toContain('1'.repeat(64));
    expect(entries).toContain(await sha256File(join(workspace.store, 'n.mar')));
  });

  it("loses an unregistered model's extraction and its optimised copies", async () => {
    const registered = await call(ops.api, 'POST', '/models?url=m.mar&initial_workers=1&synchronous=true');
    expect(registered.status, registered.text).toBe(200);
    expect(
      (await call(ops.api, 'POST', '/predictions/m', { body: affineInput([1, 2, 3, 4]) })).json.outputs.output.data,
    ).toEqual([3, 5, 7, 9]);
    const modelDir = join(cacheDir, await sha256File(join(workspace.store, 'm.mar')));
    expect(await readdir(cacheDir)).toContain(await sha256File(join(workspace.store, 'm.mar')));
    expect(await optimizedCopiesOf(modelDir)).toHaveLength(1);

    expect((await call(ops.api, 'DELETE', '/models/m')).status).toBe(200);
    expect(await readdir(cacheDir)).not.toContain(await sha256File(join(workspace.store, 'm.mar')));
    expect(await optimizedCopiesOf(modelDir)).toEqual([]);
    // The other model's extraction stays: it is still registered.
    expect(await readdir(cacheDir)).toContain(await sha256File(join(workspace.store, 'n.mar')));
  });
});

describe('an extraction another server on the host uses', () => {
  it('is kept when this server unregisters its model', async () => {
    // Another live process (a stand-in for a second server) has marked n's extraction as its own.
    const other = spawn(process.execPath, ['-e', 'setInterval(() => {}, 1000)']);
    try {
      const digest = await sha256File(join(workspace.store, 'n.mar'));
      await mkdir(join(cacheDir, '.users', digest), { recursive: true });
      await writeFile(join(cacheDir, '.users', digest, String(other.pid)), '');
      expect((await call(ops.api, 'DELETE', '/models/n')).status).toBe(200);
      expect(await readdir(cacheDir)).toContain(digest);
    } finally {
      other.kill('SIGKILL');
    }
  });
});

describe('serve --clean-cache', () => {
  it('empties both caches under its TMPDIR', { timeout: 60_000 }, async () => {
    const tmp = join(workspace.root, 'tmp-clean');
    for (const dir of [join(tmp, 'marina', 'models', 'abc', 'MAR-INF'), join(tmp, 'marina', 'ort-optimized', 'def')]) {
      await mkdir(dir, { recursive: true });
      await writeFile(join(dir, 'file'), 'x'.repeat(100));
    }
    const env: NodeJS.ProcessEnv = { ...process.env, TMPDIR: tmp };
    const child = spawn(process.execPath, [BIN, '--clean-cache'], { cwd: workspace.root, env });
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
    const code = await new Promise((resolve) => child.on('close', resolve));
    expect(code, output).toBe(0);
    expect(output).toContain(`Removed 1 entries (100 bytes) from ${join(tmp, 'marina', 'models')}`);
    expect(output).toContain(`Removed 1 entries (100 bytes) from ${join(tmp, 'marina', 'ort-optimized')}`);
    expect(await readdir(join(tmp, 'marina', 'models'))).toEqual([]);
    expect(await readdir(join(tmp, 'marina', 'ort-optimized'))).toEqual([]);
  });
});
