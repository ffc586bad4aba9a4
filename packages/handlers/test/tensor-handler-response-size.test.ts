/**
 * The tensor handler refuses an answer that cannot fit max_response_size (context.maxResponseBytes)
 * before it builds it, in that request's place only. Real onnxruntime-node session of the zoo's
 * tiny tensor model (output = 2·input + 1, [N,4] FP32).
 */
import { join } from 'node:path';
import { writeTinyTensorModel } from '@marina/model-zoo';
import { isMarinaError } from '@marina/errors';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createTensorHandler,
  joinBinaryBody,
  splitBinaryBody,
  type Handler,
  type HandlerContext,
} from '../src/index.ts';
import { createContext, createWorkDir } from './handler-harness.ts';

let work: Awaited<ReturnType<typeof createWorkDir>>;
let handler: Handler;
let context: HandlerContext;
const MAX_RESPONSE_BYTES = 1000;

beforeAll(async () => {
  work = await createWorkDir();
  const modelPath = join(work.dir, 'tiny-tensor.onnx');
  await writeTinyTensorModel({ outputPath: modelPath });
  context = { ...createContext({ modelPath, modelDir: work.dir, batchSize: 4 }), maxResponseBytes: MAX_RESPONSE_BYTES };
  handler = createTensorHandler();
  await handler.initialize!(context);
});

afterAll(async () => {
  await work.remove();
});

const rowsOf = (n: number) => Array.from({ length: n }, (_, r) => [r, r + 1, r + 2, r + 3]);

/** The v2 binary layout of an [n,4] FP32 input, asking for binary outputs. */
function binaryRequest(n: number): { body: Buffer; headerLength: number } {
  const raw = Buffer.from(new Float32Array(rowsOf(n).flat()).buffer);
  return joinBinaryBody(
    {
      inputs: [{ name: 'input', datatype: 'FP32', shape: [n, 4], parameters: { binary_data_size: raw.length } }],
      parameters: { binary_data_output: true },
    },
    [raw],
  );
}

describe('the tensor handler and max_response_size', () => {
  it('refuses, in its own place only, a JSON answer that cannot fit, decided before the JSON is built; binary answers of the same rows fit', async () => {
    const binary = binaryRequest(30);
    const headers = [{}, {}, { 'inference-header-content-length': String(binary.headerLength) }];
    const responseHeaders = new Map<string, string>();
    const batchContext = {
      ...context,
      getRequestHeader: (index: number, name: string) => (headers[index] as Record<string, string>)[name],
      setResponseHeader: (index: number, name: string, value: string) =>
        void responseHeaders.set(`${index}:${name}`, value),
    };
    const results = await handler.handle!(
      [
        { body: { inputs: { input: { shape: [1, 4], data: rowsOf(1) } } } },
        { body: { inputs: { input: { shape: [30, 4], data: rowsOf(30) } } } },
        { body: binary.body },
      ],
      batchContext,
    );

    // 1 row as JSON fits.
    expect(results[0]).toEqual({ outputs: { output: { shape: [1, 4], data: [1, 3, 5, 7] } } });

    // 30 rows as JSON: 120 values, at least 10 bytes each once pretty-printed, cannot fit 1000 bytes,
    // although their 480 raw bytes would. The error takes the row's place; the others are answered.
    const refused = results[1];
    expect(isMarinaError(refused)).toBe(true);
    expect(refused).toMatchObject({ code: 'MARINA_ERR_RESPONSE_TOO_LARGE', statusCode: 500 });
    expect((refused as Error).message).toMatch(
      /would take at least 1199 bytes, larger than max_response_size \(1000 bytes\); ask for fewer outputs/,
    );
    // The refusal is right: the answer the server would have sent (pretty-printed, as it sends JSON) is larger still.
    const wouldHaveSent = JSON.stringify(
      {
        outputs: {
          output: {
            shape: [30, 4],
            data: rowsOf(30)
              .flat()
              .map((v) => 2 * v + 1),
          },
        },
      },
      null,
      2,
    );
    expect(wouldHaveSent.length).toBeGreaterThan(MAX_RESPONSE_BYTES);

    // The same 30 rows in binary: 480 bytes of outputs fit, and are what onnxruntime computed.
    const answer = results[2] as Buffer;
    expect(Buffer.isBuffer(answer)).toBe(true);
    const { binaries } = splitBinaryBody(
      answer,
      Number(responseHeaders.get('2:inference-header-content-length')),
      'outputs',
    );
    const values = new Float32Array(new Uint8Array(binaries.get(0)!).buffer);
    expect(Array.from(values)).toEqual(
      rowsOf(30)
        .flat()
        .map((v) => 2 * v + 1),
    );
  });

  it('refuses a binary answer whose bytes exceed max_response_size', async () => {
    const binary = binaryRequest(70); // 70 × 4 × 4 = 1120 bytes of output
    const batchContext = {
      ...context,
      getRequestHeader: (_index: number, name: string) =>
        name === 'inference-header-content-length' ? String(binary.headerLength) : undefined,
    };
    const [result] = await handler.handle!([{ body: binary.body }], batchContext);
    expect(result).toMatchObject({ code: 'MARINA_ERR_RESPONSE_TOO_LARGE' });
    expect((result as Error).message).toMatch(/would take at least 1120 bytes/);
  });
});
