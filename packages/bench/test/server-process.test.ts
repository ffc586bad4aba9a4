import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServer } from '../src/server-process.ts';

/**
 * A stand-in for serve's bin: it reads the generated config.properties, answers GET /ping with 200 on
 * the inference address, and counts its starts in a file. With FAKE_BIND=report it prints the
 * start-up report line serve prints once bound; otherwise it behaves like the process that took the
 * port first (it answers /ping) while the server itself fails to bind: it never reports being
 * bound and exits with MARINA_ERR_ADDRESS_IN_USE once it has answered one ping.
 */
const FAKE_SERVE = `
import { appendFileSync, readFileSync } from 'node:fs';
import { createServer } from 'node:http';
const config = readFileSync(process.argv[process.argv.indexOf('--ts-config') + 1], 'utf8');
const origin = /^inference_address=(.+)$/m.exec(config)[1];
appendFileSync(process.env.FAKE_STARTS, 'start\\n');
const server = createServer((request, response) => {
  response.statusCode = request.url === '/ping' ? 200 : 404;
  response.end('{"status":"Healthy"}', () => {
    if (process.env.FAKE_BIND === 'report') return;
    console.error('MARINA_ERR_ADDRESS_IN_USE: the inference address is in use');
    process.exit(1);
  });
});
server.listen(Number(new URL(origin).port), '127.0.0.1', () => {
  // One write, the bound line first and long text after it, as serve's start-up report.
  if (process.env.FAKE_BIND === 'report') process.stdout.write('Inference API bound to ' + origin + '\\n' + 'x'.repeat(4000) + '\\n');
});
process.on('SIGTERM', () => process.exit(0));
`;

describe('startServer', () => {
  let dir: string;
  let serveBin: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'marina-bench-start-'));
    serveBin = join(dir, 'fake-serve.mjs');
    await writeFile(serveBin, FAKE_SERVE);
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  const options = (name: string, env: Record<string, string>) => ({
    serveBin,
    modelStoreDir: dir,
    archiveFileName: 'm.mar',
    modelName: 'm',
    modelVersion: '1.0',
    workDir: join(dir, name),
    tmpDir: join(dir, 'tmp'),
    startTimeoutMs: 60_000,
    env: { ...env, FAKE_STARTS: join(dir, `${name}.starts`) },
  });

  it('returns once the server reports its inference address bound and /ping answers', async () => {
    const server = await startServer(options('bound', { FAKE_BIND: 'report' }));
    try {
      const response = await fetch(`${server.origin}/ping`);
      expect(response.status).toBe(200);
      expect(await readFile(join(dir, 'bound.starts'), 'utf8')).toBe('start\n');
    } finally {
      await server.stop();
    }
  });

  it('does not take a /ping answered by another process for its server: it starts again on new ports, then fails', async () => {
    await expect(startServer(options('taken', { FAKE_BIND: 'never' }))).rejects.toMatchObject({
      code: 'MARINA_ERR_BENCH_SERVER_START_FAILED',
    });
    // Each start answered a ping yet never bound: all three attempts ran.
    expect(await readFile(join(dir, 'taken.starts'), 'utf8')).toBe('start\nstart\nstart\n');
  });
});
