/**
 * One snapshot per management call, as TorchServe (its test_snapshot.py counts `*snap*.cfg`):
 * a register that also starts workers changes the registry twice (the version, then its workers
 * up) and still writes one `-snapshot.cfg`, holding the final state; start-up and a graceful stop
 * write one `-startup.cfg` and one `-shutdown.cfg`. Real server, real workers, files on disk.
 */
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServer } from '../src/start-server.ts';
import { call, createWorkspace, opsConfig, packModel, type Workspace } from './ops-harness.ts';

let workspace: Workspace;
beforeAll(async () => {
  workspace = await createWorkspace('marina-snapshot-per-call-');
  await packModel(workspace.store, { modelName: 'affine' });
}, 60_000);
afterAll(() => workspace?.cleanup());

const named = async (dir: string, kind: string) =>
  (await readdir(dir)).filter((n) => n.endsWith(`-${kind}.cfg`)).sort();

describe('snapshots written by management calls', () => {
  it('writes one -snapshot.cfg per changing call, with the state the call left', { timeout: 60_000 }, async () => {
    const snapshotDir = join(workspace.root, 'logs', 'config');
    const server = await startServer({
      ...opsConfig(workspace),
      isSnapshotEnabled: true,
      snapshotDir,
      logDir: join(workspace.root, 'logs'),
    });
    try {
      const api = server.listening.find((l) => l.api === 'management')!.url;
      expect(await named(snapshotDir, 'startup')).toHaveLength(1);
      expect(await named(snapshotDir, 'snapshot')).toHaveLength(0);

      const registered = await call(api, 'POST', '/models?url=affine.mar&initial_workers=1&synchronous=true');
      expect(registered.status, registered.text).toBe(200);
      const afterRegister = await named(snapshotDir, 'snapshot');
      expect(afterRegister).toHaveLength(1);
      const text = await readFile(join(snapshotDir, afterRegister[0]!), 'utf8');
      expect(text).toMatch(/"affine":\{"1\.0":\{[^}]*"minWorkers":1,"maxWorkers":1/);

      expect((await call(api, 'PUT', '/models/affine?min_worker=2&max_worker=2')).status).toBe(202);
      expect(await named(snapshotDir, 'snapshot')).toHaveLength(2);
      expect((await call(api, 'DELETE', '/models/affine')).status).toBe(200);
      expect(await named(snapshotDir, 'snapshot')).toHaveLength(3);
    } finally {
      await server.close();
    }
    expect(await named(snapshotDir, 'startup')).toHaveLength(1);
    expect(await named(snapshotDir, 'shutdown')).toHaveLength(1);
  });
});
