import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { writeTinyTensorModel } from '@marina/model-zoo';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { recordHandlerFeeds } from '../src/index.ts';

// A custom handler whose preprocess turns a text body "a,b,c,d" into a [1, 4] tensor scaled by 100:
// calibration must see exactly that tensor, not the raw body.
const HANDLER = `
import * as ort from 'onnxruntime-node';
let session;
export default {
  async initialize(context) { session = await context.createSession(); },
  preprocess(rows) {
    const values = String(rows[0].body).split(',').map((v) => Number(v) * 100);
    return new ort.Tensor('float32', Float32Array.from(values), [1, 4]);
  },
  async inference(input) { return (await session.run({ input })).output; },
  postprocess(output) { return [Array.from(output.data)]; },
};
`;

let dir: string;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'marina-quantize-custom-'));
  await writeTinyTensorModel({ outputPath: join(dir, 'tensor.onnx') });
  await writeFile(join(dir, 'scaling-handler.mjs'), HANDLER);
});

afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('calibration through a custom handler', () => {
  it("records the tensors the handler's own preprocess feeds the model", async () => {
    const runs = await recordHandlerFeeds({
      handler: join(dir, 'scaling-handler.mjs'),
      modelPath: join(dir, 'tensor.onnx'),
      samples: [
        { name: 'a.txt', body: Buffer.from('1,2,3,4') },
        { name: 'b.txt', body: Buffer.from('0.5,-1,0,2') },
      ],
    });
    expect(runs.map((r) => r.error)).toEqual([undefined, undefined]);
    expect(Array.from(runs[0]!.feeds!.input!.data as Float32Array)).toEqual([100, 200, 300, 400]);
    expect(Array.from(runs[1]!.feeds!.input!.data as Float32Array)).toEqual([50, -100, 0, 200]);
    expect(runs[1]!.feeds!.input!.dims).toEqual([1, 4]);
  });

  it('reports a sample the handler rejects by its file name', async () => {
    const runs = await recordHandlerFeeds({
      handler: 'tensor',
      modelPath: join(dir, 'tensor.onnx'),
      samples: [{ name: 'broken.json', body: Buffer.from('{not json') }],
    });
    expect(runs[0]!.name).toBe('broken.json');
    expect(runs[0]!.feeds).toBeUndefined();
    expect(runs[0]!.error).toBeTruthy();
  });
});
