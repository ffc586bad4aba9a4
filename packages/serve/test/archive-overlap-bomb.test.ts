/**
 * The overlapping-entries zip bomb (issue 9): a central directory that points ten entries at one
 * deflate stream. Each entry passes the per-entry ratio check (the stream really is that size),
 * so before the fix `validate` passed it and every register wrote the stream ten times over.
 * Now listing refuses it before a byte is written, on the server and in the validator alike.
 */
import { readdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { validateArchive } from '@marina/archive';
import { call, createWorkspace, opsConfig, startOps, type OpsServer, type Workspace } from './ops-harness.ts';
import { buildZip, compressibleBytes } from './zip-builder.ts';

const ENTRY_BYTES = 8 * 1024 * 1024;
const handlerSource = 'export function handle(data) { return data.map(() => ({ ok: true })); }\n';
const manifest = JSON.stringify({
  runtime: 'python',
  model: { modelName: 'bomb', modelVersion: '1.0', handler: 'h.mjs' },
  archiverVersion: '0.12.0',
  createdOn: '01/01/2026 00:00:00',
});

let workspace: Workspace;
let ops: OpsServer;
let bombPath: string;

beforeAll(async () => {
  workspace = await createWorkspace('marina-overlap-bomb-');
  const files = [
    { name: 'MAR-INF/MANIFEST.json', data: Buffer.from(manifest) },
    { name: 'h.mjs', data: Buffer.from(handlerSource) },
    { name: 'weights-0.bin', data: compressibleBytes(ENTRY_BYTES) },
  ];
  bombPath = join(workspace.store, 'bomb.mar');
  await writeFile(
    bombPath,
    buildZip({ files, aliasOf: 'weights-0.bin', aliases: Array.from({ length: 9 }, (_, i) => `weights-${i + 1}.bin`) }),
  );
  await writeFile(join(workspace.store, 'honest.mar'), buildZip({ files }));
  ops = await startOps(opsConfig(workspace));
}, 60_000);
afterAll(async () => {
  await ops?.close();
  await workspace?.cleanup();
});

describe('a zip whose entries share one deflate stream', () => {
  it('is refused by register with 400 MARINA_ERR_ARCHIVE_OVERLAPPING_ENTRIES, and nothing is extracted', async () => {
    const response = await call(ops.api, 'POST', '/models?url=bomb.mar');
    expect(response.status).toBe(400);
    expect(response.json.marinaCode).toBe('MARINA_ERR_ARCHIVE_OVERLAPPING_ENTRIES');
    expect(response.json.message).toMatch(/weights-\d\.bin' and 'weights-\d\.bin' share bytes/);
    const cache = await readdir(join(workspace.root, 'cache')).catch(() => []);
    expect(cache).toEqual([]);
    expect((await call(ops.api, 'GET', '/models')).json.models).toEqual([]);
  });

  it('is reported by validate', async () => {
    const report = await validateArchive(bombPath);
    expect(report.problems.map((p) => p.code)).toContain('MARINA_ERR_ARCHIVE_OVERLAPPING_ENTRIES');
  });

  it('the same archive without the aliases registers (the builder makes valid zips)', async () => {
    const response = await call(
      ops.api,
      'POST',
      '/models?url=honest.mar&model_name=honest&initial_workers=1&synchronous=true',
    );
    expect(response.status, response.text).toBe(200);
    const predicted = await call(ops.api, 'POST', '/predictions/honest', { body: {} });
    expect(predicted.json).toEqual({ ok: true });
  });
});
