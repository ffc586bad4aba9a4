/** How a snapshot turns back into registrations, and what of the config file it carries. */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { registrationsFromSnapshot, snapshotPropertiesFromConfigFile } from '../src/snapshot/restore-snapshot.ts';

const entry = {
  defaultVersion: true,
  marName: 'resnet.mar',
  url: 'resnet.mar',
  minWorkers: 2,
  maxWorkers: 3,
  batchSize: 4,
  maxBatchDelay: 0,
  responseTimeout: 30,
};

describe('registrationsFromSnapshot', () => {
  it('registers every version again with its default flag, worker range, batching and timeout', () => {
    const registrations = registrationsFromSnapshot(
      {
        modelStore: '/old/store',
        models: {
          resnet: {
            '1.0': entry,
            '2.0': { ...entry, defaultVersion: false, marName: 'resnet_v2.mar', url: 'resnet_v2.mar' },
          },
        },
      },
      { modelStore: '/srv/store' },
    );
    expect(registrations).toEqual([
      expect.objectContaining({
        modelName: 'resnet',
        snapshotVersion: '1.0',
        url: 'resnet.mar',
        archivePath: '/srv/store/resnet.mar',
        isDefault: true,
        minWorkers: 2,
        maxWorkers: 3,
        batchSize: 4,
        maxBatchDelayMs: 0,
        responseTimeoutSec: 30,
        isDownloaded: false,
      }),
      expect.objectContaining({ snapshotVersion: '2.0', archivePath: '/srv/store/resnet_v2.mar', isDefault: false }),
    ]);
  });

  it("finds file:// archives where they are, downloads in the store, and falls back to the snapshot's store", () => {
    const [file, downloaded, absolute] = registrationsFromSnapshot(
      {
        modelStore: '/old/store',
        models: {
          a: { '1.0': { ...entry, url: 'file:///models/a.mar', marName: 'a.mar' } },
          b: { '1.0': { ...entry, url: 'https://host/x/b.mar', marName: 'b.mar' } },
          c: { '1.0': { ...entry, url: '/abs/c', marName: 'c' } },
        },
      },
      { modelStore: undefined },
    );
    expect(file).toMatchObject({ archivePath: '/models/a.mar', isDownloaded: false });
    expect(downloaded).toMatchObject({
      archivePath: '/old/store/b.mar',
      url: 'https://host/x/b.mar',
      isDownloaded: true,
    });
    expect(absolute).toMatchObject({ archivePath: '/abs/c' });
  });
});

describe('snapshotPropertiesFromConfigFile', () => {
  let dir: string | undefined;
  afterEach(() => (dir ? rm(dir, { recursive: true, force: true }) : undefined));

  it("copies the file's keys as written, without load_models, model_store or model_snapshot", async () => {
    dir = await mkdtemp(join(tmpdir(), 'marina-snap-props-'));
    const file = join(dir, 'config.properties');
    await writeFile(
      file,
      'inference_address=http://0.0.0.0:8080\nload_models=all\nmodel_store=store\nmodel_snapshot={}\nallowed_urls=$$URLS$$\njob_queue_size=\n',
    );
    expect(await snapshotPropertiesFromConfigFile(file)).toEqual({
      inference_address: 'http://0.0.0.0:8080',
      allowed_urls: '$$URLS$$',
    });
    expect(await snapshotPropertiesFromConfigFile(undefined)).toEqual({});
  });
});
