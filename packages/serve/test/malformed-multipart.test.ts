/**
 * A multipart body the parser cannot read is the client's mistake: 400 MARINA_ERR_BAD_REQUEST,
 * not 500 MARINA_ERR_INTERNAL (issue 9). A body over max_request_size says how big it was, in
 * the bytes that were really declared or received. Real server, raw HTTP on loopback.
 */
import { request } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createWorkspace, opsConfig, packModel, startOps, type OpsServer, type Workspace } from './ops-harness.ts';

let workspace: Workspace;
let ops: OpsServer;

beforeAll(async () => {
  workspace = await createWorkspace('marina-multipart-');
  await packModel(workspace.store, { modelName: 'm' });
  ops = await startOps(opsConfig(workspace, { load_models: 'm.mar', max_request_size: '4096' }));
}, 60_000);
afterAll(async () => {
  await ops?.close();
  await workspace?.cleanup();
});

/** Sends `body` (string chunks; chunked when `chunked`) and resolves with status and parsed JSON. */
function send(options: {
  headers: Record<string, string>;
  chunks: string[];
  chunked?: boolean;
}): Promise<{ status: number; json: any }> {
  const url = new URL(`${ops.api}/predictions/m`);
  return new Promise((resolve, reject) => {
    const headers = {
      ...options.headers,
      ...(options.chunked ? {} : { 'content-length': String(Buffer.byteLength(options.chunks.join(''))) }),
    };
    const req = request({ host: url.hostname, port: url.port, path: url.pathname, method: 'POST', headers }, (res) => {
      let text = '';
      res.on('data', (chunk: Buffer) => (text += chunk.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, json: JSON.parse(text) }));
    });
    req.on('error', reject);
    for (const chunk of options.chunks) req.write(chunk);
    req.end();
  });
}

describe('malformed multipart', () => {
  it.each([
    [
      'a body cut off mid-part',
      'multipart/form-data; boundary=abc',
      '--abc\r\nContent-Disposition: form-data; name="data"\r\n\r\nhello',
    ],
    ['a boundary that never appears', 'multipart/form-data; boundary=abc', 'no boundary here'],
    ['no boundary parameter', 'multipart/form-data', '--abc\r\n\r\n'],
    [
      'a __proto__ field',
      'multipart/form-data; boundary=abc',
      '--abc\r\nContent-Disposition: form-data; name="__proto__"\r\n\r\n{}\r\n--abc--\r\n',
    ],
  ])('%s is 400 MARINA_ERR_BAD_REQUEST', async (_what, contentType, body) => {
    const response = await send({ headers: { 'content-type': contentType }, chunks: [body] });
    expect(response.status, JSON.stringify(response.json)).toBe(400);
    expect(response.json.marinaCode).toBe('MARINA_ERR_BAD_REQUEST');
  });
});

describe('a body over max_request_size', () => {
  it('with Content-Length: the message gives the declared bytes', async () => {
    const response = await send({
      headers: { 'content-type': 'application/octet-stream' },
      chunks: ['x'.repeat(5000)],
    });
    expect(response.status).toBe(413);
    expect(response.json.marinaCode).toBe('MARINA_ERR_REQUEST_TOO_LARGE');
    expect(response.json.message).toContain('declares 5000 bytes');
  });

  it('chunked: the message counts what arrived, not a header', async () => {
    const response = await send({
      headers: { 'content-type': 'application/octet-stream' },
      chunks: ['x'.repeat(3000), 'y'.repeat(3000)],
      chunked: true,
    });
    expect(response.status).toBe(413);
    expect(response.json.message).toContain('more than 4096 bytes arrived');
  });
});
