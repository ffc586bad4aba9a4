/**
 * Issue 37's leaks, against a real server on loopback: log lines without a cap, log files without
 * rotation, and answers nobody reads kept for ever. The slow-reader test waits on the server closing
 * the socket (a short response_write_timeout), never on a guess of the machine's speed.
 */
import { existsSync } from 'node:fs';
import { readdir, readFile, stat } from 'node:fs/promises';
import { connect } from 'node:net';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { createServerLogs } from '../src/logging/server-logs.ts';
import { call, createWorkspace, opsConfig, packModel, startOps, waitFor } from './ops-harness.ts';

describe('log lines and files are bounded', { timeout: 60_000 }, () => {
  it('caps a line at log_max_line_bytes with a marker and its original length', async () => {
    const ws = await createWorkspace('marina-adversarial-lines-');
    try {
      const logs = createServerLogs({ logDir: ws.root, limits: { maxLineBytes: 4096 } });
      logs.ts('error', `register failed for ${'u'.repeat(5_000_000)}`);
      logs.model('warn', 'a short line');
      await logs.close();
      const lines = (await readFile(join(ws.root, 'ts_log.log'), 'utf8')).split('\n').filter(Boolean);
      expect(lines).toHaveLength(2);
      expect(Buffer.byteLength(lines[0]!)).toBeLessThanOrEqual(4096);
      expect(lines[0]).toMatch(/… \[truncated: 50000\d\d bytes\]$/);
      expect(lines[1]).toContain('a short line');
    } finally {
      await ws.cleanup();
    }
  });

  it('quotes a long request target cut in access_log.log, and rolls files over at log_max_file_bytes, keeping log_max_backup_files', async () => {
    const ws = await createWorkspace('marina-adversarial-rotation-');
    try {
      const ops = await startOps(
        opsConfig(ws, { log_max_file_bytes: '20000', log_max_backup_files: '2', disable_token_authorization: 'false' }),
      );
      const logDir = join(ws.root, 'logs');
      // Unauthenticated requests with a 15,000-character query: each is a 401, and each is logged.
      for (let i = 0; i < 80; i++)
        expect((await call(ops.api, 'GET', `/models?q=${'x'.repeat(15_000)}`)).status).toBe(401);
      await ops.close();
      const names = (await readdir(logDir)).filter((name) => name.startsWith('access_log.log'));
      expect(names.sort()).toEqual(['access_log.log', 'access_log.log.1', 'access_log.log.2']);
      for (const name of names) {
        const text = await readFile(join(logDir, name), 'utf8');
        // A file is rolled once it reaches the limit: at most one line over it.
        expect((await stat(join(logDir, name))).size, name).toBeLessThanOrEqual(20_000);
        for (const line of text.split('\n').filter(Boolean)) {
          expect(Buffer.byteLength(line), name).toBeLessThan(2048);

          expect(line, name).toContain('(15010 characters)');
        }
      }
      expect(existsSync(join(logDir, 'access_log.log.3'))).toBe(false);
    } finally {
      await ws.cleanup();
    }
  });
});

describe('answers nobody reads', { timeout: 90_000 }, () => {
  it('a client that never reads its answer is disconnected after response_write_timeout, and its bytes are freed', async () => {
    const ws = await createWorkspace('marina-adversarial-slow-reader-');
    try {
      await packModel(ws.store, { modelName: 'affine' });
      const ops = await startOps(
        opsConfig(ws, {
          load_models: 'affine.mar',
          response_write_timeout: '0.3',
          max_request_size: String(64 * 1024 * 1024),
          max_response_size: String(64 * 1024 * 1024),
        }),
      );
      try {
        // 2.5 M rows of 4 FP32 values in and out, as binary tensors: 40 MB of answer, far more than
        // the kernel's socket buffers on both sides can take while the client reads nothing.
        const rows = 2_500_000;
        const data = Buffer.alloc(rows * 4 * 4);
        const header = Buffer.from(
          JSON.stringify({
            inputs: [
              { name: 'input', datatype: 'FP32', shape: [rows, 4], parameters: { binary_data_size: data.length } },
            ],
            outputs: [{ name: 'output', parameters: { binary_data: true } }],
          }),
        );
        const { port } = new URL(ops.api);
        const socket = connect(Number(port), '127.0.0.1');
        await new Promise((resolve) => socket.once('connect', resolve));
        let received = 0;
        let isReading = false;
        socket.on('data', (chunk: Buffer) => {
          received += chunk.length;
          // Read the head of the answer, then nothing more: the rest waits in the server's buffers.
          if (!isReading) socket.pause();
        });
        const closed = new Promise((resolve) => socket.once('close', resolve));
        socket.on('error', () => undefined);
        socket.write(
          `POST /v2/models/affine/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\nInference-Header-Content-Length: ${header.length}\r\nContent-Length: ${header.length + data.length}\r\n\r\n`,
        );
        socket.write(header);
        socket.write(data);
        // The server closes the connection: the test waits for that (its log line), whatever the
        // machine's speed; then the client reads what reached it, and sees the connection end short.
        await waitFor(
          'the server to close the connection',
          () => ops.messages.some((m) => m.includes('response_write_timeout')),
          80_000,
        );
        isReading = true;
        socket.resume();
        await closed;
        expect(received).toBeGreaterThan(0);
        expect(received).toBeLessThan(data.length);
        const metrics = await fetch(`${ops.metrics}/metrics`).then((r) => r.text());
        expect(metrics).toMatch(/^marina_response_connections_closed_total 1$/m);
        expect(metrics).toMatch(/^marina_pending_response_bytes 0$/m);
        expect(ops.messages.join('\n')).toContain('response_write_timeout');
        // The server still answers.
        expect((await call(ops.api, 'GET', '/ping')).status).toBe(200);
      } finally {
        await ops.close();
      }
    } finally {
      await ws.cleanup();
    }
  });
});
