/**
 * Snapshots are durable or loudly not (issue 9).
 *
 * Disk full: the snapshot folder is a 64 KiB tmpfs the test mounts (it runs as root here) and
 * fills; where mount is refused (no root), the fault is injected at the file-system boundary
 * instead: the snapshot folder is swapped for a regular file, so every write fails (ENOTDIR).
 * Either way the management call that changed the state answers its usual status with
 * `warning: { code: MARINA_ERR_SNAPSHOT_WRITE_FAILED }`, and the server logs at error level.
 *
 * Start-up: the real `serve --foreground` reports every snapshot skipped as corrupt on its
 * terminal, says so when it restores none of a snapshot's models, and then leaves the snapshot
 * folder as it was instead of writing a model-less snapshot over it.
 */
import { execFileSync, spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { mkdir, open, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { renderSnapshot } from '../src/snapshot/snapshot-store.ts';
import { call, createWorkspace, opsConfig, packModel, type Workspace } from './ops-harness.ts';
import { startServer, type RunningServer } from '../src/start-server.ts';

const BIN = fileURLToPath(new URL('../bin/serve.js', import.meta.url));

let workspace: Workspace;
const children: ChildProcessWithoutNullStreams[] = [];
const mounts: string[] = [];

beforeAll(async () => {
  workspace = await createWorkspace('marina-snapshot-durability-');
  await packModel(workspace.store, { modelName: 'm' });
}, 60_000);
afterEach(() => {
  for (const child of children.splice(0))
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
});
afterAll(async () => {
  for (const dir of mounts) execFileSync('umount', ['-l', dir]);
  await workspace?.cleanup();
});

/** Mounts a 64 KiB tmpfs on `dir`; false when this machine refuses (not root, no mount). */
function mountSmallTmpfs(dir: string): boolean {
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=64k', 'tmpfs', dir], { stdio: 'ignore' });
    mounts.push(dir);
    return true;
  } catch {
    return false;
  }
}

/** Writes a file into `dir` until the file system says ENOSPC; returns its path. */
async function fillUp(dir: string): Promise<string> {
  const path = join(dir, 'filler');
  const file = await open(path, 'w');
  const block = Buffer.alloc(4096, 1);
  try {
    for (;;) await file.write(block);
  } catch (error) {
    expect((error as NodeJS.ErrnoException).code).toBe('ENOSPC');
  } finally {
    await file.close();
  }
  return path;
}

describe('a snapshot that cannot be written', () => {
  let server: RunningServer | undefined;
  afterAll(() => server?.close());

  it('turns into a warning in the answer of the management call that changed the state, and an error in the log', {
    timeout: 60_000,
  }, async () => {
    const snapshotDir = join(workspace.root, 'snapshots-small');
    await mkdir(snapshotDir);
    const isTmpfs = mountSmallTmpfs(snapshotDir);
    const logged: Array<{ level: string; message: string }> = [];
    server = await startServer(
      { ...opsConfig(workspace), isSnapshotEnabled: true, snapshotDir },
      { log: (level, message) => logged.push({ level, message }) },
    );
    const api = server.listening.find((l) => l.api === 'management')!.url;

    const registered = await call(api, 'POST', '/models?url=m.mar&initial_workers=1&synchronous=true');
    expect(registered.status, registered.text).toBe(200);
    expect(registered.json.warning).toBeUndefined();

    let undo: () => Promise<void>;
    if (isTmpfs) {
      const filler = await fillUp(snapshotDir);
      undo = () => rm(filler);
    } else {
      // Injected fault (no tmpfs): the folder becomes a file, so the next write fails with ENOTDIR.
      await rm(snapshotDir, { recursive: true });
      await writeFile(snapshotDir, 'not a folder');
      undo = async () => {
        await rm(snapshotDir);
        await mkdir(snapshotDir);
      };
    }
    const scaled = await call(api, 'PUT', '/models/m?min_worker=1&max_worker=3');
    expect(scaled.status, scaled.text).toBe(202);
    expect(scaled.json.status).toBe('Processing worker updates...');
    expect(scaled.json.warning?.code).toBe('MARINA_ERR_SNAPSHOT_WRITE_FAILED');
    expect(scaled.json.warning?.message).toMatch(isTmpfs ? /ENOSPC/ : /ENOTDIR|EEXIST/);
    expect(logged.some((l) => l.level === 'error' && l.message.includes('snapshot'))).toBe(true);

    await undo();
    const again = await call(api, 'PUT', '/models/m?min_worker=1&max_worker=4');
    expect(again.status).toBe(202);
    expect(again.json.warning).toBeUndefined();
    const names = (await readdir(snapshotDir)).filter((n) => n.endsWith('-snapshot.cfg')).sort();
    expect(await readFile(join(snapshotDir, names.at(-1)!), 'utf8')).toContain('"maxWorkers":4');
  });
});

/**
 * `serve --foreground` in the workspace without --ts-config (TorchServe's rule: --ts-config means no
 * snapshot is read), so it reads the snapshot folder and falls back to ./config.properties when no
 * snapshot there is usable. Resolved with its output once it is ready.
 */
/** Starts `serve --foreground` with its logs (and snapshots) in `logDir`; its output is collected. */
async function spawnServe(logDir: string): Promise<{ child: ChildProcessWithoutNullStreams; output: () => string }> {
  // Its own TMPDIR, so its own pid file: other test files start servers at the same time.
  const tmpDir = join(logDir, 'tmp');
  await mkdir(tmpDir, { recursive: true });
  const env: NodeJS.ProcessEnv = { ...process.env, LOG_LOCATION: logDir, TMPDIR: tmpDir };
  delete env.TS_CONFIG_FILE;
  const child = spawn(process.execPath, [BIN, '--foreground'], { cwd: workspace.root, env });
  children.push(child);
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
  return { child, output: () => output };
}

async function serve(logDir: string): Promise<{ child: ChildProcessWithoutNullStreams; output: () => string }> {
  const started = await spawnServe(logDir);
  const { child, output } = started;
  await new Promise<void>((resolve, reject) => {
    child.stdout.on('data', () => (output().includes('Marina is ready.') ? resolve() : undefined));
    child.on('exit', (code) => reject(new Error(`serve exited with ${code} before it was ready:\n${output()}`)));
  });
  return started;
}

/** SIGTERM, resolved once the process and both its output pipes have ended (stderr may trail stdout). */
async function stop(child: ChildProcessWithoutNullStreams): Promise<void> {
  const closed = new Promise((resolve) => child.on('close', resolve));
  child.kill('SIGTERM');
  await closed;
}

/** The workspace's config.properties; a restored snapshot is the whole configuration, so it carries them too. */
const PROPERTIES: Record<string, string> = {
  inference_address: 'http://127.0.0.1:0',
  management_address: 'http://127.0.0.1:0',
  enable_metrics_api: 'false',
  enable_model_api: 'true',
  disable_token_authorization: 'true',
  model_store: 'store',
  grpc_inference_port: '0',
  grpc_management_port: '0',
};

describe('start-up with snapshots it cannot use', () => {
  beforeAll(async () => {
    await writeFile(
      join(workspace.root, 'config.properties'),
      Object.entries(PROPERTIES)
        .map(([k, v]) => `${k}=${v}`)
        .join('\n'),
    );
  });

  it('reports every corrupt snapshot on the terminal and writes none over them', { timeout: 60_000 }, async () => {
    const logDir = join(workspace.root, 'logs-corrupt');
    const snapshotDir = join(logDir, 'config');
    await mkdir(snapshotDir, { recursive: true });
    await writeFile(
      join(snapshotDir, '20260101000000000-snapshot.cfg'),
      'model_snapshot={"name":"x","models":{"m":{"1.0":{"marName":"m.mar"',
    );
    await writeFile(join(snapshotDir, '20260101000000001-snapshot.cfg'), 'garbage without the key\n');
    const before = (await readdir(snapshotDir)).sort();

    const { child, output } = await serve(logDir);
    await stop(child);
    expect(output()).toMatch(/WARN snapshot '.*20260101000000001-snapshot\.cfg' is unusable/);
    expect(output()).toMatch(/WARN snapshot '.*20260101000000000-snapshot\.cfg' is unusable/);
    expect(output()).toContain('WARN none of the 2 snapshot files');
    expect((await readdir(snapshotDir)).sort()).toEqual(before);
  });

  it("says so when it restores none of the snapshot's models, and keeps the snapshot", {
    timeout: 60_000,
  }, async () => {
    const logDir = join(workspace.root, 'logs-gone');
    const snapshotDir = join(logDir, 'config');
    await mkdir(snapshotDir, { recursive: true });
    const name = '20260101000000000-snapshot.cfg';
    const entry = {
      defaultVersion: true,
      marName: 'gone.mar',
      url: 'gone.mar',
      minWorkers: 1,
      maxWorkers: 1,
      batchSize: 1,
      maxBatchDelay: 100,
      responseTimeout: 120,
    };
    const text = renderSnapshot({
      name,
      createdMs: Date.UTC(2026, 0, 1),
      models: { gone: { '1.0': entry } },
      modelStore: workspace.store,
      // Marina's lenient start; without it the start stops, as TorchServe's (the next test).
      properties: { ...PROPERTIES, snapshot_skip_missing_archives: 'true' },
    });
    await writeFile(join(snapshotDir, name), text);

    const { child, output } = await serve(logDir);
    await stop(child);
    expect(output()).toContain('Model failed to load: gone.mar');
    expect(output()).toMatch(
      /WARN none of the 1 model versions of the snapshot .*20260101000000000-snapshot\.cfg could be restored/,
    );
    expect(output()).not.toContain('Restored the models of the snapshot');
    expect(await readdir(snapshotDir)).toEqual([name]);
    expect(await readFile(join(snapshotDir, name), 'utf8')).toBe(text);
  });

  // pytorch/serve frontend/server/src/main/java/org/pytorch/serve/snapshot/SnapshotManager.java: validate()
  // throws InvalidSnapshotException with this text (its misspelling included), and the start stops.
  it("stops the start when the snapshot names a missing archive, with TorchServe's message", {
    timeout: 60_000,
  }, async () => {
    const logDir = join(workspace.root, 'logs-missing');
    const snapshotDir = join(logDir, 'config');
    await mkdir(snapshotDir, { recursive: true });
    const name = '20260101000000000-snapshot.cfg';
    const entry = {
      defaultVersion: true,
      marName: 'missing.mar',
      minWorkers: 1,
      maxWorkers: 1,
      batchSize: 1,
      maxBatchDelay: 100,
      responseTimeout: 120,
    };
    await writeFile(
      join(snapshotDir, name),
      renderSnapshot({
        name,
        createdMs: Date.UTC(2026, 0, 1),
        models: { missing: { '2.0': { ...entry, url: 'missing.mar' } } },
        modelStore: workspace.store,
        properties: PROPERTIES,
      }),
    );
    const { child, output } = await spawnServe(logDir);
    const code = await new Promise<number | null>((resolve) => child.on('exit', resolve));
    expect(code).not.toBe(0);
    expect(output()).toContain('Correspoding mar file for model :missing, version :2.0 not found in model store');
    expect(output()).toContain('snapshot_skip_missing_archives=true');
    expect(output()).not.toContain('Marina is ready.');
  });
});
