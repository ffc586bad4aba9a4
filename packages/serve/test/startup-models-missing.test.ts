/**
 * A start whose load_models names a missing .mar: with nothing else to serve, `serve` says so on
 * the terminal and exits 1; when another model loaded, it serves that one and lists the failure.
 */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { runServe, serveArgs } from './serve-cli.ts';
import { writeSleepyModel } from './fixtures.ts';
import { useTempDirs } from './temp-dirs.ts';

const makeDir = useTempDirs('marina-startup-missing-');
const started: string[] = [];

afterAll(async () => {
  for (const cwd of started) await runServe(cwd, ['--stop']);
});

async function workDir(): Promise<string> {
  const cwd = makeDir();
  mkdirSync(path.join(cwd, 'tmp'));
  await writeSleepyModel(path.join(cwd, 'store'), 'sleepy');
  writeFileSync(
    path.join(cwd, 'config.properties'),
    [
      'inference_address=http://127.0.0.1:0',
      'management_address=http://127.0.0.1:0',
      'enable_metrics_api=false',
      'model_store=store',
    ].join('\n'),
  );
  return cwd;
}

describe('load_models naming a missing .mar', { timeout: 120_000 }, () => {
  it('stops serve --foreground with exit 1 when no model loaded, saying which and why', async () => {
    const cwd = await workDir();
    const result = await runServe(cwd, serveArgs('--foreground', '--models', 'missing.mar'));
    expect(result.code).toBe(1);
    expect(result.stderr).toContain(
      'Model failed to load: missing.mar: MARINA_ERR_MODEL_LOAD_FAILED: Model not found at:',
    );
    expect(result.stderr).toContain('MARINA_ERR_NO_MODEL_LOADED: none of the 1 start-up model(s) loaded');
    expect(result.stdout).not.toContain('Marina is ready.');
    expect(existsSync(path.join(cwd, 'tmp', '.marina_server.pid'))).toBe(false);
  });

  it('fails a background serve --start on the terminal with exit 1', async () => {
    const cwd = await workDir();
    const result = await runServe(cwd, serveArgs('--start', '--models', 'missing.mar'));
    expect(result.code).toBe(1);
    expect(result.stderr).toContain('Model failed to load: missing.mar');
    expect(result.stderr).toContain('MARINA_ERR_NO_MODEL_LOADED');
  });

  it('serves the models that loaded and lists the missing one', async () => {
    const cwd = await workDir();
    started.push(cwd);
    const result = await runServe(cwd, serveArgs('--start', '--models', 'missing.mar', 'sleepy'));
    expect(result.code).toBe(0);
    expect(result.stdout).toContain('Model loaded: sleepy (version 1.0)');
    // Progress, forwarded by the background server to this terminal (not a TTY here: plain lines), and in its log.
    expect(result.stdout).toMatch(/Loading model sleepy\.\.\.\nModel sleepy \(version 1\.0\) ready in \d+\.\d s\n/);
    expect(readFileSync(path.join(cwd, 'logs', 'marina.log'), 'utf8')).toMatch(/Loading model sleepy\.\.\.\n/);
    expect(result.stderr).toContain('Model failed to load: missing.mar');
    const stopped = await runServe(cwd, ['--stop']);
    expect(stopped.stdout).toContain('Marina has stopped.');
  });
});
