import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp, type MarinaApp } from '../src/index.ts';
import { tempDir, testConfig } from './helpers.ts';
import { writeSleepyModel } from './fixtures.ts';

describe('a prediction past responseTimeout', () => {
  let dir: { path: string; cleanup: () => Promise<void> };
  let app: MarinaApp;

  beforeAll(async () => {
    dir = await tempDir();
    const folder = await writeSleepyModel(dir.path, 'sleepy', 'minWorkers: 1\n');
    app = await buildApp(testConfig({}, dir.path));
    await app.registry.register({ url: 'sleepy', archivePath: folder, synchronous: true, responseTimeoutSec: 0.5 });
  });

  afterAll(async () => {
    await app?.close();
    await dir?.cleanup();
  });

  it('fails with 504 MARINA_ERR_RESPONSE_TIMEOUT, replaces the worker, and the next request succeeds', async () => {
    const before = app.registry.describe('sleepy')[0]!.workers.map((w) => w.id);
    const slow = await app.inference.inject({ method: 'POST', url: '/predictions/sleepy', payload: { sleepMs: 5000 } });
    expect(slow.statusCode).toBe(504);
    expect(slow.json()).toMatchObject({ code: 504, marinaCode: 'MARINA_ERR_RESPONSE_TIMEOUT' });
    expect(slow.json().message).toContain('responseTimeout (0.5 s)');

    const next = await app.inference.inject({
      method: 'POST',
      url: '/predictions/sleepy',
      payload: { sleepMs: 0, value: 'after' },
    });
    expect(next.statusCode).toBe(200);
    expect(next.json().echo).toBe('after');
    const after = app.registry.describe('sleepy')[0]!.workers.map((w) => w.id);
    expect(after).toHaveLength(1);
    expect(after[0]).not.toBe(before[0]);
  });
});
