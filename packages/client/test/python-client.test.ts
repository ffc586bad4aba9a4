import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startRealServer, type RealServer } from './real-server.ts';

const PYTHON_DIR = fileURLToPath(new URL('../../../clients/python/', import.meta.url));

// clients/python/marina_client.py's own unittest suite, run with the machine's python3 against a
// real `serve` (token authorization on), so `pnpm test` covers the Python client too.
describe('clients/python/marina_client.py against a real server', { timeout: 180_000 }, () => {
  let server: RealServer;

  beforeAll(async () => {
    server = await startRealServer();
  }, 120_000);

  afterAll(async () => {
    await server?.stop();
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
    const child = spawn('python3', ['-m', 'unittest', '-v', 'test_marina_client'], {
      cwd: PYTHON_DIR,
      env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.on('data', (d: Buffer) => (output += d.toString()));
    child.stderr.on('data', (d: Buffer) => (output += d.toString()));
    const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
    expect(output, output).toMatch(/Ran 9 tests/);
    expect(code, output).toBe(0);
  });
});
