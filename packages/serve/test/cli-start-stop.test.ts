import { existsSync, mkdirSync, mkdtempSync, rmSync, readFileSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { runServe } from './serve-cli.ts';
import { writeTinyTensorModel } from '@marina/model-zoo';
import { sleepyHandlerSource } from './fixtures.ts';

const createdDirs: string[] = [];
function track(dir: string): string {
  createdDirs.push(dir);
  return dir;
}

function writeManifest(folder: string, model: Record<string, string>): void {
  mkdirSync(path.join(folder, 'MAR-INF'), { recursive: true });
  writeFileSync(
    path.join(folder, 'MAR-INF', 'MANIFEST.json'),
    JSON.stringify({ runtime: 'python', model: { modelVersion: '1.0', ...model }, archiverVersion: '0.12.0' }),
  );
}

/** A working directory with tmp/, a model store and a config.properties listening on random ports. */
function workDir(extraConfig = ''): string {
  const cwd = track(mkdtempSync(path.join(os.tmpdir(), 'marina-cli-start-stop-')));
  mkdirSync(path.join(cwd, 'tmp'));
  mkdirSync(path.join(cwd, 'store'));
  writeFileSync(
    path.join(cwd, 'config.properties'),
    [
      'inference_address=http://127.0.0.1:0',
      'management_address=http://127.0.0.1:0',
      'enable_metrics_api=false',
      'model_store=store',
      'load_models=all',
      extraConfig,
      'grpc_inference_port=0',
      'grpc_management_port=0',
    ].join('\n'),
  );
  return cwd;
}

function inferenceUrl(stdout: string): string {
  const match = /Inference API bound to (http:\/\/\S+)/.exec(stdout);
  if (!match) throw new Error(`no inference address in:\n${stdout}`);
  return match[1]!;
}

function pidOf(cwd: string): number {
  return Number(readFileSync(path.join(cwd, 'tmp', '.marina_server.pid'), 'utf8').split('\n')[0]);
}

function isRunning(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  try {
    // An exited child not yet reaped (no init in a container) is a zombie with an empty command line.
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8') !== '';
  } catch {
    return true;
  }
}

const started: string[] = [];
// One `serve --stop` per started folder, each a real process start (seconds on a loaded machine).
afterAll(async () => {
  for (const cwd of started) await runServe(cwd, ['--stop']);
  for (const dir of createdDirs) rmSync(dir, { recursive: true, force: true });
}, 120_000); // each --stop starts a process and waits for a drain: more than vitest's 10 s default on a loaded machine

// Each test starts real processes (tsx start-up, onnxruntime): allow well over the default 5 s on a shared machine.
describe('serve --start in the background, then --stop', { timeout: 60_000 }, () => {
  it('serves predictions over HTTP with token authorization on, and --stop ends it and removes its files', async () => {
    const cwd = workDir();
    writeManifest(path.join(cwd, 'store', 'affine'), {
      modelName: 'affine',
      serializedFile: 'model.onnx',
      handler: 'tensor',
    });
    await writeTinyTensorModel({ outputPath: path.join(cwd, 'store', 'affine', 'model.onnx') });

    started.push(cwd);
    const start = await runServe(cwd, ['--start', '--ts-config', 'config.properties']);
    expect(start.code, start.stderr).toBe(0);
    expect(start.stdout).toContain('Model loaded: affine (version 1.0)');
    const pid = pidOf(cwd);
    expect(isRunning(pid)).toBe(true);
    if (existsSync(`/proc/${pid}/environ`)) {
      expect(readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0')).toContain('MALLOC_MMAP_THRESHOLD_=1048576');
    }

    const url = `${inferenceUrl(start.stdout)}/predictions/affine`;
    const body = JSON.stringify({ data: [[1, 2, 3, 4]] });
    const headers = { 'content-type': 'application/json' };
    const anonymous = await fetch(url, { method: 'POST', headers, body });
    expect(anonymous.status).toBe(401);
    const keys = JSON.parse(readFileSync(path.join(cwd, 'key_file.json'), 'utf8')) as {
      inference: { key: string };
      management: { key: string };
    };
    const authorized = await fetch(url, {
      method: 'POST',
      headers: { ...headers, authorization: `Bearer ${keys.inference.key}` },
      body,
    });
    expect(authorized.status).toBe(200);
    expect(await authorized.json()).toEqual({ outputs: { output: { shape: [1, 4], data: [3, 5, 7, 9] } } });

    // Both APIs share the listener here; the management API still wants the management key.
    const modelsUrl = `${inferenceUrl(start.stdout)}/models`;
    expect((await fetch(modelsUrl, { headers: { authorization: `Bearer ${keys.inference.key}` } })).status).toBe(401);
    expect((await fetch(modelsUrl, { headers: { authorization: `Bearer ${keys.management.key}` } })).status).toBe(200);

    const again = await runServe(cwd, ['--start', '--ts-config', 'config.properties']);
    expect(again.code).toBe(1);
    expect(again.stderr).toContain('MARINA_ERR_SERVER_ALREADY_RUNNING');

    const stop = await runServe(cwd, ['--stop']);
    expect(stop.code).toBe(0);
    expect(stop.stdout).toContain('Marina has stopped.');
    expect(isRunning(pid)).toBe(false);
    expect(existsSync(path.join(cwd, 'tmp', '.marina_server.pid'))).toBe(false);
    expect(existsSync(path.join(cwd, 'key_file.json'))).toBe(false);
    expect(readFileSync(path.join(cwd, 'logs', 'marina.log'), 'utf8')).toContain('Marina is ready.');

    const stopAgain = await runServe(cwd, ['--stop']);
    expect(stopAgain.stdout).toContain('Marina is not currently running.');
  });

  it('finishes a request in flight when --stop sends SIGTERM', async () => {
    const cwd = workDir();
    writeManifest(path.join(cwd, 'store', 'sleepy'), { modelName: 'sleepy', handler: 'sleepy_handler.mjs' });
    writeFileSync(path.join(cwd, 'store', 'sleepy', 'sleepy_handler.mjs'), sleepyHandlerSource);

    started.push(cwd);
    const start = await runServe(cwd, ['--start', '--disable-token-auth', '--ts-config', 'config.properties']);
    expect(start.code, start.stderr).toBe(0);
    const pid = pidOf(cwd);

    const base = inferenceUrl(start.stdout);
    const inFlight = fetch(`${base}/predictions/sleepy`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ sleepMs: 2000, value: 42 }),
    });
    // Signal only once the worker is busy with it (management shares the listener here).
    let isBusy = false;
    for (let attempt = 0; attempt < 400 && !isBusy; attempt++) {
      const [description] = (await (await fetch(`${base}/models/sleepy`)).json()) as Array<{
        workers: Array<{ status: string }>;
      }>;
      isBusy = description?.workers.some((worker) => worker.status === 'BUSY') ?? false;
      if (!isBusy) await new Promise((resolve) => setTimeout(resolve, 25));
    }
    expect(isBusy).toBe(true);
    const stop = runServe(cwd, ['--stop']);

    const response = await inFlight;
    expect(response.status).toBe(200);
    expect(await response.json()).toMatchObject({ echo: 42 });
    expect((await stop).stdout).toContain('Marina has stopped.');
    expect(isRunning(pid)).toBe(false);
    expect(readFileSync(path.join(cwd, 'logs', 'marina.log'), 'utf8')).toContain('SIGTERM received');
  });

  it('prints the tail of the log and exits 1 when the server dies during start-up', async () => {
    // The configuration passes the launcher's checks; the child then finds no start-up model it can load and exits 1.
    const cwd = workDir();
    started.push(cwd);
    const start = await runServe(cwd, [
      '--start',
      '--disable-token-auth',
      '--ts-config',
      'config.properties',
      '--models',
      'missing.mar',
    ]);
    expect(start.code).toBe(1);
    expect(start.stderr).toContain('MARINA_ERR_SERVER_START_FAILED');
    expect(start.stderr).toContain('Last lines of');
    expect(start.stderr).toContain('MARINA_ERR_NO_MODEL_LOADED');
    expect(existsSync(path.join(cwd, 'tmp', '.marina_server.pid'))).toBe(false);
  });

  it('reports a configuration error in the terminal without starting anything', async () => {
    const cwd = workDir('job_queue_size=abc');
    const start = await runServe(cwd, ['--start', '--ts-config', 'config.properties']);
    expect(start.code).toBe(1);
    expect(start.stderr).toContain('MARINA_ERR_CONFIG_VALUE_INVALID');
    expect(start.stderr).toContain('config.properties:6: job_queue_size=abc must be integer');
    expect(existsSync(path.join(cwd, 'tmp', '.marina_server.pid'))).toBe(false);
  });
});
