/**
 * Regression tests for manifest paths outside the archive: a manifest whose serializedFile is
 * `../../…/other/model.onnx` was refused by validate but served by serve. Every file a manifest
 * names now goes through one containment helper (resolveManifestPath) in the validator and the
 * server alike, and the error does not reveal whether the outside path exists. Real server on
 * 127.0.0.1, real archives written byte by byte, a real ONNX model outside the store.
 */
import { mkdir, readFile, symlink } from 'node:fs/promises';
import { join } from 'node:path';
import { MANIFEST_PATH, validateArchive } from '@marina/archive';
import { manifestText, writeFiles, writeRawZip } from '@marina/archive/testing';
import { writeTinyTensorModel } from '@marina/model-zoo';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { call, createWorkspace, opsConfig, startOps, type OpsServer, type Workspace } from './ops-harness.ts';

let workspace: Workspace;
let ops: OpsServer;
let outsideModel: string;

beforeEach(async () => {
  workspace = await createWorkspace('marina-sec-manifest-');
  await mkdir(join(workspace.root, 'other'));
  outsideModel = join(workspace.root, 'other', 'model.onnx');
  await writeTinyTensorModel({ outputPath: outsideModel });
  ops = await startOps(opsConfig(workspace));
});
afterEach(async () => {
  await ops?.close();
  await workspace?.cleanup();
});

/** `../` enough times to climb from any extraction folder to `/`, then an absolute path. */
const climbTo = (absolute: string) => `${'../'.repeat(40)}${absolute.replace(/^\//, '')}`;

async function writeEscapingArchive(fileName: string, serializedFile: string): Promise<void> {
  await writeRawZip(join(workspace.store, fileName), [
    {
      name: MANIFEST_PATH,
      data: manifestText({ modelName: fileName.replace(/\.mar$/, ''), serializedFile, handler: 'tensor' }),
    },
  ]);
}

async function registeredModels(): Promise<string[]> {
  return ((await call(ops.api, 'GET', '/models')).json.models as Array<{ modelName: string }>).map((m) => m.modelName);
}

describe('a manifest serializedFile outside the archive', () => {
  it("is refused by serve at register, with the validator's code, and nothing is registered", async () => {
    await writeEscapingArchive('escape.mar', climbTo(outsideModel));
    const response = await call(ops.api, 'POST', '/models?url=escape.mar&initial_workers=1&synchronous=true');
    expect(response.status).toBe(400);
    expect(response.json).toMatchObject({ marinaCode: 'MARINA_ERR_ARCHIVE_PATH_ESCAPE' });
    expect(await registeredModels()).toEqual([]);
    const report = await validateArchive(join(workspace.store, 'escape.mar'), { isModelLoadChecked: false });
    expect(report.problems.map((p) => p.code)).toContain('MARINA_ERR_ARCHIVE_PATH_ESCAPE');
  });

  it('gets the same answer whether the outside file exists or not', async () => {
    await writeEscapingArchive('exists.mar', climbTo(outsideModel));
    await writeEscapingArchive('absent.mar', climbTo(join(workspace.root, 'other', 'no-such-model.onnx')));
    const exists = await call(ops.api, 'POST', '/models?url=exists.mar&initial_workers=1&synchronous=true');
    const absent = await call(ops.api, 'POST', '/models?url=absent.mar&initial_workers=1&synchronous=true');
    expect(exists.status).toBe(absent.status);
    expect(exists.json.marinaCode).toBe(absent.json.marinaCode);
    expect(exists.json.message.replace('model.onnx', 'X')).toBe(absent.json.message.replace('no-such-model.onnx', 'X'));
  });

  it('is refused when a folder archive names a link that points outside', async () => {
    const folder = join(workspace.store, 'linked');
    await writeFiles(folder, {
      [MANIFEST_PATH]: manifestText({ modelName: 'linked', serializedFile: 'model.onnx', handler: 'tensor' }),
    });
    await symlink(outsideModel, join(folder, 'model.onnx'));
    const response = await call(ops.api, 'POST', '/models?url=linked&initial_workers=1&synchronous=true');
    expect(response.status).toBe(400);
    expect(response.json).toMatchObject({ marinaCode: 'MARINA_ERR_ARCHIVE_PATH_ESCAPE' });
    expect(response.text).not.toContain(outsideModel);
    expect(await registeredModels()).toEqual([]);
  });

  it('still serves an archive whose serializedFile is inside it', async () => {
    await writeRawZip(join(workspace.store, 'inside.mar'), [
      {
        name: MANIFEST_PATH,
        data: manifestText({ modelName: 'inside', serializedFile: 'sub/model.onnx', handler: 'tensor' }),
      },
      { name: 'sub/model.onnx', data: await readFile(outsideModel) },
    ]);
    const response = await call(ops.api, 'POST', '/models?url=inside.mar&initial_workers=1&synchronous=true');
    expect(response.status).toBe(200);
    const predicted = await call(ops.api, 'POST', '/predictions/inside', {
      body: { inputs: { input: { shape: [1, 4], data: [1, 2, 3, 4] } } },
    });
    expect(predicted.status).toBe(200);
  });
});
