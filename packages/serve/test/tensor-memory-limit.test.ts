/**
 * A request whose output size follows from its input is bounded before run() (issue 9): the
 * tensor handler computes the bytes of its inputs and of every output whose shape the inputs
 * determine (the affine model's output is [N, 4] for an input [N, 4]) and refuses what is over
 * `handler.maxTensorBytesPerRequest`, with only that request failing.
 */
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { writeTinyTensorModel } from '@marina/model-zoo';
import { startGateApp, type GateApp } from './gate-harness.ts';
import { writeModelFolder } from './helpers.ts';

let t: GateApp;

beforeAll(async () => {
  t = await startGateApp();
  const folder = await writeModelFolder({
    dir: join(t.dir, 'affine'),
    modelName: 'affine',
    handler: 'tensor',
    writeModel: (path) => writeTinyTensorModel({ outputPath: path }),
    modelConfigYaml: 'minWorkers: 1\nbatchSize: 1\nhandler:\n  maxTensorBytesPerRequest: 4096\n',
  });
  await t.app.registry.register({ url: 'affine', archivePath: folder, synchronous: true });
}, 60_000);

afterAll(async () => {
  await t?.close();
});

const rows = (n: number) => ({
  inputs: { input: { shape: [n, 4], data: Array.from({ length: n * 4 }, (_, i) => i % 5) } },
});

describe('the per-request tensor memory limit', { timeout: 60_000 }, () => {
  it('runs a request within the limit (100 rows: 1600 bytes in, 1600 out)', async () => {
    const r = await t.post('affine', rows(100));
    expect(r.status).toBe(200);
    expect(r.json.outputs.output.shape).toEqual([100, 4]);
  });

  it('refuses before run() a request whose output the input makes too large, with 413 and the numbers', async () => {
    const r = await t.post('affine', rows(200));
    expect(r.status).toBe(413);
    expect(r.json.marinaCode).toBe('MARINA_ERR_TENSOR_TOO_LARGE');
    // 200 × 4 float32 in (3200 bytes) and the same out: 6400, counted only because the output's
    // batch dimension is the input's.
    expect(r.json.message).toContain('need 6400 bytes');
    expect(r.json.message).toContain('limit of 4096 bytes');
    expect((await t.post('affine', rows(1))).status).toBe(200);
  });
});
