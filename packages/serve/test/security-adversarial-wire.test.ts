/**
 * Issue 37's attacks on the wire, against a real server with token authorization on (REST and both
 * gRPC services on loopback): gRPC streams that must end with a status, echoed inputs that must
 * stay small, the longest name the rule accepts on every route and protocol, deep JSON, floats out
 * of range, too many multipart parts, authorization wording, 414/431 bodies and the explorer's framing.
 */
import { rename } from 'node:fs/promises';
import { connect } from 'node:net';
import { join } from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { MODEL_NAME_MAX_LENGTH } from '@marina/archive';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { clientPackage, grpcClient, grpcErrorOf, startOipServer, unaryCall, type OipServer } from './oip-harness.ts';
import { packModel } from './ops-harness.ts';

let server: OipServer;
let inference: ReturnType<typeof grpcClient>;
let management: ReturnType<typeof grpcClient>;
let oip: ReturnType<typeof grpcClient>;
/** 128 characters, every one the rule allows. */
const longest = `a${'b-c_d.e9'.repeat(20)}`.slice(0, MODEL_NAME_MAX_LENGTH);

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
  oip = grpcClient(clientPackage('grpc_predict_v2.proto'), 'inference.GRPCInferenceService', server.grpc.inferenceUrl);
  const archive = await packModel(join(server.root, 'store'), { modelName: longest, fileName: 'longest.mar' });
  await rename(archive, join(server.root, 'store', 'longest.mar'));
}, 60_000);

afterAll(async () => {
  inference?.close();
  management?.close();
  oip?.close();
  await server?.close();
});

const rest = (path: string, init: RequestInit & { key?: 'inference' | 'management' | string } = {}) => {
  const { key, ...rest } = init;
  const token = key === 'inference' || key === 'management' ? server.keys[key] : key;
  return fetch(`${server.rest}${path}`, {
    ...rest,
    headers: { ...(token !== undefined ? { authorization: `Bearer ${token}` } : {}), ...(rest.headers ?? {}) },
  });
};

/** The status a server stream ends with (or its first message's `status`, for StreamPredictions2's per-request errors). */
function streamStatus(
  method: 'StreamPredictions' | 'StreamPredictions2',
  request: Record<string, unknown>,
  token: string | undefined,
): Promise<{ code: grpc.status; details: string; marinaCode: string | undefined }> {
  const metadata = new grpc.Metadata();
  if (token !== undefined) metadata.set('authorization', `Bearer ${token}`);
  // The deadline only makes a hang fail the test instead of blocking it; an answer comes long before.
  const deadline = Date.now() + 20_000;
  return new Promise((resolve) => {
    const stream = (
      inference[method] as (m: grpc.Metadata, o: grpc.CallOptions) => grpc.ClientDuplexStream<unknown, unknown>
    )(metadata, { deadline }) as grpc.ClientDuplexStream<unknown, unknown>;
    stream.on('data', () => undefined);
    stream.on('error', (error: grpc.ServiceError) =>
      resolve({
        code: error.code,
        details: error.details,
        marinaCode: error.metadata?.get('marina-error-code')[0]?.toString(),
      }),
    );
    stream.on('status', (status: grpc.StatusObject) => {
      if (status.code === grpc.status.OK)
        resolve({ code: status.code, details: status.details, marinaCode: undefined });
    });
    if (method === 'StreamPredictions2') {
      stream.write(request);
      stream.end();
    }
  });
}

function serverStream(request: Record<string, unknown>, token: string | undefined) {
  const metadata = new grpc.Metadata();
  if (token !== undefined) metadata.set('authorization', `Bearer ${token}`);
  return new Promise<{ code: grpc.status; marinaCode: string | undefined }>((resolve) => {
    const stream = (
      inference.StreamPredictions as (
        r: unknown,
        m: grpc.Metadata,
        o: grpc.CallOptions,
      ) => grpc.ClientReadableStream<unknown>
    )(request, metadata, { deadline: Date.now() + 20_000 });
    stream.on('data', () => undefined);
    stream.on('error', (error: grpc.ServiceError) =>
      resolve({ code: error.code, marinaCode: error.metadata?.get('marina-error-code')[0]?.toString() }),
    );
    stream.on('status', (status: grpc.StatusObject) => {
      if (status.code === grpc.status.OK) resolve({ code: status.code, marinaCode: undefined });
    });
  });
}

describe('gRPC streams end with a status', { timeout: 60_000 }, () => {
  const input = { data: Buffer.from(JSON.stringify({ inputs: { x: { shape: [1, 4], data: [1, 2, 3, 4] } } })) };

  it('StreamPredictions: no key, a wrong key, an unknown model, a bad tensor', async () => {
    expect(await serverStream({ model_name: 'mixed', input }, undefined)).toEqual({
      code: grpc.status.UNAUTHENTICATED,
      marinaCode: 'MARINA_ERR_TOKEN_MISSING',
    });
    expect(await serverStream({ model_name: 'mixed', input }, 'wrong')).toEqual({
      code: grpc.status.UNAUTHENTICATED,
      marinaCode: 'MARINA_ERR_TOKEN_INVALID',
    });
    expect(await serverStream({ model_name: 'nope', input }, server.keys.inference)).toEqual({
      code: grpc.status.NOT_FOUND,
      marinaCode: 'MARINA_ERR_MODEL_NOT_FOUND',
    });
    expect((await serverStream({ model_name: 'mixed', input }, server.keys.inference)).code).toBe(
      grpc.status.INVALID_ARGUMENT,
    );
  });

  it('StreamPredictions2: no key and a wrong key end the stream with UNAUTHENTICATED', async () => {
    const request = { model_name: 'mixed', input, sequence_id: 's1' };
    expect((await streamStatus('StreamPredictions2', request, undefined)).code).toBe(grpc.status.UNAUTHENTICATED);
    const wrong = await streamStatus('StreamPredictions2', request, 'wrong');
    expect(wrong.code).toBe(grpc.status.UNAUTHENTICATED);
    expect(wrong.details).not.toContain(server.root);
  });
});

describe('echoed inputs stay small', { timeout: 60_000 }, () => {
  it('a 200,000-character model name gets a bounded NOT_FOUND, and the channel keeps working', async () => {
    const name = 'x'.repeat(200_000);
    // The name is quoted cut, with its length.
    for (const [client, method, request] of [
      [inference, 'Predictions', { model_name: name, input: { data: Buffer.from('1') } }],
      [oip, 'ModelMetadata', { name }],
    ] as const) {
      const error = await grpcErrorOf(unaryCall(client, method, request, server.keys.inference));
      expect(error.code, method).toBe(grpc.status.NOT_FOUND);
      expect(error.details.length, method).toBeLessThan(2048);
      // OIP quotes Marina's message, the name cut with its length; TorchServe's form its own sentence.
      if (method === 'ModelMetadata') expect(error.details, method).toContain('200000 characters');
      expect(String(error.metadata.get('marina-hint')[0] ?? '').length, method).toBeLessThan(2048);
    }
    // Management goes through the REST route, where a path parameter that long is a 414: INVALID_ARGUMENT.
    const described = await grpcErrorOf(
      unaryCall(management, 'DescribeModel', { model_name: name }, server.keys.management),
    );
    expect(described.code).toBe(grpc.status.INVALID_ARGUMENT);
    expect(described.details.length).toBeLessThan(2048);
    expect(JSON.parse((await unaryCall(inference, 'Ping', {}, server.keys.inference)).health)).toEqual({
      status: 'Healthy',
    });
  });

  it('RegisterModel with a 5 MB url gets a bounded answer, and the next call works', async () => {
    const url = `https://example.invalid/${'u'.repeat(5_000_000)}.mar`;
    const error = await grpcErrorOf(unaryCall(management, 'RegisterModel', { url }, server.keys.management));
    expect(error.details.length).toBeLessThan(2048);
    const list = await unaryCall(management, 'ListModels', {}, server.keys.management);
    expect(JSON.parse(list.msg).models.length).toBeGreaterThan(0);
  });

  it('an OIP answer that quotes a 100,000-character input name stays small', async () => {
    const name = 'n'.repeat(100_000);
    const answer = await rest('/v2/models/mixed/infer', {
      method: 'POST',
      key: 'inference',
      body: JSON.stringify({ inputs: [{ name, datatype: 'FP32', shape: [1], data: [1] }] }),
      headers: { 'content-type': 'application/json' },
    });
    expect(answer.status).toBe(400);
    expect((await answer.text()).length).toBeLessThan(5000);
  });

  it('REST answers quote a long model name cut, with its length', async () => {
    const name = 'y'.repeat(1000);
    const answer = await rest(`/predictions/${name}`, { method: 'POST', key: 'inference', body: '1' });
    expect(answer.status).toBe(404);
    const text = await answer.text();
    expect(text.length).toBeLessThan(2048);
    expect(text).toContain('1000 characters');
  });
});

describe('the longest name the rule accepts works everywhere', { timeout: 60_000 }, () => {
  it('registers, describes, scales, predicts on REST, OIP REST and both gRPC services, and unregisters', async () => {
    const registered = await rest(`/models?url=longest.mar&initial_workers=1&synchronous=true`, {
      method: 'POST',
      key: 'management',
    });
    expect(registered.status, await registered.clone().text()).toBe(200);
    const body = JSON.stringify({ data: [[1, 2, 3, 4]] });
    const v2 = JSON.stringify({ inputs: [{ name: 'input', datatype: 'FP32', shape: [1, 4], data: [1, 2, 3, 4] }] });
    const routes: Array<[string, string, 'inference' | 'management', string?]> = [
      ['GET', `/models/${longest}`, 'management'],
      ['GET', `/models/${longest}/1.0`, 'management'],
      ['PUT', `/models/${longest}?min_worker=1&synchronous=true`, 'management'],
      ['PUT', `/models/${longest}/1.0/set-default`, 'management'],
      ['POST', `/predictions/${longest}`, 'inference', body],
      ['POST', `/predictions/${longest}/1.0`, 'inference', body],
      ['POST', `/v1/models/${longest}:predict`, 'inference', body],
      ['GET', `/v2/models/${longest}`, 'inference'],
      ['GET', `/v2/models/${longest}/ready`, 'inference'],
      ['POST', `/v2/models/${longest}/infer`, 'inference', v2],
      ['POST', `/v2/models/${longest}/versions/1.0/infer`, 'inference', v2],
    ];
    for (const [method, path, key, payload] of routes) {
      const answer = await rest(path, {
        method,
        key,
        ...(payload ? { body: payload, headers: { 'content-type': 'application/json' } } : {}),
      });
      expect(answer.status, `${method} ${path.replace(longest, '<128>')}: ${await answer.clone().text()}`).toBe(200);
    }
    const prediction = await unaryCall(
      inference,
      'Predictions',
      { model_name: longest, input: { data: Buffer.from(body) } },
      server.keys.inference,
    );
    expect(JSON.parse(prediction.prediction.toString())).toHaveProperty('outputs.output');
    const metadata = await unaryCall(oip, 'ModelMetadata', { name: longest }, server.keys.inference);
    expect(metadata.name).toBe(longest);
    const described = await unaryCall(management, 'DescribeModel', { model_name: longest }, server.keys.management);
    expect(JSON.parse(described.msg)[0].modelName).toBe(longest);
    const removed = await rest(`/models/${longest}`, { method: 'DELETE', key: 'management' });
    expect(removed.status).toBe(200);
  });

  it("a name longer than any rule allows is 414 in TorchServe's body, after the token check, not echoed", async () => {
    const name = 'z'.repeat(5000);
    expect((await rest(`/models/${name}`)).status).toBe(401);
    const answer = await rest(`/models/${name}`, { key: 'management' });
    expect(answer.status).toBe(414);
    const json = await answer.json();
    expect(json).toMatchObject({ code: 414, marinaCode: 'MARINA_ERR_URI_TOO_LONG' });
    expect(JSON.stringify(json)).not.toContain('zzzz');
    // A name between the rule's 128 characters and the 414 limit is simply not found.
    expect((await rest(`/models/${'q'.repeat(200)}`, { key: 'management' })).status).toBe(404);
  });

  it("headers over Node's limit get 431 in TorchServe's body", async () => {
    const socket = connect(Number(new URL(server.rest).port), '127.0.0.1');
    let raw = '';
    socket.on('data', (chunk) => (raw += chunk.toString()));
    socket.write(`GET /ping HTTP/1.1\r\nHost: x\r\nX-Big: ${'b'.repeat(20_000)}\r\n\r\n`);
    await new Promise((resolve) => socket.on('close', resolve));
    expect(raw.split('\r\n')[0]).toBe('HTTP/1.1 431 Request Header Fields Too Large');
    expect(JSON.parse(raw.slice(raw.indexOf('\r\n\r\n') + 4))).toMatchObject({
      code: 431,
      marinaCode: 'MARINA_ERR_HEADERS_TOO_LARGE',
    });
  });
});

describe('inputs the models cannot take', { timeout: 60_000 }, () => {
  const deep = `${'['.repeat(100_000)}1${']'.repeat(100_000)}`;

  it('JSON nested 100,000 deep is a 400 with its code on every path', async () => {
    for (const [path, model] of [
      ['/predictions/mixed', 'tensor'],
      ['/predictions/gate', 'custom handler'],
    ]) {
      const answer = await rest(path!, {
        method: 'POST',
        key: 'inference',
        body: deep,
        headers: { 'content-type': 'application/json' },
      });
      expect(answer.status, model).toBe(400);
      expect(await answer.json(), model).toMatchObject({ marinaCode: 'MARINA_ERR_JSON_TOO_DEEP' });
    }
    const v2 = await rest('/v2/models/mixed/infer', {
      method: 'POST',
      key: 'inference',
      body: `{"inputs":${deep}}`,
      headers: { 'content-type': 'application/json' },
    });
    expect(v2.status).toBe(400);
    expect(v2.headers.get('x-marina-error-code')).toBe('MARINA_ERR_JSON_TOO_DEEP');
    const error = await grpcErrorOf(
      unaryCall(
        inference,
        'Predictions',
        { model_name: 'mixed', input: { data: Buffer.from(deep) } },
        server.keys.inference,
      ),
    );
    expect(error.code).toBe(grpc.status.INVALID_ARGUMENT);
    expect(error.metadata.get('marina-error-code')[0]).toBe('MARINA_ERR_JSON_TOO_DEEP');
  });

  it('FP32 and FP16 values the type cannot hold are refused with 400', async () => {
    const fp32 = await rest('/v2/models/mixed/infer', {
      method: 'POST',
      key: 'inference',
      body: JSON.stringify({ inputs: [{ name: 'x', datatype: 'FP32', shape: [1, 4], data: [1e39, 0, 0, 0] }] }),
      headers: { 'content-type': 'application/json' },
    });
    expect(fp32.status).toBe(400);
    expect((await fp32.json()).error).toContain('1e+39');
    const fp16 = await rest('/v2/models/mixed/infer', {
      method: 'POST',
      key: 'inference',
      body: JSON.stringify({ inputs: [{ name: 'half', datatype: 'FP16', shape: [1, 2], data: [70000, 1] }] }),
      headers: { 'content-type': 'application/json' },
    });
    expect(fp16.status).toBe(400);
    expect((await fp16.json()).error).toContain('65504');
    // Binary tensors: an Infinity or NaN bit pattern is refused too.
    const raw = Buffer.from(Float32Array.from([1, Number.POSITIVE_INFINITY, 3, Number.NaN]).buffer);
    const header = Buffer.from(
      JSON.stringify({
        inputs: [{ name: 'x', datatype: 'FP32', shape: [1, 4], parameters: { binary_data_size: raw.length } }],
      }),
    );
    const binary = await rest('/v2/models/mixed/infer', {
      method: 'POST',
      key: 'inference',
      body: Buffer.concat([header, raw]),
      headers: { 'content-type': 'application/octet-stream', 'inference-header-content-length': String(header.length) },
    });
    expect(binary.status).toBe(400);
    expect((await binary.json()).error).toContain('element 1 is not a finite number');
    // TorchServe's route, where a plain float body takes a fast path.
    const torchserve = await rest('/predictions/mixed', {
      method: 'POST',
      key: 'inference',
      body: JSON.stringify({
        inputs: {
          x: { shape: [1, 4], data: [1, 2, 3, -1e39] },
          scale: 2,
          ids: { shape: [1, 3], data: [7, 8, 9] },
          mask: { shape: [1, 3], data: [true, false, true] },
          half: { shape: [1, 2], data: [0.5, -1.5] },
          small: { shape: [1, 2], data: [3, 250] },
          wide: { shape: [1, 2], data: [0.25, 4] },
        },
      }),
      headers: { 'content-type': 'application/json' },
    });
    expect(torchserve.status).toBe(400);
    expect(await torchserve.json()).toMatchObject({ marinaCode: 'MARINA_ERR_TENSOR_INPUT_INVALID' });
  });

  it('5,000 multipart parts get their own 413, which does not blame max_request_size', async () => {
    const form = new FormData();
    for (let i = 0; i < 5000; i++) form.append(`f${i}`, '1');
    const answer = await rest('/predictions/gate', { method: 'POST', key: 'inference', body: form });
    expect(answer.status).toBe(413);
    const json = await answer.json();
    expect(json).toMatchObject({ marinaCode: 'MARINA_ERR_MULTIPART_TOO_MANY_PARTS' });
    expect(json.message).not.toContain('max_request_size');
  });
});

describe('authorization answers', { timeout: 60_000 }, () => {
  it("'Bearer k1 k2' is a malformed header, not a missing token", async () => {
    const answer = await rest('/predictions/mixed', { method: 'POST', key: `${server.keys.inference} extra` });
    expect(answer.status).toBe(401);
    const json = await answer.json();
    expect(json.marinaCode).toBe('MARINA_ERR_TOKEN_INVALID');
    expect(json.message).not.toContain('no token');
  });

  it("names key_file.json without the server's path, and never says 'API API'", async () => {
    for (const [path, key] of [
      ['/predictions/mixed', undefined],
      ['/predictions/mixed', 'wrong'],
      ['/token?type=inference', 'wrong'],
    ] as const) {
      const answer = await rest(path, { method: 'POST', ...(key ? { key } : {}) });
      expect(answer.status).toBe(401);
      const text = await answer.text();
      expect(text).toContain('key_file.json');
      expect(text).not.toContain(server.root);
      expect(text).not.toContain('API API');
    }
    // TorchServe's gRPC form: its own sentence, Marina's guidance in marina-hint.
    const error = await grpcErrorOf(unaryCall(management, 'ListModels', {}, 'wrong'));
    const hint = String(error.metadata.get('marina-hint')[0]);
    expect(hint).toContain('key_file.json');
    expect(`${error.details} ${hint}`).not.toContain(server.root);
  });

  it('the API explorer cannot be framed', async () => {
    const answer = await rest('/api-explorer');
    expect(answer.status).toBe(200);
    expect(answer.headers.get('content-security-policy')).toContain("frame-ancestors 'none'");
    expect(answer.headers.get('x-frame-options')).toBe('DENY');
  });
});
