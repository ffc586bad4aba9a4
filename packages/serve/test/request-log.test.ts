/**
 * Requests are visible: every answered request is a line of logs/access_log.log (TorchServe's file
 * and layout, the request id in the thread slot), and the failed ones (401, 404, 413) are lines of
 * the server's own output with time, level, request id and MARINA_ERR code. A real server on loopback with
 * token authorization on, real worker threads.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServer, type RunningServer } from '../src/start-server.ts';
import { formatTerminalLine } from '../src/request-log.ts';
import { testConfig } from './helpers.ts';
import { writeSleepyModel } from './fixtures.ts';
import { useTempDirs } from './temp-dirs.ts';

const makeDir = useTempDirs('marina-request-log-');

describe('the request log', () => {
  let dir: string;
  let server: RunningServer;
  let baseUrl: string;
  let inferenceKey: string;
  const logLines: Array<{ level: string; message: string }> = [];
  const accessLogPath = () => path.join(dir, 'logs', 'access_log.log');
  const answers: Array<{ status: number; requestId: string | null }> = [];

  async function request(url: string, init: RequestInit = {}): Promise<Response> {
    const res = await fetch(`${baseUrl}${url}`, init);
    await res.arrayBuffer();
    answers.push({ status: res.status, requestId: res.headers.get('x-request-id') });
    return res;
  }

  beforeAll(async () => {
    dir = makeDir();
    await writeSleepyModel(path.join(dir, 'store'), 'sleepy');
    const address = { protocol: 'http' as const, host: '127.0.0.1', port: 0, raw: 'http://127.0.0.1:0' };
    const config = testConfig(
      {
        inferenceAddress: address,
        managementAddress: address,
        metricsAddress: address,
        enableMetricsApi: false,
        disableTokenAuthorization: false,
        modelStore: path.join(dir, 'store'),
        loadModels: 'all',
        maxRequestBytes: 4096,
      },
      dir,
    );
    server = await startServer(config, { log: (level, message) => logLines.push({ level, message }), requestLog: {} });
    baseUrl = server.listening.find((entry) => entry.api === 'inference')!.url;
    inferenceKey = (JSON.parse(readFileSync(config.keyFilePath, 'utf8')) as { inference: { key: string } }).inference
      .key;
  });

  afterAll(async () => {
    await server?.close();
  });

  it('writes every request to access_log.log and the failed ones to the log, with their request ids', async () => {
    const auth = { authorization: `Bearer ${inferenceKey}` };
    expect(
      (
        await request('/predictions/sleepy', {
          method: 'POST',
          headers: { ...auth, 'content-type': 'application/json' },
          body: JSON.stringify({ value: 1 }),
        })
      ).status,
    ).toBe(200);
    expect(
      (
        await request('/predictions/sleepy', {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ value: 1 }),
        })
      ).status,
    ).toBe(401);
    expect((await request('/no/such/route', { headers: auth })).status).toBe(404);
    expect(
      (
        await request('/predictions/sleepy', {
          method: 'POST',
          headers: { ...auth, 'content-type': 'application/octet-stream' },
          body: Buffer.alloc(8192),
        })
      ).status,
    ).toBe(413);
    // Closing flushes and closes the log files.
    await server.close();

    const accessLines = readFileSync(accessLogPath(), 'utf8').trimEnd().split('\n');
    expect(accessLines).toHaveLength(4);
    const parsed = accessLines.map((line) => {
      const match =
        /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d,\d{3} \[INFO \] (\S+) ACCESS_LOG - \/127\.0\.0\.1:\d+ "(GET|POST) (\S+) HTTP\/1\.1" (\d{3}) (\d+)$/.exec(
          line,
        );
      expect(match, line).not.toBeNull();
      return { url: match![3], status: Number(match![4]), requestId: match![1] };
    });
    expect(parsed.map((entry) => [entry.url, entry.status])).toEqual([
      ['/predictions/sleepy', 200],
      ['/predictions/sleepy', 401],
      ['/no/such/route', 404],
      ['/predictions/sleepy', 413],
    ]);
    // The id in the access log is the one the client got in x-request-id.
    expect(parsed.map((entry) => entry.requestId)).toEqual(answers.map((answer) => answer.requestId));

    // The server's log: the three failures, as warnings, with id, route, status and (where Marina answered) its code.
    const requestLines = logLines.filter((line) => /^\[[0-9a-f-]{36}\] /.test(line.message));
    expect(requestLines.map((line) => line.level)).toEqual(['warn', 'warn', 'warn']);
    expect(requestLines[0]!.message).toContain(`[${answers[1]!.requestId}] POST /predictions/sleepy 401 `);
    expect(requestLines[1]!.message).toMatch(
      new RegExp(`^\\[${answers[2]!.requestId}\\] GET /no/such/route 404 \\d+\\.\\d ms MARINA_ERR_ROUTE_NOT_FOUND$`),
    );
    expect(requestLines[2]!.message).toMatch(
      new RegExp(
        `^\\[${answers[3]!.requestId}\\] POST /predictions/sleepy 413 \\d+\\.\\d ms MARINA_ERR_REQUEST_TOO_LARGE$`,
      ),
    );
  });

  it("puts the registry's and start-up loading's reports in the server's log", async () => {
    const other = makeDir();
    await writeSleepyModel(path.join(other, 'store'), 'sleepy');
    const address = { protocol: 'http' as const, host: '127.0.0.1', port: 0, raw: 'http://127.0.0.1:0' };
    const lines: Array<{ level: string; message: string }> = [];
    const config = testConfig(
      {
        inferenceAddress: address,
        managementAddress: address,
        metricsAddress: address,
        enableMetricsApi: false,
        modelStore: path.join(other, 'store'),
        loadModels: [{ url: 'sleepy' }, { url: 'missing.mar' }],
      },
      other,
    );
    const second = await startServer(config, { log: (level, message) => lines.push({ level, message }) });
    try {
      expect(second.failed).toHaveLength(1);
      expect(lines).toContainEqual({
        level: 'error',
        message: expect.stringContaining('model missing.mar was not loaded: Model not found at:'),
      });
    } finally {
      await second.close();
    }
  });

  it('formats the lines of the server output with time and level', () => {
    expect(formatTerminalLine('warn', 'something', new Date('2026-11-24T20:59:01.123Z'))).toBe(
      '2026-11-24T20:59:01.123Z WARN something',
    );
  });
});
