import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { beforeEach, describe, expect, it } from 'vitest';
import { createSnapshotStore, readLatestSnapshot, SNAPSHOT_FILE_PATTERN } from '../src/snapshot/snapshot-store.ts';
import { StandInRegistry } from './management-stand-in-registry.ts';

let dir: string;
let registry: StandInRegistry;
let nowMs: number;

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'marina-snap-'));
  registry = new StandInRegistry();
  nowMs = Date.parse('2025-03-01T12:00:00.000Z');
  return () => rm(dir, { recursive: true, force: true });
});

const store = (over: Partial<Parameters<typeof createSnapshotStore>[0]> = {}) =>
  createSnapshotStore({
    registry,
    snapshotDir: dir,
    modelStore: '/srv/model-store',
    debounceMs: 5,
    now: () => nowMs++,
    ...over,
  });

describe('snapshot writing', () => {
  it("writes TorchServe's <timestamp>-snapshot.cfg with model_snapshot after a change", async () => {
    const snapshots = store();
    await registry.register({
      url: 'resnet.mar',
      archivePath: '/srv/model-store/resnet.mar',
      initialWorkers: 2,
      batchSize: 4,
    });
    await snapshots.close();
    const files = await readdir(dir);
    expect(files).toEqual(['20250301120000000-snapshot.cfg']);
    const text = await readFile(join(dir, files[0]!), 'utf8');
    expect(text).toContain('model_store=/srv/model-store');
    const line = text.split('\n').find((l) => l.startsWith('model_snapshot='))!;
    expect(JSON.parse(line.slice('model_snapshot='.length))).toEqual({
      name: '20250301120000000-snapshot.cfg',
      modelCount: 1,
      created: Date.parse('2025-03-01T12:00:00.000Z'),
      models: {
        resnet: {
          // TorchServe's entry fields only (wlm/Model.java getModelState) ...
          '1.0': {
            defaultVersion: true,
            marName: 'resnet.mar',
            minWorkers: 2,
            maxWorkers: 2,
            batchSize: 4,
            maxBatchDelay: 100,
            responseTimeout: 120,
          },
        },
      },
      // ... and Marina's own beside them, under a key TorchServe's reader ignores.
      marina: { models: { resnet: { '1.0': { url: 'resnet.mar' } } } },
    });
  });

  it('coalesces a burst of changes into one file and keeps only the newest N', async () => {
    const snapshots = store({ keep: 2 });
    await registry.register({ url: 'a.mar', archivePath: '/s/a.mar' });
    await registry.register({ url: 'b.mar', archivePath: '/s/b.mar' });
    await snapshots.flush();
    expect(await readdir(dir)).toHaveLength(1);
    await snapshots.write();
    await snapshots.write();
    await snapshots.close();
    const files = (await readdir(dir)).sort();
    expect(files).toHaveLength(2);
    expect(files.every((f) => SNAPSHOT_FILE_PATTERN.test(f))).toBe(true);
  });

  it('round-trips Windows paths and non-ASCII names through the properties escaping', async () => {
    const snapshots = store({ modelStore: 'C:\\models\\store' });
    await registry.register({ url: 'modèle.mar', archivePath: 'C:\\models\\store\\modèle.mar', modelName: 'modèle' });
    await snapshots.close();
    const snap = await readLatestSnapshot(dir);
    expect(snap?.modelStore).toBe('C:\\models\\store');
    expect(snap?.models.modèle?.['1.0']?.url).toBe('modèle.mar');
  });
});

describe('readLatestSnapshot', () => {
  it('returns undefined when there is no snapshot folder', async () => {
    await expect(readLatestSnapshot(join(dir, 'absent'))).resolves.toBeUndefined();
  });

  it('restores registrations, defaults and worker settings from the newest file', async () => {
    const snapshots = store();
    await registry.register({ url: 'm_v1.0.mar', archivePath: '/s/m_v1.0.mar' });
    await registry.register({ url: 'm_v2.0.mar', archivePath: '/s/m_v2.0.mar' });
    registry.setDefault('m', '2.0');
    await registry.scale('m', '2.0', { minWorkers: 2, maxWorkers: 5, synchronous: true });
    await snapshots.close();
    const snap = await readLatestSnapshot(dir);
    expect(snap?.models.m?.['2.0']).toMatchObject({ defaultVersion: true, minWorkers: 2, maxWorkers: 5 });
    expect(snap?.models.m?.['1.0']).toMatchObject({ defaultVersion: false });
  });

  it('survives a crash mid-write: a leftover temp file and a truncated newest file fall back to the previous snapshot', async () => {
    const snapshots = store();
    await registry.register({ url: 'good.mar', archivePath: '/s/good.mar' });
    await snapshots.close();
    const [good] = await readdir(dir);
    const goodText = await readFile(join(dir, good!), 'utf8');
    // A crash during write leaves a half-written temp file (ignored) ...
    await writeFile(join(dir, '.snapshot-999-deadbeef.tmp'), goodText.slice(0, goodText.length / 2));
    // ... and a truncated newer file, as a copy from a non-atomic writer would.
    await writeFile(join(dir, '20990101000000000-snapshot.cfg'), goodText.slice(0, goodText.length - 20));
    const warnings: string[] = [];
    const snap = await readLatestSnapshot(dir, { onWarning: (w) => warnings.push(w) });
    expect(snap?.path).toBe(join(dir, good!));
    expect(Object.keys(snap!.models)).toEqual(['good']);
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toContain('20990101000000000-snapshot.cfg');
    // A new store cleans up the leftover temp file.
    const next = store();
    await next.close();
    expect((await readdir(dir)).some((f) => f.endsWith('.tmp'))).toBe(false);
  });

  it('skips a file whose modelCount does not match its models', async () => {
    await writeFile(join(dir, '20250101000000000-snapshot.cfg'), 'model_snapshot={"modelCount":2,"models":{}}\n');
    const warnings: string[] = [];
    await expect(readLatestSnapshot(dir, { onWarning: (w) => warnings.push(w) })).resolves.toBeUndefined();
    expect(warnings[0]).toContain('modelCount is 2');
  });
});
