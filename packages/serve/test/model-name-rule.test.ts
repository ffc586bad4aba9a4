/**
 * Model names and versions follow the archiver's rule wherever they come from (issue 9): a
 * register parameter, the manifest, or the archive's file name. `__proto__` used to register and
 * then vanish from snapshots; names with `/`, `..` or control characters became URL and file
 * path segments. Real server, real HTTP on loopback, real archives.
 */
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { validateArchive } from '@marina/archive';
import {
  call,
  createWorkspace,
  opsConfig,
  packModel,
  startOps,
  type OpsServer,
  type Workspace,
} from './ops-harness.ts';
import { writeModelFolder } from './helpers.ts';

const handlerSource = 'export function handle(data) { return data.map(() => ({ ok: true })); }\n';
let workspace: Workspace;
let ops: OpsServer;

beforeAll(async () => {
  workspace = await createWorkspace('marina-name-rule-');
  await packModel(workspace.store, { modelName: 'good' });
  for (const [folder, modelName, modelVersion] of [
    ['proto', '__proto__', '1.0'],
    ['dots', 'a..b', '1.0'],
    ['badversion', 'fine', '../1'],
    ['ctrl', 'bell\u0007', '1.0'],
  ] as const) {
    await writeModelFolder({
      dir: join(workspace.store, folder),
      modelName,
      modelVersion,
      handler: 'h.mjs',
      files: { 'h.mjs': handlerSource },
    });
  }
  ops = await startOps(opsConfig(workspace));
}, 60_000);
afterAll(async () => {
  await ops?.close();
  await workspace?.cleanup();
});

describe('register refuses names outside the rule with 400 MARINA_ERR_ARCHIVE_MODEL_NAME_INVALID', () => {
  it.each([
    ['__proto__', '__proto__'],
    ['constructor? no: a leading underscore', '_x'],
    ['a slash', 'a/b'],
    ['a dot-dot', 'a..b'],
    ['a control character', 'x\u0001y'],
    ['a name over 128 characters', 'm'.repeat(129)],
  ])('model_name with %s', async (_what, name) => {
    const response = await call(ops.api, 'POST', `/models?url=good.mar&model_name=${encodeURIComponent(name)}`);
    expect(response.status, response.text).toBe(400);
    expect(response.json.marinaCode).toBe('MARINA_ERR_ARCHIVE_MODEL_NAME_INVALID');
  });

  it.each([
    ['proto', '__proto__'],
    ['dots', 'a..b'],
    ['badversion', '../1'],
    ['ctrl', 'bell'],
  ])('a manifest naming %s', async (folder, shown) => {
    const response = await call(ops.api, 'POST', `/models?url=${folder}`);
    expect(response.status, response.text).toBe(400);
    expect(response.json.marinaCode).toBe('MARINA_ERR_ARCHIVE_MODEL_NAME_INVALID');
    expect(response.json.message).toContain(shown);
    const report = await validateArchive(join(workspace.store, folder));
    expect(report.problems.map((p) => p.code)).toContain('MARINA_ERR_ARCHIVE_MODEL_NAME_INVALID');
  });

  it('nothing was registered, and a name inside the rule still registers', async () => {
    expect((await call(ops.api, 'GET', '/models')).json.models).toEqual([]);
    const response = await call(ops.api, 'POST', `/models?url=good.mar&model_name=${'m'.repeat(128)}`);
    expect(response.status, response.text).toBe(200);
  });
});
