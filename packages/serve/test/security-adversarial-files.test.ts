/**
 * Issue 37's attacks on what a register `url` names, against a real server on loopback: FIFOs,
 * devices and sockets (which once held Node's thread pool for ever), symlinks out of an allowed
 * folder, files and folders whose bytes or names the answer must not quote, credentials in URLs,
 * downloads left behind by a killed server, and a model store whose disk fills up.
 */
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { mkdir, readdir, readFile, realpath, rm, symlink, writeFile } from 'node:fs/promises';
import { createServer as createHttpServer, type Server } from 'node:http';
import { createServer as createNetServer } from 'node:net';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  call,
  createWorkspace,
  opsConfig,
  packModel,
  startOps,
  type OpsServer,
  type Workspace,
} from './ops-harness.ts';

const register = (ops: OpsServer, url: string) => call(ops.api, 'POST', `/models?url=${encodeURIComponent(url)}`);

/** A loopback HTTP server whose handler the test gives; resolves with its base URL. */
async function httpServer(handler: Parameters<typeof createHttpServer>[1]): Promise<{ base: string; server: Server }> {
  const server = createHttpServer(handler);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { base: `http://127.0.0.1:${(server.address() as { port: number }).port}`, server };
}

describe('register urls that name special files, links and secrets', { timeout: 60_000 }, () => {
  let ws: Workspace;
  let ops: OpsServer;
  let root: string;
  let allowed: string;
  let outside: string;
  let download: { base: string; server: Server };

  beforeAll(async () => {
    ws = await createWorkspace('marina-adversarial-files-');
    root = await realpath(ws.root);
    allowed = join(root, 'allowed');
    outside = join(root, 'outside');
    await mkdir(allowed);
    await mkdir(outside);
    download = await httpServer((_request, response) => {
      // Every path redirects to a URL with credentials on a host allowed_urls does not allow.
      response.writeHead(302, { location: 'http://redirected:hunter2@example.invalid/x.mar' }).end();
    });
    ops = await startOps(
      opsConfig(ws, {
        allowed_urls: [
          `file://${allowed}/.*`,
          'file:///dev/.*',
          'file:///etc',
          'file:///etc/.*',
          'http://([^/@]*@)?127\\.0\\.0\\.1:[0-9]+/.*',
        ].join(','),
      }),
    );
  });
  afterAll(async () => {
    await ops?.close();
    download?.server.close();
    await ws?.cleanup();
  });

  it('refuses FIFOs at once, without opening them, and the server keeps registering', async () => {
    const fifos = [1, 2, 3, 4, 5, 6, 7, 8].map((i) => join(allowed, `p${i}.mar`));
    for (const fifo of fifos) execFileSync('mkfifo', [fifo]);
    // More at once than libuv's four pool threads: before the fix each one held a thread for ever.
    const answers = await Promise.all(fifos.map((fifo) => register(ops, `file://${fifo}`)));
    for (const answer of answers) {
      expect(answer.status).toBe(404);
      expect(answer.json).toMatchObject({ marinaCode: 'MARINA_ERR_MODEL_URL_INVALID' });
      expect(answer.json.message).toContain('a FIFO');
    }
    // A FIFO inside the model store, named by its plain name, is refused the same way.
    execFileSync('mkfifo', [join(ws.store, 'in-store.mar')]);
    const inStore = await register(ops, 'in-store.mar');
    expect(inStore.json).toMatchObject({ marinaCode: 'MARINA_ERR_MODEL_URL_INVALID' });
    // The pool is free: a real archive registers, and nothing of the FIFOs was left in the store.
    const archive = await packModel(outside, { modelName: 'real' });
    await rm(join(allowed, 'real.mar'), { force: true });
    await writeFile(join(allowed, 'real.mar'), await readFile(archive));
    const real = await register(ops, `file://${join(allowed, 'real.mar')}`);
    expect(real.status).toBe(200);
    expect((await readdir(ws.store)).filter((name) => /^p\d\.mar$/.test(name))).toEqual([]);
    expect(await call(ops.api, 'DELETE', '/models/real')).toMatchObject({ status: 200 });
  });

  it('refuses devices and sockets the same way (no endless copy of /dev/zero)', async () => {
    const socketPath = join(allowed, 'sock.mar');
    const unixServer = createNetServer();
    await new Promise<void>((resolve) => unixServer.listen(socketPath, resolve));
    try {
      for (const [url, kind] of [
        ['file:///dev/zero', 'a device'],
        ['file:///dev/null', 'a device'],
        [`file://${socketPath}`, 'a socket'],
      ] as const) {
        const answer = await register(ops, url);
        expect(answer.status, url).toBe(404);
        expect(answer.json.message, url).toContain(kind);
      }
    } finally {
      unixServer.close();
    }
    expect((await readdir(ws.store)).filter((name) => /zero|null|sock/.test(name))).toEqual([]);
  });

  it('quotes no byte of a file that is not an archive, and copies nothing of it into the store', async () => {
    await writeFile(join(allowed, 'shadow.mar'), 'root:$6$secret-hash:19000:0:99999:7:::\n');
    const answer = await register(ops, `file://${join(allowed, 'shadow.mar')}`);
    expect(answer.status).toBe(400);
    expect(answer.json).toMatchObject({ marinaCode: 'MARINA_ERR_DOWNLOAD_NOT_ARCHIVE' });
    expect(answer.text).not.toContain(Buffer.from('root').toString('hex'));
    expect(answer.text).not.toContain('secret-hash');
    expect(await readdir(ws.store)).not.toContain('shadow.mar');
  });

  it('lists no folder: neither /etc nor a folder of links', async () => {
    const dir = join(allowed, 'links');
    await mkdir(dir);
    for (let i = 0; i < 30; i++) await symlink('/etc/hostname', join(dir, `private-name-${i}`));
    for (const url of [`file://${dir}`, dir, 'file:///etc', '/etc']) {
      const answer = await register(ops, url);
      expect(answer.status, url).toBeGreaterThanOrEqual(400);
      expect(answer.text, url).not.toContain('private-name');
      expect(answer.text, url).not.toContain('passwd');
      expect(answer.text.length, url).toBeLessThan(2000);
    }
  });

  it('matches allowed_urls on the path with its symlinks resolved', async () => {
    await packModel(outside, { modelName: 'escaped' });
    await symlink(outside, join(allowed, 'lnk'));
    await symlink(join(outside, 'escaped.mar'), join(allowed, 'file-link.mar'));
    for (const url of [`file://${allowed}/lnk/escaped.mar`, `file://${allowed}/file-link.mar`]) {
      const answer = await register(ops, url);
      expect(answer.status, url).toBe(404);
      expect(answer.json, url).toMatchObject({ marinaCode: 'MARINA_ERR_URL_NOT_ALLOWED' });
    }
    expect((await call(ops.api, 'GET', '/models')).json.models).toEqual([]);
    // A link that stays inside the allowed folder is fine.
    await packModel(allowed, { modelName: 'inside' });
    await symlink(join(allowed, 'inside.mar'), join(allowed, 'inside-link.mar'));
    const inside = await register(ops, `file://${allowed}/inside-link.mar`);
    expect(inside.status).toBe(200);
    expect(await call(ops.api, 'DELETE', '/models/inside')).toMatchObject({ status: 200 });
  });

  it('redacts credentials in URLs, in answers and in every log line', async () => {
    const port = new URL(download.base).port;
    const direct = await register(ops, `http://alice:s3cret-pass@127.0.0.1:${port}/model.mar`);
    expect(direct.status).toBeGreaterThanOrEqual(400);
    expect(direct.text).not.toContain('s3cret-pass');
    const notAllowed = await register(ops, 'http://bob:other-pass@10.0.0.1/model.mar');
    expect(notAllowed.json).toMatchObject({ marinaCode: 'MARINA_ERR_URL_NOT_ALLOWED' });
    expect(notAllowed.text).not.toContain('other-pass');
    expect(notAllowed.json.message).toContain('bob:***@');
    // The redirect's Location carries a password too.
    const redirected = await register(ops, `${download.base}/model.mar`);
    expect(redirected.json).toMatchObject({ marinaCode: 'MARINA_ERR_URL_NOT_ALLOWED' });
    expect(redirected.text).not.toContain('hunter2');
    expect(redirected.json.message).toContain('redirected:***@');
    // The access log has the query string (percent-encoded), the server log the messages.
    await ops.close();
    const logDir = join(ws.root, 'logs');
    const logs = (await readdir(logDir)).filter((name) => name.endsWith('.log'));
    const text = (await Promise.all(logs.map((name) => readFile(join(logDir, name), 'utf8')))).join('\n');
    expect(text).toContain('alice');
    for (const secret of ['s3cret-pass', 'other-pass', 'hunter2']) expect(text).not.toContain(secret);
    expect(ops.messages.join('\n')).not.toContain('s3cret-pass');
    ops = await startOps(opsConfig(ws));
  });
});

describe('leftovers of a killed download', { timeout: 60_000 }, () => {
  it('removes unfinished .download files from the model store at start-up', async () => {
    const ws = await createWorkspace('marina-adversarial-leftovers-');
    try {
      const stale = join(ws.store, '.resnet.mar.0123456789ab.download');
      await writeFile(stale, 'partial');
      await writeFile(join(ws.store, '.hidden-but-not-a-download'), 'keep');
      const ops = await startOps(opsConfig(ws));
      try {
        expect(existsSync(stale)).toBe(false);
        expect(existsSync(join(ws.store, '.hidden-but-not-a-download'))).toBe(true);
        expect(ops.messages.join('\n')).toContain('removed 1 unfinished download');
      } finally {
        await ops.close();
      }
    } finally {
      await ws.cleanup();
    }
  });
});

/** Whether this process may mount a small tmpfs (root, or a user namespace that allows it). */
const canMountTmpfs = (() => {
  if (process.platform !== 'linux' || process.getuid?.() !== 0) return false;
  const probe = mkdtempSync(join(tmpdir(), 'marina-tmpfs-probe-'));
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=64k', 'tmpfs', probe], { stdio: 'ignore' });
    execFileSync('umount', [probe], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  } finally {
    rmSync(probe, { recursive: true, force: true });
  }
})();

describe.skipIf(!canMountTmpfs)('a model store whose disk fills up (a 64 KiB tmpfs)', { timeout: 60_000 }, () => {
  let ws: Workspace;
  let ops: OpsServer;
  let small: string;
  let source: { base: string; server: Server };

  beforeAll(async () => {
    ws = await createWorkspace('marina-adversarial-full-');
    small = join(ws.root, 'small-store');
    await mkdir(small);
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=64k', 'tmpfs', small]);
    // A zip's magic, then a megabyte: more than the store can hold.
    const big = Buffer.concat([Buffer.from([0x50, 0x4b, 0x03, 0x04]), Buffer.alloc(1024 * 1024, 7)]);
    writeFileSync(join(ws.root, 'big.mar'), big);
    source = await httpServer((_request, response) => response.writeHead(200).end(big));
    ops = await startOps(opsConfig(ws, { model_store: small, allowed_urls: 'file://.*,http://127\\.0\\.0\\.1:.*' }));
  });
  afterAll(async () => {
    await ops?.close();
    source?.server.close();
    try {
      execFileSync('umount', [small]);
    } catch {
      // not mounted
    }
    await ws?.cleanup();
  });

  it('answers 507 MARINA_ERR_MODEL_STORE_FULL and leaves no partial file, for downloads and file:// copies', async () => {
    for (const url of [`${source.base}/big.mar`, `file://${join(ws.root, 'big.mar')}`]) {
      const answer = await register(ops, url);
      expect(answer.status, url).toBe(507);
      expect(answer.json, url).toMatchObject({ code: 507, marinaCode: 'MARINA_ERR_MODEL_STORE_FULL' });
      expect(await readdir(small), url).toEqual([]);
    }
  });
});

describe('SIGTERM while FIFOs are being registered', { timeout: 60_000 }, () => {
  it('stops the server: no register holds a thread of the pool', async () => {
    const ws = await createWorkspace('marina-adversarial-sigterm-');
    const cwd = ws.root;
    mkdirSync(join(cwd, 'tmp'));
    writeFileSync(
      join(cwd, 'config.properties'),
      'inference_address=http://127.0.0.1:0\nmanagement_address=http://127.0.0.1:0\ngrpc_inference_port=0\ngrpc_management_port=0\nenable_metrics_api=false\n',
    );
    const fifos = [1, 2, 3, 4, 5].map((i) => join(cwd, `p${i}.mar`));
    for (const fifo of fifos) execFileSync('mkfifo', [fifo]);
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      TMPDIR: join(cwd, 'tmp'),
      TS_CONFIG_FILE: join(cwd, 'config.properties'),
      LOG_LOCATION: join(cwd, 'logs'),
    };
    delete env.MALLOC_MMAP_THRESHOLD_;
    const bin = fileURLToPath(new URL('../bin/serve.js', import.meta.url));
    const child = spawn(
      process.execPath,
      [bin, '--foreground', '--disable-token-auth', '--enable-model-api', '--model-store', ws.store],
      {
        cwd,
        env,
      },
    );
    try {
      let output = '';
      child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
      child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
      const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
      await new Promise<void>((resolve, reject) => {
        child.stdout.on('data', () => (output.includes('Marina is ready.') ? resolve() : undefined));
        void exited.then((code) => reject(new Error(`exited with ${code} before ready:\n${output}`)));
      });
      const management = /Management API bound to (\S+)/.exec(output)![1]!;
      const answers = fifos.map((fifo) =>
        fetch(`${management}/models?url=${encodeURIComponent(`file://${fifo}`)}`, { method: 'POST' }).then(
          (r) => r.status,
          () => 0,
        ),
      );
      // The registers are answered (404, refused from their stat) and the server stops on one SIGTERM.
      expect(await Promise.all(answers)).toEqual([404, 404, 404, 404, 404]);
      child.kill('SIGTERM');
      expect(await exited).toBe(0);
      expect(readdirSync(ws.store).filter((name) => name.startsWith('p'))).toEqual([]);
    } finally {
      if (child.exitCode === null) child.kill('SIGKILL');
      await ws.cleanup();
    }
  });
});
