/**
 * TorchServe's log files are written in batches (every 50 ms, or when 64 KiB have gathered), not a
 * write per line: these check that batching loses and reorders nothing, for lines of every size
 * and alphabet, and that a process ending on an uncaught error still writes what it had gathered.
 */
import { spawn } from 'node:child_process';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { createServerLogs } from '../src/logging/server-logs.ts';
import { tempDir } from './helpers.ts';

const LINE =
  /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d,\d{3} \[INFO \] (\S+) ACCESS_LOG - \/127\.0\.0\.1:1 "POST (\S+) HTTP\/1\.1" 200 2$/;
const serverLogsSource = fileURLToPath(new URL('../src/logging/server-logs.ts', import.meta.url));

describe('log file batching', () => {
  let dir: { path: string; cleanup: () => Promise<void> } | undefined;
  afterEach(async () => {
    await dir?.cleanup();
    dir = undefined;
  });

  it('writes every line in order: many lines past the buffer size, non-ASCII ones, and one larger than the buffer', async () => {
    dir = await tempDir();
    // Lines are capped at 4 KiB by default: raise the cap so one line is larger than the 64 KiB buffer.
    const logs = createServerLogs({ logDir: dir.path, limits: { maxLineBytes: 1_000_000 } });
    const urls: string[] = [];
    for (let i = 0; i < 3000; i++) urls.push(i % 7 === 0 ? `/predictions/modèle-ü-${i}-€` : `/predictions/m-${i}`);
    urls.splice(1500, 0, `/predictions/${'x'.repeat(100_000)}`);
    urls.forEach((url, i) => {
      logs.access({ client: '127.0.0.1:1', method: 'POST', url, statusCode: 200, durationMs: 2, requestId: `id-${i}` });
    });
    await logs.close();
    const lines = (await readFile(join(dir.path, 'access_log.log'), 'utf8')).split('\n');
    expect(lines.pop()).toBe('');
    expect(lines).toHaveLength(urls.length);
    lines.forEach((line, i) => {
      const match = LINE.exec(line);
      expect(match, line.slice(0, 200)).not.toBeNull();
      expect(match![1]).toBe(`id-${i}`);
      expect(match![2]).toBe(urls[i]);
    });
  });

  it('writes the gathered lines of a process that ends on an uncaught error', async () => {
    dir = await tempDir();
    const script = join(dir.path, 'crash.mts');
    await writeFile(
      script,
      [
        `import { createServerLogs } from ${JSON.stringify(serverLogsSource)};`,
        `const logs = createServerLogs({ logDir: ${JSON.stringify(dir.path)} });`,
        `for (let i = 0; i < 3; i++) logs.access({ client: '127.0.0.1:1', method: 'POST', url: '/predictions/m-' + i, statusCode: 200, durationMs: 2, requestId: 'id-' + i });`,
        `setImmediate(() => { throw new Error('crash on purpose'); });`,
      ].join('\n'),
    );
    const { code, stderr } = await new Promise<{ code: number | null; stderr: string }>((resolve, reject) => {
      const child = spawn(process.execPath, ['--import', 'tsx', script], { stdio: ['ignore', 'ignore', 'pipe'] });
      let text = '';
      child.stderr.on('data', (chunk: Buffer) => (text += chunk.toString()));
      child.on('error', reject);
      child.on('close', (exitCode) => resolve({ code: exitCode, stderr: text }));
    });
    expect(code, stderr).toBe(1);
    expect(stderr).toContain('crash on purpose');
    const lines = (await readFile(join(dir.path, 'access_log.log'), 'utf8')).trimEnd().split('\n');
    expect(lines.map((line) => LINE.exec(line)?.[2])).toEqual([
      '/predictions/m-0',
      '/predictions/m-1',
      '/predictions/m-2',
    ]);
  });
});
