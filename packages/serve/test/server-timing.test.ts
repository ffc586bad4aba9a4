/**
 * Predictions carry a Server-Timing header: queue, the handler's stages (preprocess, inference,
 * postprocess) or the whole handler time, and total; plus x-request-id on every answer.
 * Real worker threads, a real onnxruntime session and sharp decoding.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { writeSampleJpeg } from '@marina/model-zoo';
import { buildApp, type MarinaApp } from '../src/index.ts';
import { serverTimingHeader } from '../src/routes/server-timing.ts';
import { tempDir, testConfig } from './helpers.ts';
import { writeClassifierModel, writeSleepyModel } from './fixtures.ts';

/** `name;dur=1.23;desc="..."` entries as [name, dur]. */
function parseServerTiming(header: string | string[] | number | undefined): Array<[string, number]> {
  expect(typeof header).toBe('string');
  return (header as string).split(', ').map((entry) => {
    const match = /^([a-z]+);dur=(\d+\.\d{2});desc="[^"]*"$/.exec(entry);
    expect(match, entry).not.toBeNull();
    return [match![1]!, Number(match![2])];
  });
}

describe('Server-Timing on predictions', () => {
  let dir: { path: string; cleanup: () => Promise<void> };
  let app: MarinaApp;
  let image: Buffer;

  beforeAll(async () => {
    dir = await tempDir();
    await writeSampleJpeg({ outputPath: join(dir.path, 'good.jpg'), width: 160, height: 120 });
    image = await readFile(join(dir.path, 'good.jpg'));
    app = await buildApp(testConfig({}, dir.path));
    await app.registry.register({
      url: 'classifier',
      archivePath: await writeClassifierModel(dir.path, 'classifier'),
      synchronous: true,
    });
    await app.registry.register({
      url: 'sleepy',
      archivePath: await writeSleepyModel(dir.path, 'sleepy'),
      synchronous: true,
    });
  }, 120_000);

  afterAll(async () => {
    await app?.close();
    await dir?.cleanup();
  });

  it('breaks an image_classifier prediction into queue, preprocess, inference, postprocess and total', async () => {
    const res = await app.inference.inject({
      method: 'POST',
      url: '/predictions/classifier',
      payload: image,
      headers: { 'content-type': 'application/octet-stream' },
    });
    expect(res.statusCode).toBe(200);
    const entries = parseServerTiming(res.headers['server-timing']);
    expect(entries.map(([name]) => name)).toEqual(['queue', 'preprocess', 'inference', 'postprocess', 'total']);
    const byName = Object.fromEntries(entries);
    // The parts lie inside the total (rounding to 0.01 ms each aside).
    expect(byName.queue! + byName.preprocess! + byName.inference! + byName.postprocess!).toBeLessThanOrEqual(
      byName.total! + 0.05,
    );
    expect(byName.inference!).toBeGreaterThan(0);
    expect(res.headers['x-request-id']).toMatch(/^[0-9a-f-]{36}$/);
  });

  it('gives a single-handle() handler its whole worker time as handler', async () => {
    // The handler busy-waits on Date.now(), whose 1 ms steps make a 6 ms wait last more than 5 ms.
    const res = await app.inference.inject({
      method: 'POST',
      url: '/predictions/sleepy',
      payload: { value: 1, sleepMs: 6 },
    });
    expect(res.statusCode).toBe(200);
    const entries = parseServerTiming(res.headers['server-timing']);
    expect(entries.map(([name]) => name)).toEqual(['queue', 'handler', 'total']);
    // Measured in the worker thread, so the handler's whole busy wait is in it.
    expect(Object.fromEntries(entries).handler!).toBeGreaterThanOrEqual(5);
  });

  it('formats the header, clamping negative clock differences to 0', () => {
    expect(
      serverTimingHeader(
        { queueMs: -0.001, workerMs: 3, stages: { preprocessWaitMs: 1, inferenceMs: 1.5, postprocessMs: 0.25 } },
        4,
      ),
    ).toBe(
      'queue;dur=0.00;desc="job queue", preprocess;dur=1.00;desc="decode and preprocess", inference;dur=1.50;desc="model", postprocess;dur=0.25;desc="postprocess", total;dur=4.00;desc="total"',
    );
  });
});
