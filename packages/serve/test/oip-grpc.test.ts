/**
 * The Open Inference Protocol over gRPC (@grpc/grpc-js client, the repository's copies of the
 * shared protos) against a real server; answers compared with onnxruntime-node run directly.
 */
import { join } from 'node:path';
import * as grpc from '@grpc/grpc-js';
import * as ort from 'onnxruntime-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { clientPackage, grpcClient, grpcErrorOf, startOipServer, unaryCall, type OipServer } from './oip-harness.ts';

let server: OipServer;
let client: ReturnType<typeof grpcClient>;
let torchServeOip: ReturnType<typeof grpcClient>;
let classifier: ort.InferenceSession;
let mixed: ort.InferenceSession;

beforeAll(async () => {
  server = await startOipServer();
  client = grpcClient(
    clientPackage('grpc_predict_v2.proto'),
    'inference.GRPCInferenceService',
    server.grpc.inferenceUrl,
  );
  torchServeOip = grpcClient(
    clientPackage('open_inference_grpc.proto'),
    'org.pytorch.serve.grpc.openinference.GRPCInferenceService',
    server.grpc.inferenceUrl,
  );
  classifier = await ort.InferenceSession.create(join(server.root, 'store', 'classifier', 'model.onnx'));
  mixed = await ort.InferenceSession.create(join(server.root, 'store', 'mixed', 'model.onnx'));
}, 60_000);

afterAll(async () => {
  client?.close();
  torchServeOip?.close();
  await server?.close();
});

const call = <T = any>(method: string, request: unknown, token: string | null = server.keys.inference, c = client) =>
  unaryCall<T>(c, method, request, token ?? undefined);

function bytesOf(view: ArrayBufferView): Buffer {
  return Buffer.from(view.buffer, view.byteOffset, view.byteLength);
}

describe('OIP gRPC', () => {
  it('answers ServerLive, ServerReady, ServerMetadata, ModelReady and ModelMetadata', async () => {
    expect(await call('ServerLive', {})).toEqual({ live: true });
    expect(await call('ServerReady', {})).toEqual({ ready: true });
    expect(await call('ServerMetadata', {})).toEqual({
      name: 'marina',
      version: expect.any(String),
      extensions: ['binary_tensor_data', 'model_repository'],
    });
    expect(await call('ModelReady', { name: 'classifier', version: '' })).toEqual({ ready: true });
    const meta = await call('ModelMetadata', { name: 'classifier', version: '' });
    expect(meta).toEqual({
      name: 'classifier',
      versions: ['1.0'],
      platform: 'onnxruntime_onnx',
      inputs: [{ name: 'input', datatype: 'FP32', shape: ['-1', '3', '32', '32'] }],
      outputs: [{ name: 'output', datatype: 'FP32', shape: ['-1', '10'] }],
    });
  });

  it('runs ModelInfer with typed contents and answers in typed contents', async () => {
    const pixels = Float32Array.from({ length: 3 * 32 * 32 }, (_, i) => Math.cos(i) * 0.5);
    const expected = await classifier.run({ input: new ort.Tensor('float32', pixels, [1, 3, 32, 32]) });
    const answer = await call('ModelInfer', {
      model_name: 'classifier',
      id: 'g-1',
      inputs: [
        { name: 'input', datatype: 'FP32', shape: [1, 3, 32, 32], contents: { fp32_contents: Array.from(pixels) } },
      ],
    });
    expect(answer).toMatchObject({ model_name: 'classifier', model_version: '1.0', id: 'g-1' });
    expect(answer.raw_output_contents).toEqual([]);
    const out = answer.outputs[0];
    expect(out).toMatchObject({ name: 'output', datatype: 'FP32', shape: ['1', '10'] });
    const want = Array.from(expected.output!.data as Float32Array);
    out.contents.fp32_contents.forEach((v: number, i: number) => {
      expect(Math.abs(v - want[i]!)).toBeLessThanOrEqual(1e-5);
    });
  });

  it('runs ModelInfer with raw_input_contents (every datatype, a rank-0 input) and answers in raw_output_contents, under both service names', async () => {
    const feeds: Record<string, ort.Tensor> = {
      x: new ort.Tensor('float32', Float32Array.from([1, 2, 3, 4, 5, 6, 7, 8]), [2, 4]),
      scale: new ort.Tensor('float32', Float32Array.from([3]), []),
      ids: new ort.Tensor('int64', BigInt64Array.from([1n, -2n, 3n, 4n, 5n, 2n ** 40n]), [2, 3]),
      mask: new ort.Tensor('bool', Uint8Array.from([1, 0, 1, 0, 0, 1]), [2, 3]),
      half: new ort.Tensor('float16', Uint16Array.from([0x3c00, 0xc000, 0x3800, 0x4200]), [2, 2]),
      small: new ort.Tensor('uint8', Uint8Array.from([0, 255, 7, 9]), [2, 2]),
      wide: new ort.Tensor('float64', Float64Array.from([0.1, 0.2, 0.3, 1e10]), [2, 2]),
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
    const expected = await mixed.run(feeds);
    const request = {
      model_name: 'mixed',
      inputs: Object.entries(feeds).map(([name, t]) => ({ name, datatype: datatypes[name], shape: [...t.dims] })),
      raw_input_contents: Object.values(feeds).map((t) => bytesOf(t.data as ArrayBufferView)),
    };
    for (const c of [client, torchServeOip]) {
      const answer = await call('ModelInfer', request, server.keys.inference, c);
      expect(answer.outputs.map((o: { name: string; datatype: string }) => `${o.name}:${o.datatype}`)).toEqual([
        'y:FP32',
        'ids_out:INT64',
        'mask_out:BOOL',
        'half_out:FP16',
        'small_out:INT32',
        'wide_out:FP64',
      ]);
      answer.outputs.forEach((o: { name: string; shape: string[] }, i: number) => {
        expect(o.shape.map(Number)).toEqual([...expected[o.name]!.dims]);
        // Integer, boolean and FP16 outputs are exact; the float outputs are computed by the same kernels.
        expect(Buffer.compare(answer.raw_output_contents[i], bytesOf(expected[o.name]!.data as ArrayBufferView))).toBe(
          0,
        );
      });
    }
  });

  it('returns only the requested outputs', async () => {
    const answer = await call('ModelInfer', {
      model_name: 'classifier',
      inputs: [{ name: 'input', datatype: 'FP32', shape: [1, 3, 32, 32] }],
      raw_input_contents: [Buffer.alloc(3 * 32 * 32 * 4)],
      outputs: [{ name: 'output' }],
    });
    expect(answer.outputs).toHaveLength(1);
    expect(answer.raw_output_contents[0]).toHaveLength(40);
  });

  it.each([
    [
      'an unknown model',
      {
        model_name: 'nope',
        inputs: [{ name: 'input', datatype: 'FP32', shape: [1], contents: { fp32_contents: [1] } }],
      },
      grpc.status.NOT_FOUND,
      /Model not found: nope/,
      'MARINA_ERR_MODEL_NOT_FOUND',
    ],
    [
      'a wrong shape',
      {
        model_name: 'classifier',
        inputs: [{ name: 'input', datatype: 'FP32', shape: [1, 3], contents: { fp32_contents: [1, 2, 3] } }],
      },
      grpc.status.INVALID_ARGUMENT,
      /has shape \[1, 3\], but the model expects FP32 with shape \[-1, 3, 32, 32\]/,
      'MARINA_ERR_TENSOR_INPUT_INVALID',
    ],
    [
      'a wrong datatype',
      {
        model_name: 'classifier',
        inputs: [
          {
            name: 'input',
            datatype: 'FP64',
            shape: [1, 3, 32, 32],
            contents: { fp64_contents: new Array(3072).fill(0) },
          },
        ],
      },
      grpc.status.INVALID_ARGUMENT,
      /datatype FP64, but the model expects FP32/,
      'MARINA_ERR_TENSOR_INPUT_INVALID',
    ],
    [
      'FP16 in typed contents',
      {
        model_name: 'mixed',
        inputs: [{ name: 'half', datatype: 'FP16', shape: [1, 2], contents: { fp32_contents: [1, 2] } }],
      },
      grpc.status.INVALID_ARGUMENT,
      /FP16 has no typed contents field; send it in raw_input_contents/,
      'MARINA_ERR_TENSOR_INPUT_INVALID',
    ],
    [
      'raw contents for some inputs only',
      {
        model_name: 'mixed',
        inputs: [
          { name: 'x', datatype: 'FP32', shape: [1, 4] },
          { name: 'scale', datatype: 'FP32', shape: [] },
        ],
        raw_input_contents: [Buffer.alloc(16)],
      },
      grpc.status.INVALID_ARGUMENT,
      /raw_input_contents has 1 entries for 2 inputs/,
      'MARINA_ERR_TENSOR_INPUT_INVALID',
    ],
    [
      'raw bytes that do not fit the shape',
      {
        model_name: 'classifier',
        inputs: [{ name: 'input', datatype: 'FP32', shape: [1, 3, 32, 32] }],
        raw_input_contents: [Buffer.alloc(100)],
      },
      grpc.status.INVALID_ARGUMENT,
      /needs 12288 bytes, got 100/,
      'MARINA_ERR_TENSOR_INPUT_INVALID',
    ],
    [
      'an unknown output',
      {
        model_name: 'classifier',
        inputs: [{ name: 'input', datatype: 'FP32', shape: [1, 3, 32, 32] }],
        raw_input_contents: [Buffer.alloc(12288)],
        outputs: [{ name: 'logits' }],
      },
      grpc.status.INVALID_ARGUMENT,
      /unknown output 'logits'/,
      'MARINA_ERR_TENSOR_OUTPUT_UNKNOWN',
    ],
  ])('refuses %s with its status and code', async (_what, request, status, message, code) => {
    const error = await grpcErrorOf(call('ModelInfer', request));
    expect(error.code).toBe(status);
    expect(error.details).toMatch(message);
    expect(error.metadata.get('marina-error-code')).toEqual([code]);
  });

  it('counts a request refused for its input in the metrics, whether it failed to decode or to fit the model', async () => {
    const refused: Array<{ modelName: string; statusCode: number }> = [];
    const listener = (e: { modelName: string; statusCode: number }) =>
      refused.push({ modelName: e.modelName, statusCode: e.statusCode });
    server.app.registry.events.on('request', listener);
    try {
      // FP16 has no typed contents field: refused while decoding, before the data plane.
      const undecodable = await grpcErrorOf(
        call('ModelInfer', {
          model_name: 'mixed',
          inputs: [{ name: 'half', datatype: 'FP16', shape: [1, 2], contents: { fp32_contents: [1, 2] } }],
        }),
      );
      expect(undecodable.code).toBe(grpc.status.INVALID_ARGUMENT);
      // A wrong shape: refused by admission.
      const unfit = await grpcErrorOf(
        call('ModelInfer', {
          model_name: 'mixed',
          inputs: [{ name: 'x', datatype: 'FP32', shape: [1, 3], contents: { fp32_contents: [1, 2, 3] } }],
        }),
      );
      expect(unfit.code).toBe(grpc.status.INVALID_ARGUMENT);
    } finally {
      server.app.registry.events.off('request', listener);
    }
    expect(refused).toEqual([
      { modelName: 'mixed', statusCode: 400 },
      { modelName: 'mixed', statusCode: 400 },
    ]);
  });

  it('answers NOT_FOUND for metadata and readiness of an unknown model; the repository extension needs the management key', async () => {
    expect((await grpcErrorOf(call('ModelMetadata', { name: 'nope', version: '' }))).code).toBe(grpc.status.NOT_FOUND);
    expect((await grpcErrorOf(call('ModelReady', { name: 'classifier', version: '7' }))).code).toBe(
      grpc.status.NOT_FOUND,
    );
    const inferenceKey = await grpcErrorOf(call('RepositoryModelLoad', { model_name: 'x' }));
    expect(inferenceKey.code).toBe(grpc.status.UNAUTHENTICATED);
    expect(inferenceKey.details).toMatch(/management/);
    const unknown = await grpcErrorOf(call('RepositoryModelUnload', { model_name: 'x' }, server.keys.management));
    expect(unknown.code).toBe(grpc.status.NOT_FOUND);
    expect(unknown.metadata.get('marina-error-code')).toEqual(['MARINA_ERR_MODEL_NOT_FOUND']);
  });

  it('needs the inference key in the authorization metadata', async () => {
    const missing = await grpcErrorOf(call('ServerLive', {}, null));
    expect(missing.code).toBe(grpc.status.UNAUTHENTICATED);
    expect(missing.details).toMatch(/no 'authorization: Bearer <key>' metadata/);
    expect(missing.metadata.get('marina-error-code')).toEqual(['MARINA_ERR_TOKEN_MISSING']);
    const wrong = await grpcErrorOf(call('ModelInfer', { model_name: 'classifier' }, server.keys.management));
    expect(wrong.code).toBe(grpc.status.UNAUTHENTICATED);
    expect(wrong.metadata.get('marina-error-code')).toEqual(['MARINA_ERR_TOKEN_INVALID']);
  });

  it('refuses a message over max_request_size with RESOURCE_EXHAUSTED', async () => {
    const error = await grpcErrorOf(
      call('ModelInfer', {
        model_name: 'classifier',
        inputs: [{ name: 'input', datatype: 'FP32', shape: [1] }],
        raw_input_contents: [Buffer.alloc(server.config.maxRequestBytes + 10)],
      }),
    );
    expect(error.code).toBe(grpc.status.RESOURCE_EXHAUSTED);
  });
});
