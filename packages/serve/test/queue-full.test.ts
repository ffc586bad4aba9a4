import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp, type MarinaApp } from '../src/index.ts';
import { tempDir, testConfig } from './helpers.ts';
import { writeSleepyModel } from './fixtures.ts';
import { WORKER_PIPELINE_DEPTH } from '../src/workers/worker.ts';

describe('a full job queue', () => {
  let dir: { path: string; cleanup: () => Promise<void> };
  let app: MarinaApp;

  beforeAll(async () => {
    dir = await tempDir();
    const folder = await writeSleepyModel(dir.path, 'sleepy', 'minWorkers: 1\nbatchSize: 1\njobQueueSize: 2\n');
    app = await buildApp(testConfig({}, dir.path));
    await app.registry.register({ url: 'sleepy', archivePath: folder, synchronous: true });
  });

  afterAll(async () => {
    await app?.close();
    await dir?.cleanup();
  });

  it('answers 503 at once with Retry-After and a message naming the queue, while queued requests still succeed', async () => {
    const send = () => app.inference.inject({ method: 'POST', url: '/predictions/sleepy', payload: { sleepMs: 400, value: 1 } });
    const first = send();
    // Let the first request reach the worker: it runs it and takes WORKER_PIPELINE_DEPTH - 1 more
    // ahead (batchSize 1), and the queue's two places are what is left.
    await new Promise((r) => setTimeout(r, 100));
    const accepted = WORKER_PIPELINE_DEPTH + 2;
    const rest = await Promise.all(Array.from({ length: accepted + 2 }, send));
    const all = [await first, ...rest];
    const ok = all.filter((r) => r.statusCode === 200);
    const rejected = all.filter((r) => r.statusCode === 503);
    expect(ok).toHaveLength(accepted);
    expect(rejected).toHaveLength(3);
    for (const r of rejected) {
      expect(r.headers['retry-after']).toBe('1');
      const body = r.json();
      expect(body).toMatchObject({ code: 503, type: 'ServiceUnavailableException', marinaCode: 'MARINA_ERR_QUEUE_FULL' });
      expect(body.message).toContain("model 'sleepy'");
      expect(body.message).toContain('queue is full (2 requests waiting');
      expect(body.message).not.toContain('no worker');
    }
  });
});
