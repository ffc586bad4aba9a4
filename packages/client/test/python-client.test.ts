import { spawn } from 'node:child_process';
import { copyFileSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startRealServer, type RealServer } from './real-server.ts';

const PYTHON_DIR = fileURLToPath(new URL('../../../clients/python/', import.meta.url));

/** Runs a command to its end; resolves with its exit code and output. */
function run(command: string, args: string[], options: { cwd: string; env?: NodeJS.ProcessEnv }) {
  return new Promise<{ code: number | null; output: string }>((resolve, reject) => {
    const child = spawn(command, args, {
      cwd: options.cwd,
      env: options.env ?? process.env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.on('data', (d: Buffer) => (output += d.toString()));
    child.stderr.on('data', (d: Buffer) => (output += d.toString()));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, output }));
  });
}

// The Python client installed as a user installs it (a fresh venv, pip with no index: the build
// backend is the setuptools the venv brings), then its own unittest suite run with that venv's
// python, outside the source folder, against a real `serve` (token authorization on).
describe('the Python client, installed with pip, against a real server', { timeout: 240_000 }, () => {
  let server: RealServer;
  let workDir: string;
  let python: string;

  beforeAll(async () => {
    workDir = mkdtempSync(join(tmpdir(), 'marina-python-client-'));
    const venv = join(workDir, 'venv');
    const created = await run('python3', ['-m', 'venv', venv], { cwd: workDir });
    expect(created.code, created.output).toBe(0);
    python = join(venv, 'bin', 'python');
    const installed = await run(
      join(venv, 'bin', 'pip'),
      ['install', '--no-build-isolation', '--no-index', PYTHON_DIR],
      { cwd: workDir },
    );
    expect(installed.code, installed.output).toBe(0);
    // The suite runs from a folder of its own, so `import marina_client` finds the installed module.
    copyFileSync(join(PYTHON_DIR, 'test_marina_client.py'), join(workDir, 'test_marina_client.py'));
    server = await startRealServer();
  }, 240_000);

  afterAll(async () => {
    await server?.stop();
    if (workDir) rmSync(workDir, { recursive: true, force: true });
  });

  it('installs marina_client from site-packages, with the version of pyproject.toml', async () => {
    const result = await run(
      python,
      [
        '-c',
        'import importlib.metadata as m, marina_client as c; print(c.__file__); print(m.version("marina-client"), c.__version__)',
      ],
      { cwd: workDir },
    );
    expect(result.code, result.output).toBe(0);
    expect(result.output).toMatch(/site-packages\/marina_client\.py\n/);
    const version = /^version = "([^"]+)"$/m.exec(readFileSync(join(PYTHON_DIR, 'pyproject.toml'), 'utf8'))![1]!;
    expect(result.output).toContain(`\n${version} ${version}\n`);
  });

  it('passes test_marina_client.py', async () => {
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      MARINA_TEST_URL: server.url,
      MARINA_TEST_MANAGEMENT_URL: server.managementUrl,
      MARINA_TEST_KEY_FILE: server.keyFile,
      MARINA_TEST_IMAGE: server.imagePath,
      MARINA_TEST_QUEUE_SIZE: String(server.jobQueueSize),
      PYTHONDONTWRITEBYTECODE: '1',
    };
    delete env.MARINA_TOKEN;
    delete env.MARINA_KEY_FILE;
    const result = await run(python, ['-m', 'unittest', '-v', 'test_marina_client'], { cwd: workDir, env });
    expect(result.output, result.output).toMatch(/Ran 9 tests/);
    expect(result.code, result.output).toBe(0);
  });
});
