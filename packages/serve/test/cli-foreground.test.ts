import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { useTempDirs } from './temp-dirs.ts';
import { sleepyHandlerSource } from './fixtures.ts';

const newTempDir = useTempDirs('marina-cli-foreground-');

const BIN = fileURLToPath(new URL('../bin/serve.js', import.meta.url));

interface Foreground {
  child: ChildProcessWithoutNullStreams;
  output: () => string;
  exited: Promise<number | null>;
  cwd: string;
}

const children: Array<{ child: ChildProcessWithoutNullStreams; cwd: string }> = [];
afterEach(() => {
  for (const { child, cwd } of children.splice(0)) {
    if (child.exitCode !== null) continue;
    // The re-executed server has a process group of its own: SIGKILL to its parent would orphan it.
    try {
      const pid = recordedPid(cwd);
      if (pid !== child.pid) process.kill(pid, 'SIGKILL');
    } catch {
      // no pid file, or that process is gone already
    }
    child.kill('SIGKILL');
  }
});

/** `serve --foreground` with a sleepy model, resolved once it prints that it is ready. `extraEnv` adds to a copy of this environment without MALLOC_MMAP_THRESHOLD_. */
async function startForeground(
  extraEnv: Record<string, string> = {},
  extraConfig = '',
): Promise<Foreground & { url: string; env: NodeJS.ProcessEnv }> {
  const cwd = newTempDir();
  mkdirSync(path.join(cwd, 'tmp'));
  const model = path.join(cwd, 'store', 'sleepy');
  mkdirSync(path.join(model, 'MAR-INF'), { recursive: true });
  writeFileSync(
    path.join(model, 'MAR-INF', 'MANIFEST.json'),
    JSON.stringify({
      runtime: 'python',
      model: { modelName: 'sleepy', modelVersion: '1.0', handler: 'sleepy_handler.mjs' },
    }),
  );
  writeFileSync(path.join(model, 'sleepy_handler.mjs'), sleepyHandlerSource);
  const args = ['--foreground', '--disable-token-auth', '--model-store', 'store', '--models', 'all'];
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    TMPDIR: path.join(cwd, 'tmp'),
    TS_CONFIG_FILE: writeConfig(cwd, extraConfig),
    LOG_LOCATION: path.join(cwd, 'logs'),
    ...extraEnv,
  };
  if (!('MALLOC_MMAP_THRESHOLD_' in extraEnv)) delete env.MALLOC_MMAP_THRESHOLD_;
  const child = spawn(process.execPath, [BIN, ...args], { cwd, env });
  children.push({ child, cwd });
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  await new Promise<void>((resolve, reject) => {
    const check = () => (output.includes('Marina is ready.') ? resolve() : undefined);
    child.stdout.on('data', check);
    void exited.then((code) => reject(new Error(`exited with ${code} before ready:\n${output}`)));
  });
  const url = /Inference API bound to (\S+)/.exec(output)![1]!;
  return { child, output: () => output, exited, cwd, url, env };
}

/** The pid the pid file names: the process that serves. */
function recordedPid(cwd: string): number {
  return Number(readFileSync(path.join(cwd, 'tmp', '.marina_server.pid'), 'utf8').split('\n')[0]);
}

/** The environment of a live process, from /proc. */
function environOf(pid: number): string[] {
  return readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0');
}

/** Runs `serve --stop` with the server's environment (same TMPDIR, so the same pid file); resolves its exit code. */
function stopWithCli(server: { cwd: string; env: NodeJS.ProcessEnv }): Promise<number | null> {
  const stopper = spawn(process.execPath, [BIN, '--stop'], { cwd: server.cwd, env: server.env, stdio: 'ignore' });
  return new Promise((resolve) => stopper.on('exit', (code) => resolve(code)));
}

function writeConfig(cwd: string, extra = ''): string {
  const file = path.join(cwd, 'config.properties');
  writeFileSync(
    file,
    `inference_address=http://127.0.0.1:0\nmanagement_address=http://127.0.0.1:0\ngrpc_inference_port=0\ngrpc_management_port=0\nenable_metrics_api=false\n${extra}`,
  );
  return file;
}

describe('serve --foreground', { timeout: 60_000 }, () => {
  it('prints where it listens and which models loaded, and exits 0 on SIGTERM', async () => {
    const server = await startForeground();
    expect(server.output()).toContain('Model loaded: sleepy (version 1.0)');
    expect(server.output()).toContain('Token authorization is disabled.');
    // Each line once: ts_log.log gets its own copy, the terminal only the launcher's report.
    expect(server.output().match(/^inference API bound to/gim)).toHaveLength(1);
    expect(server.output().match(/Model loaded: sleepy/g)).toHaveLength(1);
    expect(existsSync(path.join(server.cwd, 'tmp', '.marina_server.pid'))).toBe(true);
    server.child.kill('SIGTERM');
    expect(await server.exited).toBe(0);
    expect(server.output().match(/Marina has stopped\./g)).toHaveLength(1);
    expect(existsSync(path.join(server.cwd, 'tmp', '.marina_server.pid'))).toBe(false);
  });

  it('loads its models at start-up under model_memory_budget, where each load is given a spare worker thread, and serves', async () => {
    // The load waits for the spare thread before anything else holds the event loop open: a spare
    // that did not keep the process alive once taken let it exit (Node's status 13) at start-up.
    const server = await startForeground({}, 'model_memory_budget=2GB\n');
    expect(server.output()).toContain('Model loaded: sleepy (version 1.0)');
    const response = await fetch(`${server.url}/predictions/sleepy`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ value: 7 }),
    });
    expect(response.status).toBe(200);
    expect(await response.json()).toMatchObject({ echo: 7, batchSize: 1 });
    server.child.kill('SIGTERM');
    expect(await server.exited).toBe(0);
  });

  it('exits at once with status 1 on a second signal while a request is in flight', async () => {
    const server = await startForeground();
    const inFlight = fetch(`${server.url}/predictions/sleepy`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ sleepMs: 20_000 }),
    }).catch((error: unknown) => error);
    let isBusy = false;
    for (let attempt = 0; attempt < 400 && !isBusy; attempt++) {
      const [description] = (await (await fetch(`${server.url}/models/sleepy`)).json()) as Array<{
        workers: Array<{ status: string }>;
      }>;
      isBusy = description?.workers.some((worker) => worker.status === 'BUSY') ?? false;
      if (!isBusy) await new Promise((resolve) => setTimeout(resolve, 25));
    }
    expect(isBusy).toBe(true);
    server.child.kill('SIGINT');
    await new Promise<void>((resolve) => {
      const check = () => (server.output().includes('SIGINT received') ? resolve() : setTimeout(check, 20));
      check();
    });
    server.child.kill('SIGINT');
    expect(await server.exited).toBe(1);
    expect(server.output()).toContain('SIGINT again: exiting without waiting for in-flight requests.');
    await inFlight;
  });

  describe.runIf(process.platform === 'linux')('glibc MALLOC_MMAP_THRESHOLD_', () => {
    it('serves from a re-executed process that has MALLOC_MMAP_THRESHOLD_=1048576, names it in the pid file, and serve --stop stops both', async () => {
      const server = await startForeground();
      const servingPid = recordedPid(server.cwd);
      expect(servingPid).not.toBe(server.child.pid);
      expect(environOf(servingPid)).toContain('MALLOC_MMAP_THRESHOLD_=1048576');
      expect((await fetch(`${server.url}/ping`)).status).toBe(200);
      expect(await stopWithCli(server)).toBe(0);
      expect(await server.exited).toBe(0);
      expect(server.output()).toContain('Marina has stopped.');
      expect(existsSync(path.join(server.cwd, 'tmp', '.marina_server.pid'))).toBe(false);
    });

    it('passes the serving process exit code through when SIGTERM is sent to it directly', async () => {
      const server = await startForeground();
      process.kill(recordedPid(server.cwd), 'SIGTERM');
      expect(await server.exited).toBe(0);
      expect(server.output()).toContain('Marina has stopped.');
    });

    it('takes the serving process down when the started process is killed with SIGKILL', async () => {
      const server = await startForeground();
      const servingPid = recordedPid(server.cwd);
      server.child.kill('SIGKILL');
      await server.exited;
      let isAlive = true;
      for (let attempt = 0; attempt < 100 && isAlive; attempt++) {
        try {
          process.kill(servingPid, 0);
          await new Promise((resolve) => setTimeout(resolve, 50));
        } catch {
          isAlive = false;
        }
      }
      expect(isAlive).toBe(false);
    });

    it('serves in the started process, unchanged, with MARINA_NO_REEXEC=1 or a threshold already set', async () => {
      const optedOut = await startForeground({ MARINA_NO_REEXEC: '1' });
      expect(recordedPid(optedOut.cwd)).toBe(optedOut.child.pid);
      expect(environOf(optedOut.child.pid!).some((entry) => entry.startsWith('MALLOC_MMAP_THRESHOLD_='))).toBe(false);
      optedOut.child.kill('SIGTERM');
      expect(await optedOut.exited).toBe(0);

      const preset = await startForeground({ MALLOC_MMAP_THRESHOLD_: '65536' });
      expect(recordedPid(preset.cwd)).toBe(preset.child.pid);
      expect(environOf(preset.child.pid!)).toContain('MALLOC_MMAP_THRESHOLD_=65536');
      preset.child.kill('SIGTERM');
      expect(await preset.exited).toBe(0);
    });
  });
});
