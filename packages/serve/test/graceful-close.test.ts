import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp, type MarinaApp } from '../src/index.ts';
import { tempDir, testConfig } from './helpers.ts';
import { writeSleepyModel } from './fixtures.ts';

describe('close()', () => {
  let dir: { path: string; cleanup: () => Promise<void> };
  let app: MarinaApp;

  beforeAll(async () => {
    dir = await tempDir();
    const folder = await writeSleepyModel(dir.path, 'sleepy', 'minWorkers: 1\nbatchSize: 1\n');
    app = await buildApp(testConfig({}, dir.path));
    await app.registry.register({ url: 'sleepy', archivePath: folder, synchronous: true });
    await app.inference.listen({ host: '127.0.0.1', port: 0 });
  });

  afterAll(async () => {
    await app?.close();
    await dir?.cleanup();
  });

  it('lets running and queued requests finish, then refuses new ones and stops the workers', async () => {
    const address = app.inference.server.address() as { port: number };
    const url = `http://127.0.0.1:${address.port}/predictions/sleepy`;
    const post = (value: number) => fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ sleepMs: 300, value }) });
    const inFlight = [post(1), post(2)];
    await new Promise((r) => setTimeout(r, 100));
    const closed = app.close();
    const responses = await Promise.all(inFlight);
    expect(responses.map((r) => r.status)).toEqual([200, 200]);
    expect(await Promise.all(responses.map(async (r) => (await r.json()).echo))).toEqual([1, 2]);
    await closed;
    await expect(app.registry.predict({ modelName: 'sleepy', requestId: 'x', input: { body: { sleepMs: 0 } } })).rejects.toMatchObject({ code: 'MARINA_ERR_SERVER_CLOSING' });
  });
});
