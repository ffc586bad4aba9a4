/**
 * A client that trickles a chunked upload cannot hold a connection (and its buffered body)
 * forever (issue 9): request_timeout_ms bounds the time to receive a whole request, and the
 * server answers 408 and closes the socket. Before, fastify's requestTimeout was 0 (none).
 * Real server, a raw TCP client on loopback; the test waits for the socket's end, not a clock.
 */
import { connect } from 'node:net';
import { afterAll, beforeAll, expect, it } from 'vitest';
import {
  call,
  createWorkspace,
  opsConfig,
  packModel,
  startOps,
  type OpsServer,
  type Workspace,
} from './ops-harness.ts';

let workspace: Workspace;
let ops: OpsServer;

beforeAll(async () => {
  workspace = await createWorkspace('marina-body-timeout-');
  await packModel(workspace.store, { modelName: 'm' });
  ops = await startOps(opsConfig(workspace, { load_models: 'm.mar', request_timeout_ms: '300' }));
}, 60_000);
afterAll(async () => {
  await ops?.close();
  await workspace?.cleanup();
});

it('a chunked upload that stops sending is answered 408 and its connection closed', async () => {
  const url = new URL(ops.api);
  const socket = connect({ host: url.hostname, port: Number(url.port) });
  let received = '';
  socket.on('data', (chunk: Buffer) => (received += chunk.toString()));
  const closed = new Promise<void>((resolve) => socket.on('close', () => resolve()));
  await new Promise<void>((resolve) => socket.on('connect', () => resolve()));
  socket.write(
    'POST /predictions/m HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{"inp\r\n',
  );
  // Never sends the rest: before the fix this socket stayed open for as long as the client liked.
  await closed;
  expect(received).toMatch(/^HTTP\/1\.1 408/);
});

it('a request sent at once is unaffected', async () => {
  const response = await call(ops.api, 'POST', '/predictions/m', {
    body: { inputs: { input: { shape: [1, 4], data: [1, 2, 3, 4] } } },
  });
  expect(response.status, response.text).toBe(200);
});
