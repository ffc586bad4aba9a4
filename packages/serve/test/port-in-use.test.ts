/**
 * A port in use stops `serve` before any model loads, with MARINA_ERR_ADDRESS_IN_USE naming the
 * address and the config key, on the terminal and without colour codes; in the foreground and
 * for a background --start (where the launcher checks before it starts the child).
 */
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { createServer, type AddressInfo, type Server } from 'node:net';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runServe, serveArgs } from './serve-cli.ts';
import { writeModelFolder } from './helpers.ts';
import { useTempDirs } from './temp-dirs.ts';

const makeDir = useTempDirs('marina-port-in-use-');
let busy: Server;
let busyPort: number;

beforeAll(async () => {
  busy = createServer();
  await new Promise<void>((resolve) => busy.listen({ host: '127.0.0.1', port: 0 }, resolve));
  busyPort = (busy.address() as AddressInfo).port;
});
afterAll(() => new Promise<void>((resolve) => busy.close(() => resolve())));

/** A working folder whose model's handler leaves a marker file when a worker loads it. */
async function workDir(
  addresses: string[] = [
    'inference_address=http://127.0.0.1:0',
    `management_address=http://127.0.0.1:${busyPort}`,
    'enable_metrics_api=false',
  ],
): Promise<{ cwd: string; marker: string }> {
  const cwd = makeDir();
  const marker = path.join(cwd, 'model-was-loaded');
  mkdirSync(path.join(cwd, 'tmp'));
  await writeModelFolder({
    dir: path.join(cwd, 'store', 'marker'),
    modelName: 'marker',
    handler: 'marker_handler.mjs',
    files: {
      'marker_handler.mjs': `import { writeFileSync } from 'node:fs';\nexport function initialize() { writeFileSync(${JSON.stringify(marker)}, 'loaded'); }\nexport function handle(data) { return data.map(() => 'ok'); }\n`,
    },
  });
  writeFileSync(path.join(cwd, 'config.properties'), [...addresses, 'model_store=store', 'load_models=all'].join('\n'));
  return { cwd, marker };
}

function expectAddressInUse(result: { code: number | null; stderr: string }, configFile: string) {
  expect(result.code).toBe(1);
  expect(result.stderr).toContain(
    `MARINA_ERR_ADDRESS_IN_USE: the management API cannot listen on http://127.0.0.1:${busyPort}`,
  );
  expect(result.stderr).toContain(`set management_address in ${configFile} to a free port`);
  // biome-ignore lint/suspicious/noControlCharactersInRegex: the check is that no terminal escape (ESC [) reaches a file.
  expect(result.stderr).not.toMatch(/\x1b\[/);
}

describe('a port in use', { timeout: 120_000 }, () => {
  it('stops serve --foreground before any model loads', async () => {
    const { cwd, marker } = await workDir();
    const result = await runServe(cwd, serveArgs('--foreground'));
    expectAddressInUse(result, path.join(cwd, 'config.properties'));
    expect(existsSync(marker)).toBe(false);
  });

  it('stops a background serve --start in the launcher, before the server process starts', async () => {
    const { cwd, marker } = await workDir();
    const result = await runServe(cwd, serveArgs('--start'));
    expectAddressInUse(result, path.join(cwd, 'config.properties'));
    expect(existsSync(marker)).toBe(false);
    expect(existsSync(path.join(cwd, 'logs', 'marina.log'))).toBe(false);
    expect(existsSync(path.join(cwd, 'tmp', '.marina_server.pid'))).toBe(false);
  });
});

describe('a gRPC port in use', { timeout: 120_000 }, () => {
  const grpcBusy = () => [
    'inference_address=http://127.0.0.1:0',
    'management_address=http://127.0.0.1:0',
    `grpc_inference_port=${busyPort}`,
    'grpc_management_port=0',
    'enable_metrics_api=false',
  ];

  it("stops serve --foreground as an HTTP port does, not with grpc-js's 'No address added'", async () => {
    const { cwd, marker } = await workDir(grpcBusy());
    const result = await runServe(cwd, serveArgs('--foreground'));
    expect(result.code).toBe(1);
    expect(result.stderr).toContain(
      `MARINA_ERR_ADDRESS_IN_USE: the gRPC inference API cannot listen on grpc://127.0.0.1:${busyPort}`,
    );
    expect(result.stderr).toContain(`set grpc_inference_port in ${path.join(cwd, 'config.properties')} to a free port`);
    expect(result.stderr).not.toContain('No address added');
    expect(existsSync(marker)).toBe(false);
  });

  it('stops a background serve --start in the launcher', async () => {
    const { cwd, marker } = await workDir(grpcBusy());
    const result = await runServe(cwd, serveArgs('--start'));
    expect(result.code).toBe(1);
    expect(result.stderr).toContain('MARINA_ERR_ADDRESS_IN_USE: the gRPC inference API cannot listen on');
    expect(existsSync(marker)).toBe(false);
    expect(existsSync(path.join(cwd, 'tmp', '.marina_server.pid'))).toBe(false);
  });

  it('names both keys when the configuration puts gRPC on the port of an HTTP API', async () => {
    const { cwd } = await workDir([
      'inference_address=http://127.0.0.1:0',
      'management_address=http://127.0.0.1:0',
      'grpc_inference_port=0',
      'grpc_management_port=18931',
      'metrics_address=http://127.0.0.1:18931',
      'enable_metrics_api=true',
    ]);
    const result = await runServe(cwd, serveArgs('--foreground'));
    expect(result.code).toBe(1);
    expect(result.stderr).toContain(
      'MARINA_ERR_ADDRESS_IN_USE: the gRPC management API cannot listen on grpc://127.0.0.1:18931: the metrics API (metrics_address) is set to the same port.',
    );
  });
});
