/**
 * Model downloads are bounded (issue 9): an idle limit (a server that stops sending), a total
 * limit (one that trickles), cancellation when the management client goes away, a cap on
 * downloads at once, and no partial file left in the model store after any of these. Before,
 * only the 10-minute total limit existed. Real Marina server and a real origin server, both on
 * 127.0.0.1; the test waits on the origin's events (request seen, response closed).
 */
import { once } from 'node:events';
import { readdir } from 'node:fs/promises';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createWorkspace, opsConfig, startOps, waitFor, type OpsServer, type Workspace } from './ops-harness.ts';

let workspace: Workspace;
let ops: OpsServer;
let origin: Server;
let originUrl: string;
/** Requests the origin has seen, by path, with a promise of their response's close. */
const seen = new Map<string, { closed: Promise<void> }>();
const waiters = new Map<string, () => void>();
const open = new Set<ServerResponse>();

/** Resolves once the origin has received a request for `path`. */
function requestSeen(path: string): Promise<void> {
  if (seen.has(path)) return Promise.resolve();
  return new Promise((resolve) => waiters.set(path, resolve));
}

beforeAll(async () => {
  workspace = await createWorkspace('marina-download-bounds-');
  origin = createServer((req: IncomingMessage, res: ServerResponse) => {
    open.add(res);
    const closed = once(res, 'close').then(() => undefined);
    closed.then(() => open.delete(res));
    seen.set(req.url!, { closed });
    waiters.get(req.url!)?.();
    res.writeHead(200, { 'content-type': 'application/octet-stream' });
    // Every path starts like a zip, then: stall (send nothing more) or trickle (a byte every 20 ms).
    res.write(Buffer.from('PK\x03\x04'));
    if (req.url!.startsWith('/trickle')) {
      const timer = setInterval(() => res.write('x'), 20);
      res.on('close', () => clearInterval(timer));
    }
  });
  origin.listen(0, '127.0.0.1');
  await once(origin, 'listening');
  originUrl = `http://127.0.0.1:${(origin.address() as AddressInfo).port}`;
  ops = await startOps(
    opsConfig(workspace, {
      allowed_urls: 'http://127\\.0\\.0\\.1:[0-9]+/.*',
      download_idle_timeout_ms: '300',
      download_timeout_ms: '1500',
      max_concurrent_downloads: '1',
    }),
  );
}, 60_000);
afterAll(async () => {
  await ops?.close();
  for (const res of open) res.destroy();
  origin?.close();
  await workspace?.cleanup();
});

const register = (path: string, signal?: AbortSignal) =>
  fetch(`${ops.api}/models?url=${encodeURIComponent(`${originUrl}${path}`)}`, {
    method: 'POST',
    ...(signal ? { signal } : {}),
  });

async function storeFiles(): Promise<string[]> {
  return readdir(workspace.store);
}

describe('a model download', () => {
  it('that stops sending is cut off by download_idle_timeout_ms, and its partial file removed', async () => {
    const response = await register('/stall.mar');
    const body = (await response.json()) as { marinaCode: string; message: string };
    expect(response.status).toBe(400);
    expect(body.marinaCode).toBe('MARINA_ERR_DOWNLOAD_TIMEOUT');
    expect(body.message).toContain('download_idle_timeout_ms');
    await seen.get('/stall.mar')!.closed;
    expect(await storeFiles()).toEqual([]);
  });

  it('that trickles (never idle) is cut off by download_timeout_ms', async () => {
    const response = await register('/trickle.mar');
    const body = (await response.json()) as { marinaCode: string; message: string };
    expect(response.status).toBe(400);
    expect(body.marinaCode).toBe('MARINA_ERR_DOWNLOAD_TIMEOUT');
    expect(body.message).toContain('download_timeout_ms');
    await seen.get('/trickle.mar')!.closed;
    expect(await storeFiles()).toEqual([]);
  });

  it('is cancelled when the management client goes away, and frees its slot', async () => {
    const client = new AbortController();
    const pending = register('/trickle-abandoned.mar', client.signal).catch((error: Error) => error);
    await requestSeen('/trickle-abandoned.mar');
    // The only slot is taken: a second download is refused at once.
    const busy = await register('/stall-second.mar');
    expect(busy.status).toBe(503);
    expect(((await busy.json()) as { marinaCode: string }).marinaCode).toBe('MARINA_ERR_DOWNLOADS_BUSY');
    expect(seen.has('/stall-second.mar')).toBe(false);

    client.abort();
    expect(await pending).toBeInstanceOf(Error);
    // Marina closes its request to the origin long before download_timeout_ms would have.
    await seen.get('/trickle-abandoned.mar')!.closed;
    await waitFor('the partial download to be removed', async () => (await storeFiles()).length === 0);
    // The slot is free again: the next download starts (and ends on its own idle limit).
    const next = await register('/stall-third.mar');
    expect(((await next.json()) as { marinaCode: string }).marinaCode).toBe('MARINA_ERR_DOWNLOAD_TIMEOUT');
  });
});
