/**
 * TorchServe's gRPC APIs (InferenceAPIsService on grpc_inference_port, ManagementAPIsService on
 * grpc_management_port) with a @grpc/grpc-js client and TorchServe's protos, against a real server.
 */
import { join } from 'node:path';
import * as grpc from '@grpc/grpc-js';
import * as ort from 'onnxruntime-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { clientPackage, grpcClient, grpcErrorOf, startOipServer, unaryCall, type OipServer } from './oip-harness.ts';

let server: OipServer;
let inference: ReturnType<typeof grpcClient>;
let management: ReturnType<typeof grpcClient>;
let mixed: ort.InferenceSession;

beforeAll(async () => {
  server = await startOipServer();
  inference = grpcClient(
    clientPackage('inference.proto'),
    'org.pytorch.serve.grpc.inference.InferenceAPIsService',
    server.grpc.inferenceUrl,
  );
  management = grpcClient(
    clientPackage('management.proto'),
    'org.pytorch.serve.grpc.management.ManagementAPIsService',
    server.grpc.managementUrl,
  );
  mixed = await ort.InferenceSession.create(join(server.root, 'store', 'mixed', 'model.onnx'));
}, 60_000);

afterAll(async () => {
  inference?.close();
  management?.close();
  await server?.close();
});

const mixedJson = {
  inputs: {
    x: { shape: [1, 4], data: [1, 2, 3, 4] },
    scale: 2,
    ids: { shape: [1, 3], data: [7, 8, 9] },
    mask: { shape: [1, 3], data: [true, false, true] },
    half: { shape: [1, 2], data: [0.5, -1.5] },
    small: { shape: [1, 2], data: [3, 250] },
    wide: { shape: [1, 2], data: [0.25, 4] },
  },
  outputs: ['y', 'small_out'],
};

describe('TorchServe gRPC inference API', () => {
  it('answers Ping with the health JSON', async () => {
    const answer = await unaryCall(inference, 'Ping', {}, server.keys.inference);
    expect(JSON.parse(answer.health)).toEqual({ status: 'Healthy' });
  });

  it('runs Predictions with the input map (tensor handler JSON, outputs selected) like /predictions', async () => {
    const expected = await mixed.run({
      x: new ort.Tensor('float32', Float32Array.from([1, 2, 3, 4]), [1, 4]),
      scale: new ort.Tensor('float32', Float32Array.from([2]), []),
      ids: new ort.Tensor('int64', BigInt64Array.from([7n, 8n, 9n]), [1, 3]),
      mask: new ort.Tensor('bool', Uint8Array.from([1, 0, 1]), [1, 3]),
      half: new ort.Tensor('float16', Uint16Array.from([0x3800, 0xbe00]), [1, 2]),
      small: new ort.Tensor('uint8', Uint8Array.from([3, 250]), [1, 2]),
      wide: new ort.Tensor('float64', Float64Array.from([0.25, 4]), [1, 2]),
    });
    const answer = await unaryCall(
      inference,
      'Predictions',
      { model_name: 'mixed', input: { data: Buffer.from(JSON.stringify(mixedJson)) } },
      server.keys.inference,
    );
    const body = JSON.parse(Buffer.from(answer.prediction).toString('utf8'));
    expect(Object.keys(body.outputs)).toEqual(['y', 'small_out']);
    expect(body.outputs.y.data).toEqual(Array.from(expected.y!.data as Float32Array));
    expect(body.outputs.small_out.data).toEqual([3, 250]);
    const rest = await fetch(`${server.rest}/predictions/mixed`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${server.keys.inference}` },
      body: JSON.stringify(mixedJson),
    });
    expect(await rest.json()).toEqual(body);
  });

  it('streams one answer with StreamPredictions and answers each request of StreamPredictions2 with its sequence id', async () => {
    const metadata = new grpc.Metadata();
    metadata.set('authorization', `Bearer ${server.keys.inference}`);
    const request = { model_name: 'mixed', input: { data: Buffer.from(JSON.stringify(mixedJson)) } };
    const stream = (
      inference.StreamPredictions as (r: unknown, m: grpc.Metadata) => grpc.ClientReadableStream<{ prediction: Buffer }>
    ).call(inference, request, metadata);
    const messages: Buffer[] = [];
    for await (const m of stream) messages.push(m.prediction);
    expect(messages).toHaveLength(1);
    expect(JSON.parse(messages[0]!.toString()).outputs.small_out.data).toEqual([3, 250]);

    const duplex = (
      inference.StreamPredictions2 as (
        m: grpc.Metadata,
      ) => grpc.ClientDuplexStream<
        unknown,
        { prediction: Buffer; sequence_id?: string; status?: { code: number; message: string } }
      >
    ).call(inference, metadata);
    duplex.write({ ...request, sequence_id: 's1' });
    duplex.write({ model_name: 'nope', input: { data: Buffer.from('{}') }, sequence_id: 's1' });
    duplex.end();
    const answers = [];
    for await (const m of duplex) answers.push(m);
    expect(answers).toHaveLength(2);
    const ok = answers.find((a) => !a.status)!;
    expect(ok.sequence_id).toBe('s1');
    expect(JSON.parse(ok.prediction.toString()).outputs.y.shape).toEqual([1, 4]);
    const failed = answers.find((a) => a.status)!;
    // TorchServe's exact sentence (wlm/ModelManager.java); the stream's status has no room for Marina's hint.
    expect(failed.status).toMatchObject({ code: grpc.status.NOT_FOUND, message: 'Model not found: nope' });
  });

  it('answers errors with a gRPC status: unknown model, missing model name, bad tensor input, no token', async () => {
    const notFound = await grpcErrorOf(
      unaryCall(
        inference,
        'Predictions',
        { model_name: 'nope', input: { data: Buffer.from('{}') } },
        server.keys.inference,
      ),
    );
    expect(notFound.code).toBe(grpc.status.NOT_FOUND);
    // TorchServe's text as the status details; Marina's guidance in `marina-hint` metadata.
    expect(notFound.details).toBe('Model not found: nope');
    expect(String(notFound.metadata.get('marina-hint')[0])).toMatch(/^registered models: /);
    const noName = await grpcErrorOf(
      unaryCall(
        inference,
        'Predictions',
        { model_name: '', input: { data: Buffer.from('{}') } },
        server.keys.inference,
      ),
    );
    expect(noName.code).toBe(grpc.status.INVALID_ARGUMENT);
    expect(noName.details).toBe('Parameter model_name is required.');
    const bad = await grpcErrorOf(
      unaryCall(
        inference,
        'Predictions',
        {
          model_name: 'mixed',
          input: { data: Buffer.from(JSON.stringify({ inputs: { x: { shape: [1, 5], data: [1, 2, 3, 4, 5] } } })) },
        },
        server.keys.inference,
      ),
    );
    expect(bad.code).toBe(grpc.status.INVALID_ARGUMENT);
    expect(bad.details).toMatch(/input 'x' has shape \[1, 5\], but the model expects FP32 with shape \[-1, 4\]/);
    expect(bad.metadata.get('marina-error-code')).toEqual(['MARINA_ERR_TENSOR_INPUT_INVALID']);
    expect((await grpcErrorOf(unaryCall(inference, 'Ping', {}))).code).toBe(grpc.status.UNAUTHENTICATED);
  });
});

describe('TorchServe gRPC management API', () => {
  const manage = (method: string, request: unknown, token: string | undefined = server.keys.management) =>
    unaryCall(management, method, request, token);

  it("lists and describes models with the REST API's JSON in msg", async () => {
    const list = JSON.parse((await manage('ListModels', {})).msg);
    expect(list.models.map((m: { modelName: string }) => m.modelName)).toEqual(['classifier', 'gate', 'mixed']);
    const describe = JSON.parse((await manage('DescribeModel', { model_name: 'mixed' })).msg);
    expect(describe[0]).toMatchObject({ modelName: 'mixed', modelVersion: '1.0' });
  });

  it('scales workers, and refuses what REST refuses with the matching status', async () => {
    const scaled = JSON.parse(
      (await manage('ScaleWorker', { model_name: 'gate', min_worker: 1, max_worker: 2, synchronous: true })).msg,
    );
    expect(scaled.status).toMatch(/Workers scaled|Processing worker updates completed/);
    const unknown = await grpcErrorOf(manage('DescribeModel', { model_name: 'nope' }));
    expect(unknown.code).toBe(grpc.status.NOT_FOUND);
    expect(unknown.details).toMatch(/nope/);
    const setDefault = await grpcErrorOf(manage('SetDefault', { model_name: 'mixed', model_version: '9.9' }));
    expect(setDefault.code).toBe(grpc.status.NOT_FOUND);
    const register = await grpcErrorOf(manage('RegisterModel', { url: 'https://example.com/model.mar' }));
    expect(register.code).not.toBe(grpc.status.OK);
    expect(register.metadata.get('marina-error-code')[0]).toMatch(/^MARINA_ERR_/);
    const noUrl = await grpcErrorOf(manage('RegisterModel', {}));
    expect(noUrl.code).toBe(grpc.status.INVALID_ARGUMENT);
  });

  it('registers and unregisters a model from the store', async () => {
    const registered = JSON.parse(
      (await manage('RegisterModel', { url: 'mixed', model_name: 'mixed2', initial_workers: 1, synchronous: true }))
        .msg,
    );
    expect(registered.status).toMatch(/mixed2/);
    const unregistered = JSON.parse((await manage('UnregisterModel', { model_name: 'mixed2' })).msg);
    expect(unregistered.status).toMatch(/mixed2/);
  });

  it('needs the management key', async () => {
    const error = await grpcErrorOf(manage('ListModels', {}, server.keys.inference));
    expect(error.code).toBe(grpc.status.UNAUTHENTICATED);
  });
});
