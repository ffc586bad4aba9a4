/**
 * The tensor handler on TorchServe's route (`/predictions`): rank-0 inputs, output selection
 * (the body's `outputs` key), every datatype, the v2 binary body, and strict input checks made
 * before anything is queued, on every protocol. Real server, real model, compared with onnxruntime-node.
 */
import { join } from 'node:path';
import * as ort from 'onnxruntime-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { BatchDoneEvent } from '../src/registry/model-registry-api.ts';
import { clientPackage, grpcClient, grpcErrorOf, startOipServer, unaryCall, type OipServer } from './oip-harness.ts';

let server: OipServer;
let mixed: ort.InferenceSession;

beforeAll(async () => {
  server = await startOipServer();
  mixed = await ort.InferenceSession.create(join(server.root, 'store', 'mixed', 'model.onnx'));
}, 60_000);

afterAll(async () => {
  await server?.close();
});

const feeds = () => ({
  x: new ort.Tensor('float32', Float32Array.from([0.5, -1, 2, 8, 1, 1, 1, 1]), [2, 4]),
  scale: new ort.Tensor('float32', Float32Array.from([-3]), []),
  ids: new ort.Tensor('int64', BigInt64Array.from([0n, 1n, 2n, -5n, 9007199254740990n, 3n]), [2, 3]),
  mask: new ort.Tensor('bool', Uint8Array.from([0, 0, 1, 1, 0, 1]), [2, 3]),
  half: new ort.Tensor('float16', Uint16Array.from([0x3c00, 0x3e00, 0xbc00, 0x0000]), [2, 2]),
  small: new ort.Tensor('uint8', Uint8Array.from([1, 2, 3, 4]), [2, 2]),
  wide: new ort.Tensor('float64', Float64Array.from([Math.PI, Math.E, -1, 0]), [2, 2]),
});
/** The JSON form of `feeds()` without `x`. */
const jsonInputsBesideX = {
  scale: -3,
  ids: { shape: [2, 3], data: [0, 1, 2, -5, 9007199254740990, 3] },
  mask: [
    [false, false, true],
    [true, false, true],
  ],
  half: { shape: [2, 2], data: [1, 1.5, -1, 0] },
  small: { shape: [2, 2], data: [1, 2, 3, 4] },
  wide: { shape: [2, 2], data: [Math.PI, Math.E, -1, 0] },
};
const datatypes: Record<string, string> = {
  x: 'FP32',
  scale: 'FP32',
  ids: 'INT64',
  mask: 'BOOL',
  half: 'FP16',
  small: 'UINT8',
  wide: 'FP64',
};
const bytesOf = (t: ort.Tensor) => {
  const v = t.data as ArrayBufferView;
  return Buffer.from(v.buffer, v.byteOffset, v.byteLength);
};

function post(path: string, body: BodyInit, headers: Record<string, string>) {
  return fetch(`${server.rest}${path}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${server.keys.inference}`, ...headers },
    body,
  });
}

describe('the tensor handler on /predictions', () => {
  it('takes JSON with a rank-0 input and integer, boolean and float16 inputs, and returns only the outputs named in "outputs"', async () => {
    const f = feeds();
    const expected = await mixed.run(f);
    const res = await post(
      '/predictions/mixed',
      JSON.stringify({
        inputs: {
          x: { shape: [2, 4], data: [0.5, -1, 2, 8, 1, 1, 1, 1] },
          ...jsonInputsBesideX,
        },
        outputs: ['ids_out', 'mask_out', 'half_out', 'small_out'],
      }),
      { 'content-type': 'application/json' },
    );
    expect(res.status).toBe(200);
    const body = await res.json();
    expect(Object.keys(body.outputs)).toEqual(['ids_out', 'mask_out', 'half_out', 'small_out']);
    expect(body.outputs.ids_out).toEqual({
      shape: [2, 3],
      data: Array.from(expected.ids_out!.data as BigInt64Array, Number),
    });
    expect(body.outputs.mask_out.data).toEqual([true, true, false, false, true, false]);
    expect(body.outputs.half_out.data).toEqual([2, 3, -2, 0]);
    expect(body.outputs.small_out.data).toEqual([1, 2, 3, 4]);
  });

  it('answers a JSON body the same whether it is small (passed on as sent) or over 64 KiB (passed on re-encoded as binary)', async () => {
    for (const rows of [2, 6000]) {
      const x = Float32Array.from({ length: rows * 4 }, (_, i) => Math.fround(Math.sin(i) * 3));
      const f = { ...feeds(), x: new ort.Tensor('float32', x, [rows, 4]) };
      const expected = await mixed.run(f, ['y']);
      const json = JSON.stringify({
        inputs: {
          x: { shape: [rows, 4], data: Array.from(x) },
          ...jsonInputsBesideX,
        },
        outputs: ['y'],
      });
      expect(json.length > 64 * 1024, `${rows} rows: ${json.length} bytes`).toBe(rows > 2);
      const res = await post('/predictions/mixed', json, { 'content-type': 'application/json' });
      expect(res.status).toBe(200);
      const body = await res.json();
      expect(Object.keys(body.outputs)).toEqual(['y']);
      expect(body.outputs.y.shape).toEqual([rows, 4]);
      const want = expected.y!.data as Float32Array;
      expect(body.outputs.y.data).toHaveLength(want.length);
      (body.outputs.y.data as number[]).forEach((v, i) => {
        expect(Math.abs(v - want[i]!)).toBeLessThanOrEqual(1e-5 * Math.max(1, Math.abs(want[i]!)));
      });
    }
  });

  it('takes the v2 binary layout and answers in it (binary outputs by default)', async () => {
    const f = feeds();
    const expected = await mixed.run(f);
    const header = Buffer.from(
      JSON.stringify({
        inputs: Object.entries(f).map(([name, t]) => ({
          name,
          datatype: datatypes[name],
          shape: [...t.dims],
          parameters: { binary_data_size: bytesOf(t).length },
        })),
        outputs: [{ name: 'y' }, { name: 'wide_out' }],
      }),
    );
    const res = await post(
      '/predictions/mixed',
      new Blob([new Uint8Array(header), ...Object.values(f).map((t) => new Uint8Array(bytesOf(t)))]),
      { 'content-type': 'application/octet-stream', 'inference-header-content-length': String(header.length) },
    );
    expect(res.status).toBe(200);
    const bytes = Buffer.from(await res.arrayBuffer());
    const length = Number(res.headers.get('inference-header-content-length'));
    const answer = JSON.parse(bytes.subarray(0, length).toString());
    expect(answer.outputs).toEqual([
      { name: 'y', datatype: 'FP32', shape: [2, 4], parameters: { binary_data_size: 32 } },
      { name: 'wide_out', datatype: 'FP64', shape: [2, 2], parameters: { binary_data_size: 32 } },
    ]);
    expect(Buffer.compare(bytes.subarray(length, length + 32), bytesOf(expected.y!))).toBe(0);
    expect(Buffer.compare(bytes.subarray(length + 32), bytesOf(expected.wide_out!))).toBe(0);
  });
});

describe('strict input checks before the queue, on every protocol', () => {
  it('refuses a bad shape, datatype or output on all four protocols without running a batch', async () => {
    const batches: BatchDoneEvent[] = [];
    const onBatch = (e: BatchDoneEvent) => e.modelName === 'mixed' && batches.push(e);
    server.app.registry.events.on('batch', onBatch);
    const oip = grpcClient(
      clientPackage('grpc_predict_v2.proto'),
      'inference.GRPCInferenceService',
      server.grpc.inferenceUrl,
    );
    const ts = grpcClient(
      clientPackage('inference.proto'),
      'org.pytorch.serve.grpc.inference.InferenceAPIsService',
      server.grpc.inferenceUrl,
    );
    try {
      const badShape = JSON.stringify({ inputs: { x: { shape: [1, 3], data: [1, 2, 3] } } });
      const rest = await post('/predictions/mixed', badShape, { 'content-type': 'application/json' });
      expect(rest.status).toBe(400);
      expect((await rest.json()).message).toMatch(
        /input 'x' has shape \[1, 3\], but the model expects FP32 with shape \[-1, 4\]/,
      );
      const unknownOutput = await post(
        '/predictions/mixed',
        JSON.stringify({
          inputs: Object.fromEntries(
            Object.keys(datatypes).map((n) => [
              n,
              n === 'scale' ? 1 : { shape: [0, n === 'x' ? 4 : n === 'ids' || n === 'mask' ? 3 : 2], data: [] },
            ]),
          ),
          outputs: ['nope'],
        }),
        { 'content-type': 'application/json' },
      );
      expect(unknownOutput.status).toBe(400);
      expect((await unknownOutput.json()).marinaCode).toBe('MARINA_ERR_TENSOR_OUTPUT_UNKNOWN');
      const multipart = new FormData();
      multipart.append('data', new Blob([badShape]));
      expect(
        (
          await fetch(`${server.rest}/predictions/mixed`, {
            method: 'POST',
            headers: { authorization: `Bearer ${server.keys.inference}` },
            body: multipart,
          })
        ).status,
      ).toBe(400);
      const v2 = await post(
        '/v2/models/mixed/infer',
        JSON.stringify({ inputs: [{ name: 'x', datatype: 'FP64', shape: [1, 4], data: [1, 2, 3, 4] }] }),
        { 'content-type': 'application/json' },
      );
      expect(v2.status).toBe(400);
      const tsGrpc = await grpcErrorOf(
        unaryCall(
          ts,
          'Predictions',
          { model_name: 'mixed', input: { data: Buffer.from(badShape) } },
          server.keys.inference,
        ),
      );
      expect(tsGrpc.metadata.get('marina-error-code')).toEqual(['MARINA_ERR_TENSOR_INPUT_INVALID']);
      const oipGrpc = await grpcErrorOf(
        unaryCall(
          oip,
          'ModelInfer',
          {
            model_name: 'mixed',
            inputs: [{ name: 'x', datatype: 'INT32', shape: [1, 4], contents: { int_contents: [1, 2, 3, 4] } }],
          },
          server.keys.inference,
        ),
      );
      expect(oipGrpc.metadata.get('marina-error-code')).toEqual(['MARINA_ERR_TENSOR_INPUT_INVALID']);
      expect(batches).toEqual([]);
    } finally {
      server.app.registry.events.off('batch', onBatch);
      oip.close();
      ts.close();
    }
  });
});
