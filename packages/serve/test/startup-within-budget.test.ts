/**
 * Start-up under model_memory_budget: load_models may name more than fits (the rest are
 * registered, not loaded, and the log says so), and a restart from a snapshot restores every
 * registration with its pin and settings, loading what fits: pinned first, then the most
 * recently used. Real worker threads and model folders on disk; each model carries 60 MB of
 * (sparse) padding, so its estimate (about 136 MiB) decides what fits in 300 MiB: two of four.
 */
import { mkdir, truncate, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp } from '../src/index.ts';
import { startServer } from '../src/start-server.ts';
import { writeSleepyModel } from './fixtures.ts';
import { tempDir, testConfig } from './helpers.ts';
import { call, opsConfig } from './ops-harness.ts';

const MiB = 2 ** 20;
const NAMES = ['a', 'b', 'c', 'd'];

describe('start-up within a memory budget', () => {
  let dir: Awaited<ReturnType<typeof tempDir>>;
  let store: string;

  beforeAll(async () => {
    dir = await tempDir('marina-startup-budget-');
    store = join(dir.path, 'store');
    for (const name of NAMES) {
      await writeSleepyModel(store, name, 'batchSize: 1\n');
      const padding = join(store, name, 'padding.bin');
      await writeFile(padding, '');
      await truncate(padding, 60e6);
    }
  });

  afterAll(async () => {
    await dir?.cleanup();
  });

  it('loads the load_models that fit, registers the rest without loading, and says so', async () => {
    const messages: string[] = [];
    const app = await buildApp(
      testConfig({ modelStore: store, loadModels: 'all', residency: { memoryBudgetBytes: 300 * MiB } }, dir.path),
      { log: (_level, message) => messages.push(message) },
    );
    try {
      const result = await app.loadStartupModels();
      expect(result.failed).toEqual([]);
      // Loaded in parallel: they finish in any order.
      expect(result.loaded.map((m) => m.modelName).sort()).toEqual(['a', 'b']);
      expect(result.registered.map((m) => m.modelName)).toEqual(['c', 'd']);
      expect(app.registry.list().map((m) => m.modelName)).toEqual(NAMES);
      expect(app.registry.describe('c')[0]).toMatchObject({ state: 'registered', workers: [] });
      expect(messages.filter((m) => m.includes('registered, not loaded'))).toHaveLength(2);
      // Each load says what it counted against the budget, and from which measure: never measured
      // yet, its estimate from its files (60 MB of padding and its model: about 136 MiB).
      const counted = messages
        .filter((m) => m.includes('resident (startup)'))
        .map((m) => /; counted (\d+) MiB of model_memory_budget \(its estimate from its files\)$/.exec(m)?.[1]);
      expect(counted).toHaveLength(2);
      for (const mibs of counted) expect(Number(mibs)).toBeGreaterThan(100);
    } finally {
      await app.close();
    }
  });

  it('restores a snapshot under a budget: every registration back, pinned then most recently used loaded', async () => {
    const entry = (name: string, lastUsed: string, extra: Record<string, unknown> = {}) => ({
      '1.0': {
        defaultVersion: true,
        marName: name,
        url: name,
        minWorkers: 1,
        maxWorkers: 1,
        batchSize: 1,
        maxBatchDelay: 100,
        responseTimeout: 120,
        lastUsed,
        ...extra,
      },
    });
    const snapshot = {
      name: 'startup.cfg',
      modelCount: 4,
      created: Date.now(),
      models: {
        // a: least recently used but pinned; d: the most recently used; c: idle-unloads after 600 s.
        a: entry('a', '2026-01-01T00:00:00.000Z', { pinned: true }),
        b: entry('b', '2026-01-02T00:00:00.000Z'),
        c: entry('c', '2026-01-03T00:00:00.000Z', { idleUnloadSeconds: 600 }),
        d: entry('d', '2026-01-04T00:00:00.000Z'),
      },
    };
    const configDir = join(dir.path, 'config');
    await mkdir(configDir, { recursive: true });
    const configFile = join(configDir, '20260105000000000-snapshot.cfg');
    await writeFile(configFile, `model_store=${store}\nmodel_snapshot=${JSON.stringify(snapshot)}\n`);
    const workspace = { root: dir.path, store, cleanup: async () => undefined };
    const config = {
      ...opsConfig(workspace, { model_memory_budget: '300MiB', enable_metrics_api: 'false' }),
      configFile,
      isSnapshotEnabled: false,
      logDir: join(dir.path, 'logs'),
    };
    const server = await startServer(config);
    try {
      const api = server.listening.find((l) => l.api === 'inference')!.url;
      const describe = async (name: string) => (await call(api, 'GET', `/models/${name}`)).json[0];
      const described = Object.fromEntries(await Promise.all(NAMES.map(async (n) => [n, await describe(n)] as const)));
      expect(Object.fromEntries(NAMES.map((n) => [n, described[n].state]))).toEqual({
        a: 'resident',
        b: 'registered',
        c: 'registered',
        d: 'resident',
      });
      expect(described.a.pinned).toBe(true);
      expect(described.c.idleUnloadSeconds).toBe(600);
      expect(described.b.lastUsed).toBe('2026-01-02T00:00:00.000Z');
      expect(server.failed).toEqual([]);
    } finally {
      await server.close();
    }
  });
});
