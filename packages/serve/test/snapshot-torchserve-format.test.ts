/**
 * A TorchServe user's snapshot migrates: `--ts-config <TorchServe's own -snapshot.cfg>` (Java
 * Properties.store escaping, GSON's pretty-printed model_snapshot, no `url` field, runtimeType)
 * restores its models and scale, and --models is ignored while restoring.
 */
import { readdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../src/config/load-config.ts';
import { startServer } from '../src/start-server.ts';
import { parseSnapshot } from '../src/snapshot/snapshot-store.ts';
import { call, createWorkspace, packModel, type Workspace } from './ops-harness.ts';

let workspace: Workspace;
beforeAll(async () => {
  workspace = await createWorkspace('marina-ts-snapshot-');
  await packModel(workspace.store, { modelName: 'm', modelVersion: '1.0', fileName: 'm_v1.mar' });
  await packModel(workspace.store, { modelName: 'm', modelVersion: '2.0', fileName: 'm_v2.mar' });
  await packModel(workspace.store, { modelName: 'other' });
}, 60_000);
afterAll(() => workspace?.cleanup());

/** What TorchServe 0.12's FSSnapshotSerializer writes: Properties.store of the config plus GSON's pretty JSON. */
function torchServeSnapshot(store: string): string {
  const json = JSON.stringify(
    {
      name: '20240101120000000-snapshot.cfg',
      modelCount: 2,
      created: 1704110400000,
      models: {
        m: {
          '1.0': {
            defaultVersion: false,
            marName: 'm_v1.mar',
            minWorkers: 0,
            maxWorkers: 0,
            batchSize: 1,
            maxBatchDelay: 100,
            responseTimeout: 120,
            runtimeType: 'python',
          },
          '2.0': {
            defaultVersion: true,
            marName: 'm_v2.mar',
            minWorkers: 2,
            maxWorkers: 2,
            batchSize: 4,
            maxBatchDelay: 50,
            responseTimeout: 30,
            runtimeType: 'python',
          },
        },
      },
    },
    null,
    2,
  );
  // java.util.Properties.store: '#' comment lines, ':' and '=' escaped, newlines as \n.
  const escapeValue = (value: string) =>
    value
      .replace(/\\/g, '\\\\')
      .replace(/\n/g, '\\n')
      .replace(/[:=#!]/g, (c) => `\\${c}`);
  return [
    '#Saving snapshot',
    '#Mon Jan 01 12:00:00 UTC 2024',
    `inference_address=${escapeValue('http://127.0.0.1:0')}`,
    `management_address=${escapeValue('http://127.0.0.1:0')}`,
    `metrics_address=${escapeValue('http://127.0.0.1:0')}`,
    `model_store=${escapeValue(store)}`,
    'disable_token_authorization=true',
    `model_snapshot=${escapeValue(json)}`,
    'tsConfigFile=logs/config/20240101115900000-startup.cfg',
    '',
  ].join('\n');
}

describe("--ts-config with a snapshot in TorchServe's own format", () => {
  it('restores its models, default version and scale, and ignores --models', async () => {
    const file = join(workspace.root, '20240101120000000-snapshot.cfg');
    await writeFile(file, torchServeSnapshot(workspace.store));
    expect(Object.keys(parseSnapshot(file, await readFile(file, 'utf8')).models)).toEqual(['m']);

    const env = { LOG_LOCATION: join(workspace.root, 'logs') };
    const config = await loadConfig({
      cliOptions: { tsConfig: file, models: ['other.mar'] },
      env,
      cwd: workspace.root,
    });
    const server = await startServer({ ...config, extractionCacheDir: join(workspace.root, 'cache') });
    try {
      expect(server.restoredFrom).toBe(file);
      const api = server.listening.find((l) => l.api === 'management')!.url;
      expect((await call(api, 'GET', '/models')).json.models).toEqual([{ modelName: 'm', modelUrl: 'm_v2.mar' }]);
      const [v2] = (await call(api, 'GET', '/models/m')).json;
      expect(v2).toMatchObject({
        modelVersion: '2.0',
        minWorkers: 2,
        maxWorkers: 2,
        batchSize: 4,
        maxBatchDelay: 50,
        responseTimeout: 30,
      });
      expect(v2.workers).toHaveLength(2);
      const all = (await call(api, 'GET', '/models/m/all')).json as Array<{
        modelVersion: string;
        minWorkers: number;
        workers: unknown[];
      }>;
      expect(all.map((d) => [d.modelVersion, d.minWorkers, d.workers.length]).sort()).toEqual([
        ['1.0', 0, 0],
        ['2.0', 2, 2],
      ]);
      expect(server.failed).toEqual([]);

      // Marina writes TorchServe's -startup.cfg with TorchServe's entry fields.
      const names = await readdir(join(workspace.root, 'logs', 'config'));
      const startup = names.find((n) => /^\d{17}-startup\.cfg$/.test(n))!;
      const written = parseSnapshot(startup, await readFile(join(workspace.root, 'logs', 'config', startup), 'utf8'));
      // The file itself: exactly TorchServe's fields in `models`, Marina's url under `marina`.
      const raw = JSON.parse(
        (await readFile(join(workspace.root, 'logs', 'config', startup), 'utf8'))
          .split('\n')
          .find((line) => line.startsWith('model_snapshot='))!
          .slice('model_snapshot='.length),
      );
      expect(Object.keys(raw.models.m['2.0'])).toEqual([
        'defaultVersion',
        'marName',
        'minWorkers',
        'maxWorkers',
        'batchSize',
        'maxBatchDelay',
        'responseTimeout',
        'startupTimeout',
        'runtimeType',
      ]);
      expect(raw.marina.models.m['2.0']).toEqual({ url: expect.any(String) });
      // Read back, the two are one entry again.
      expect(written.models.m!['2.0']!.url).toBe(raw.marina.models.m['2.0'].url);
    } finally {
      await server.close();
    }
  }, 60_000);
});
