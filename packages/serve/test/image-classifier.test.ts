import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { writeSampleJpeg } from '@marina/model-zoo';
import { buildApp, type MarinaApp } from '../src/index.ts';
import type { BatchDoneEvent } from '../src/registry/model-registry-api.ts';
import { tempDir, testConfig } from './helpers.ts';
import { writeClassifierModel } from './fixtures.ts';

const labels = [
  'tench',
  'goldfish',
  'great white shark',
  'tiger shark',
  'hammerhead',
  'electric ray',
  'stingray',
  'cock',
  'hen',
  'ostrich',
];

describe('image_classifier with real sharp and onnxruntime', () => {
  let dir: { path: string; cleanup: () => Promise<void> };
  let app: MarinaApp;
  let jpeg: Buffer;

  beforeAll(async () => {
    dir = await tempDir();
    await writeSampleJpeg({ outputPath: join(dir.path, 'sample.jpg'), width: 320, height: 240 });
    jpeg = await readFile(join(dir.path, 'sample.jpg'));
    app = await buildApp(testConfig({}, dir.path));
    const labelled = await writeClassifierModel(dir.path, 'labelled', {
      labels,
      modelConfigYaml: 'batchSize: 4\nmaxBatchDelay: 50\n',
    });
    const other = await writeClassifierModel(dir.path, 'other', {
      inputSize: 48,
      numClasses: 7,
      modelConfigYaml: 'handler:\n  resize: 64\n  mean: [0.5, 0.5, 0.5]\n  std: [0.5, 0.5, 0.5]\n  topk: 3\n',
    });
    await app.registry.register({ url: 'labelled', archivePath: labelled, synchronous: true });
    await app.registry.register({ url: 'other', archivePath: other, synchronous: true });
  });

  afterAll(async () => {
    await app?.close();
    await dir?.cleanup();
  });

  it('reports where each batch spent its time: waiting for decoding, inference and postprocess', async () => {
    const batches: BatchDoneEvent[] = [];
    const onBatch = (e: BatchDoneEvent) => batches.push(e);
    app.registry.events.on('batch', onBatch);
    try {
      const res = await app.inference.inject({
        method: 'POST',
        url: '/predictions/labelled',
        headers: { 'content-type': 'application/octet-stream' },
        payload: jpeg,
      });
      expect(res.statusCode).toBe(200);
    } finally {
      app.registry.events.off('batch', onBatch);
    }
    expect(batches).toHaveLength(1);
    const { stages, inferenceMs } = batches[0]!;
    expect(stages).toBeDefined();
    for (const ms of [stages!.preprocessWaitMs, stages!.inferenceMs, stages!.postprocessMs])
      expect(ms).toBeGreaterThanOrEqual(0);
    expect(stages!.inferenceMs).toBeGreaterThan(0);
    // The stages happen inside the batch's round trip to the worker.
    expect(stages!.preprocessWaitMs + stages!.inferenceMs + stages!.postprocessMs).toBeLessThanOrEqual(inferenceMs);
  });

  it('answers the top-5 {label: probability} in rank order, with labels from index_to_name.json', async () => {
    const res = await app.inference.inject({
      method: 'POST',
      url: '/predictions/labelled',
      headers: { 'content-type': 'application/octet-stream' },
      payload: jpeg,
    });
    expect(res.statusCode).toBe(200);
    expect(res.headers['content-type']).toContain('application/json');
    const top = res.json() as Record<string, number>;
    const entries = Object.entries(top);
    expect(entries).toHaveLength(5);
    for (const [label, p] of entries) {
      expect(labels).toContain(label);
      expect(p).toBeGreaterThan(0);
      expect(p).toBeLessThanOrEqual(1);
    }
    const probs = entries.map(([, p]) => p);
    expect([...probs].sort((a, b) => b - a)).toEqual(probs);
  });

  it('accepts the image as a multipart field named data, same answer as the raw body', async () => {
    const raw = await app.inference.inject({
      method: 'POST',
      url: '/predictions/labelled',
      payload: jpeg,
      headers: { 'content-type': 'image/jpeg' },
    });
    const boundary = '----marina';
    const body = Buffer.concat([
      Buffer.from(
        `--${boundary}\r\nContent-Disposition: form-data; name="data"; filename="a.jpg"\r\nContent-Type: image/jpeg\r\n\r\n`,
      ),
      jpeg,
      Buffer.from(`\r\n--${boundary}--\r\n`),
    ]);
    const multi = await app.inference.inject({
      method: 'POST',
      url: '/predictions/labelled/1.0',
      payload: body,
      headers: { 'content-type': `multipart/form-data; boundary=${boundary}` },
    });
    expect(multi.statusCode).toBe(200);
    expect(multi.json()).toEqual(raw.json());
  });

  it('serves a model with another input size and normalisation from model-config.yaml, keeping numeric labels in rank order', async () => {
    const res = await app.inference.inject({
      method: 'PUT',
      url: '/predictions/other',
      payload: jpeg,
      headers: { 'content-type': 'application/octet-stream' },
    });
    expect(res.statusCode).toBe(200);
    const text = res.body;
    const keys = [...text.matchAll(/"(\d+)":/g)].map((m) => m[1]);
    expect(keys).toHaveLength(3);
    const probs = Object.values(JSON.parse(text) as Record<string, number>);
    const inTextOrder = keys.map((k) => (JSON.parse(text) as Record<string, number>)[k!]!);
    expect([...inTextOrder].sort((a, b) => b - a)).toEqual(inTextOrder);
    expect(probs).toHaveLength(3);
  });

  it('answers each request of a concurrent burst with its own top-5', async () => {
    const responses = await Promise.all(
      Array.from({ length: 12 }, () =>
        app.inference.inject({
          method: 'POST',
          url: '/predictions/labelled',
          payload: jpeg,
          headers: { 'content-type': 'application/octet-stream' },
        }),
      ),
    );
    const first = responses[0]!.json();
    for (const r of responses) {
      expect(r.statusCode).toBe(200);
      expect(r.json()).toEqual(first);
    }
  });
});
