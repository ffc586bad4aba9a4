/**
 * The Open Inference Protocol over REST against a real server (fetch on loopback), real ONNX
 * models and workers; answers compared with onnxruntime-node run directly on the same input.
 */
import { join } from 'node:path';
import * as ort from 'onnxruntime-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { float16BitsToFloat32 } from '@marina/handlers';
import { startOipServer, type OipServer } from './oip-harness.ts';
import { encodeInferResponse } from '../src/protocols/oip-rest/oip-rest-routes.ts';

let server: OipServer;
let mixed: ort.InferenceSession;
let classifier: ort.InferenceSession;

beforeAll(async () => {
  server = await startOipServer({ max_response_size: '100000' });
  mixed = await ort.InferenceSession.create(join(server.root, 'store', 'mixed', 'model.onnx'));
  classifier = await ort.InferenceSession.create(join(server.root, 'store', 'classifier', 'model.onnx'));
}, 60_000);

afterAll(async () => {
  await server?.close();
});

async function v2(
  method: string,
  path: string,
  options: { json?: unknown; body?: Buffer; headers?: Record<string, string>; token?: string | null } = {},
) {
  const headers: Record<string, string> = { ...options.headers };
  const token = options.token === undefined ? server.keys.inference : options.token;
  if (token !== null) headers.authorization = `Bearer ${token}`;
  let body: BodyInit | undefined = options.body ? new Blob([new Uint8Array(options.body)]) : undefined;
  if (options.json !== undefined) {
    body = JSON.stringify(options.json);
    headers['content-type'] ??= 'application/json';
  }
  const response = await fetch(`${server.rest}${path}`, { method, headers, ...(body !== undefined ? { body } : {}) });
  const bytes = Buffer.from(await response.arrayBuffer());
  return { status: response.status, headers: response.headers, bytes, json: () => JSON.parse(bytes.toString('utf8')) };
}

/** The mixed model's input for `n` rows, as JSON v2 inputs, and the same as ORT feeds. */
function mixedInput(n: number) {
  const x = Array.from({ length: n * 4 }, (_, i) => i * 0.25 - 1.5);
  const ids = Array.from({ length: n * 3 }, (_, i) => i * 1000 - 7);
  const mask = Array.from({ length: n * 3 }, (_, i) => i % 2 === 0);
  const half = Array.from({ length: n * 2 }, (_, i) => (i % 2 ? -1 : 1) * (0.5 + i * 0.25));
  const small = Array.from({ length: n * 2 }, (_, i) => (i * 37) % 256);
  const wide = Array.from({ length: n * 2 }, (_, i) => 1 / (i + 3));
  const inputs = [
    { name: 'x', datatype: 'FP32', shape: [n, 4], data: x },
    { name: 'scale', datatype: 'FP32', shape: [], data: [0.5] },
    { name: 'ids', datatype: 'INT64', shape: [n, 3], data: ids },
    { name: 'mask', datatype: 'BOOL', shape: [n, 3], data: mask },
    { name: 'half', datatype: 'FP16', shape: [n, 2], data: half },
    { name: 'small', datatype: 'UINT8', shape: [n, 2], data: small },
    { name: 'wide', datatype: 'FP64', shape: [n, 2], data: wide },
  ];
  // The values above are exact in half precision: sign, exponent and mantissa carried over directly.
  const toHalf = (v: number) => {
    const f = new Float32Array([v]);
    const bits = new Uint32Array(f.buffer)[0]!;
    return ((bits >>> 16) & 0x8000) | ((((bits >>> 23) & 0xff) - 112) << 10) | ((bits >>> 13) & 0x3ff);
  };
  const feeds = {
    x: new ort.Tensor('float32', Float32Array.from(x), [n, 4]),
    scale: new ort.Tensor('float32', Float32Array.from([0.5]), []),
    ids: new ort.Tensor('int64', BigInt64Array.from(ids.map(BigInt)), [n, 3]),
    mask: new ort.Tensor('bool', Uint8Array.from(mask.map(Number)), [n, 3]),
    half: new ort.Tensor('float16', Uint16Array.from(half.map(toHalf)), [n, 2]),
    small: new ort.Tensor('uint8', Uint8Array.from(small), [n, 2]),
    wide: new ort.Tensor('float64', Float64Array.from(wide), [n, 2]),
  };
  return { inputs, feeds };
}

/** ORT's output as plain numbers/booleans (float16 decoded). */
function plain(t: ort.Tensor): Array<number | boolean> {
  if (t.type === 'bool') return Array.from(t.data as Uint8Array, (v) => v !== 0);
  if (t.type === 'float16') return Array.from(t.data as Uint16Array, float16BitsToFloat32);
  return Array.from(t.data as ArrayLike<number | bigint>, Number);
}

function expectClose(actual: unknown[], expected: Array<number | boolean>) {
  expect(actual).toHaveLength(expected.length);
  expected.forEach((e, i) => {
    if (typeof e === 'boolean') expect(actual[i]).toBe(e);
    else expect(Math.abs((actual[i] as number) - e)).toBeLessThanOrEqual(1e-5);
  });
}

describe('OIP REST: health and metadata', () => {
  it('answers live, ready and the server metadata with its extensions', async () => {
    expect((await v2('GET', '/v2/health/live')).json()).toEqual({ live: true });
    const ready = await v2('GET', '/v2/health/ready');
    expect(ready.status).toBe(200);
    expect(ready.json()).toEqual({ ready: true });
    const meta = await v2('GET', '/v2');
    expect(meta.json()).toEqual({
      name: 'marina',
      version: expect.any(String),
      extensions: ['binary_tensor_data', 'model_repository'],
    });
  });

  it('refuses every v2 route but /v2/health/live and /v2/health/ready (open, as /ping) without the inference key, as REST does', async () => {
    const none = await v2('GET', '/v2/models/mixed', { token: null });
    expect(none.status).toBe(401);
    // The protocol's error body (a v2 client reads "error"), with the stable code in the header.
    expect(Object.keys(none.json())).toEqual(['error']);
    expect(none.json().error).toContain('Token Authorization failed');
    expect(none.headers.get('x-marina-error-code')).toBe('MARINA_ERR_TOKEN_MISSING');
    const wrongKey = await v2('POST', '/v2/models/mixed/infer', {
      json: { inputs: mixedInput(1).inputs },
      token: server.keys.management,
    });
    expect(wrongKey.status).toBe(401);
    expect(Object.keys(wrongKey.json())).toEqual(['error']);
  });

  /** Marina's additions to the metadata: the version's place in memory (all these models were loaded at registration). */
  const resident = { state: 'resident', residentBytes: expect.any(Number), pinned: false };
  const expectLastUsed = (meta: { lastUsed: unknown }) =>
    expect(meta.lastUsed === null || !Number.isNaN(Date.parse(String(meta.lastUsed)))).toBe(true);

  it('describes a tensor model from its ONNX signature, with -1 for dynamic dimensions', async () => {
    const meta = await v2('GET', '/v2/models/mixed');
    expect(meta.status).toBe(200);
    expectLastUsed(meta.json());
    expect(meta.json()).toEqual({
      ...resident,
      lastUsed: meta.json().lastUsed,
      name: 'mixed',
      versions: ['1.0'],
      platform: 'onnxruntime_onnx',
      inputs: [
        { name: 'x', datatype: 'FP32', shape: [-1, 4] },
        { name: 'scale', datatype: 'FP32', shape: [] },
        { name: 'ids', datatype: 'INT64', shape: [-1, 3] },
        { name: 'mask', datatype: 'BOOL', shape: [-1, 3] },
        { name: 'half', datatype: 'FP16', shape: [-1, 2] },
        { name: 'small', datatype: 'UINT8', shape: [-1, 2] },
        { name: 'wide', datatype: 'FP64', shape: [-1, 2] },
      ],
      outputs: [
        { name: 'y', datatype: 'FP32', shape: [-1, 4] },
        { name: 'ids_out', datatype: 'INT64', shape: [-1, 3] },
        { name: 'mask_out', datatype: 'BOOL', shape: [-1, 3] },
        { name: 'half_out', datatype: 'FP16', shape: [-1, 2] },
        { name: 'small_out', datatype: 'INT32', shape: [-1, 2] },
        { name: 'wide_out', datatype: 'FP64', shape: [-1, 2] },
      ],
    });
    expect((await v2('GET', '/v2/models/mixed/versions/1.0')).json()).toMatchObject({
      name: 'mixed',
      versions: ['1.0'],
    });
  });

  it('describes image_classifier and custom-handler models too', async () => {
    const classifier = (await v2('GET', '/v2/models/classifier')).json();
    expectLastUsed(classifier);
    expect(classifier).toEqual({
      ...resident,
      lastUsed: classifier.lastUsed,
      name: 'classifier',
      versions: ['1.0'],
      platform: 'onnxruntime_onnx',
      inputs: [{ name: 'input', datatype: 'FP32', shape: [-1, 3, 32, 32] }],
      outputs: [{ name: 'output', datatype: 'FP32', shape: [-1, 10] }],
    });
    const gate = (await v2('GET', '/v2/models/gate')).json();
    expectLastUsed(gate);
    expect(gate).toEqual({
      ...resident,
      lastUsed: gate.lastUsed,
      name: 'gate',
      versions: ['1.0'],
      platform: 'marina_gate_handler.mjs',
      inputs: [],
      outputs: [],
    });
  });

  it('answers model readiness, and 404 with {"error"} for an unknown model or version', async () => {
    const ready = await v2('GET', '/v2/models/mixed/ready');
    expect(ready.status).toBe(200);
    expect(ready.json()).toEqual({ name: 'mixed', ready: true });
    expect((await v2('GET', '/v2/models/mixed/versions/1.0/ready')).json()).toEqual({ name: 'mixed', ready: true });
    for (const path of [
      '/v2/models/nope',
      '/v2/models/nope/ready',
      '/v2/models/mixed/versions/9.9',
      '/v2/models/mixed/versions/9.9/ready',
    ]) {
      const res = await v2('GET', path);
      expect(res.status, path).toBe(404);
      expect(res.json().error).toMatch(/nope|9\.9/);
      expect(Object.keys(res.json())).toEqual(['error']);
    }
    const infer = await v2('POST', '/v2/models/nope/infer', { json: { inputs: mixedInput(1).inputs } });
    expect(infer.status).toBe(404);
    expect(infer.headers.get('x-marina-error-code')).toBe('MARINA_ERR_MODEL_NOT_FOUND');
  });
});

describe('OIP REST: infer', () => {
  it('takes JSON tensors of every datatype (and a rank-0 input) and answers what onnxruntime computes', async () => {
    const { inputs, feeds } = mixedInput(2);
    const expected = await mixed.run(feeds);
    const res = await v2('POST', '/v2/models/mixed/infer', { json: { id: 'req-1', inputs } });
    expect(res.status).toBe(200);
    const body = res.json();
    expect(body).toMatchObject({ model_name: 'mixed', model_version: '1.0', id: 'req-1' });
    expect(body.outputs.map((o: { name: string }) => o.name)).toEqual([
      'y',
      'ids_out',
      'mask_out',
      'half_out',
      'small_out',
      'wide_out',
    ]);
    for (const o of body.outputs) {
      const e = expected[o.name]!;
      expect(o.shape).toEqual([...e.dims]);
      expectClose(o.data, plain(e));
    }
    expect(body.outputs.map((o: { datatype: string }) => o.datatype)).toEqual([
      'FP32',
      'INT64',
      'BOOL',
      'FP16',
      'INT32',
      'FP64',
    ]);
  });

  it('returns only the outputs asked for, in the order asked', async () => {
    const { inputs, feeds } = mixedInput(1);
    const expected = await mixed.run(feeds);
    const body = (
      await v2('POST', '/v2/models/mixed/infer', { json: { inputs, outputs: [{ name: 'wide_out' }, { name: 'y' }] } })
    ).json();
    expect(body.outputs.map((o: { name: string }) => o.name)).toEqual(['wide_out', 'y']);
    expectClose(body.outputs[1].data, plain(expected.y!));
  });

  it('takes and gives binary tensors (Inference-Header-Content-Length, binary_data_size, binary_data_output)', async () => {
    const { inputs, feeds } = mixedInput(3);
    const expected = await mixed.run(feeds);
    const raws = Object.values(feeds).map((t) =>
      Buffer.from(
        (t.data as ArrayBufferView).buffer,
        (t.data as ArrayBufferView).byteOffset,
        (t.data as ArrayBufferView).byteLength,
      ),
    );
    const header = Buffer.from(
      JSON.stringify({
        inputs: inputs.map((input, i) => ({
          name: input.name,
          datatype: input.datatype,
          shape: input.shape,
          parameters: { binary_data_size: raws[i]!.length },
        })),
        outputs: [{ name: 'y' }, { name: 'ids_out', parameters: { binary_data: false } }],
        parameters: { binary_data_output: true },
      }),
    );
    const res = await v2('POST', '/v2/models/mixed/infer', {
      body: Buffer.concat([header, ...raws]),
      headers: { 'content-type': 'application/octet-stream', 'inference-header-content-length': String(header.length) },
    });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('application/octet-stream');
    const headerLength = Number(res.headers.get('inference-header-content-length'));
    const answer = JSON.parse(res.bytes.subarray(0, headerLength).toString('utf8'));
    expect(answer.outputs[0]).toEqual({
      name: 'y',
      datatype: 'FP32',
      shape: [3, 4],
      parameters: { binary_data_size: 48 },
    });
    const y = new Float32Array(Uint8Array.from(res.bytes.subarray(headerLength, headerLength + 48)).buffer);
    expectClose(Array.from(y), plain(expected.y!));
    expect(answer.outputs[1]).toMatchObject({ name: 'ids_out', datatype: 'INT64', shape: [3, 3] });
    expect(answer.outputs[1].data).toEqual(plain(expected.ids_out!));
    expect(res.bytes.length).toBe(headerLength + 48);
  });

  it('answers image_classifier models with their raw output tensor (no softmax, no top-k)', async () => {
    const pixels = Float32Array.from({ length: 2 * 3 * 32 * 32 }, (_, i) => Math.sin(i) * 0.8);
    const expected = await classifier.run({ input: new ort.Tensor('float32', pixels, [2, 3, 32, 32]) });
    const res = await v2('POST', '/v2/models/classifier/infer', {
      json: { inputs: [{ name: 'input', datatype: 'FP32', shape: [2, 3, 32, 32], data: Array.from(pixels) }] },
    });
    expect(res.status).toBe(200);
    const out = res.json().outputs[0];
    expect(out).toMatchObject({ name: 'output', datatype: 'FP32', shape: [2, 10] });
    expectClose(out.data, plain(expected.output!));
  });

  it('answers a custom handler with its own answer as one BYTES output', async () => {
    const res = await v2('POST', '/v2/models/gate/infer', {
      json: { inputs: [{ name: 'anything', datatype: 'BYTES', shape: [1], data: ['hello'] }] },
    });
    expect(res.status).toBe(200);
    const out = res.json().outputs[0];
    expect(out).toMatchObject({ name: 'output', datatype: 'BYTES', shape: [1] });
    expect(JSON.parse(out.data[0])).toEqual({ batchSize: 1, protocol: 'v2' });
  });
});

describe('OIP REST: errors, each refused before a worker', () => {
  const infer = (json: unknown, model = 'mixed') => v2('POST', `/v2/models/${model}/infer`, { json });
  const withInput = (name: string, change: Record<string, unknown>) =>
    mixedInput(1).inputs.map((i) => (i.name === name ? { ...i, ...change } : i));

  it.each([
    [
      "a datatype other than the model's",
      () => withInput('ids', { datatype: 'INT32' }),
      /input 'ids' has datatype INT32, but the model expects INT64 with shape \[-1, 3\]/,
    ],
    [
      "a shape other than the model's",
      () => withInput('x', { shape: [2, 2] }),
      /input 'x' has shape \[2, 2\], but the model expects FP32 with shape \[-1, 4\]/,
    ],
    [
      'a rank-0 input sent with a dimension',
      () => withInput('scale', { shape: [1] }),
      /input 'scale' has shape \[1\], but the model expects FP32 with shape \[\]/,
    ],
    [
      'data that does not fill the shape',
      () => withInput('x', { shape: [2, 4] }),
      /input 'x': shape \[2, 4\] needs 8 values, 'data' has 4/,
    ],
    ['an unknown datatype', () => withInput('x', { datatype: 'FLOAT' }), /"datatype" must be one of/],
    ['a value out of range', () => withInput('small', { data: [1, 300] }), /300 is not in the range of UINT8/],
    ['a string for a number', () => withInput('x', { data: [1, 2, 'three', 4] }), /"three" is not a number/],
    ['a missing input', () => mixedInput(1).inputs.filter((i) => i.name !== 'wide'), /input 'wide' is missing/],
    [
      'an unknown input',
      () => [...mixedInput(1).inputs, { name: 'extra', datatype: 'FP32', shape: [1], data: [1] }],
      /unknown input 'extra'/,
    ],
  ])('400 for %s, naming the input and what the model expects', async (_what, inputs, message) => {
    const res = await infer({ inputs: inputs() });
    expect(res.status).toBe(400);
    expect(res.json().error).toMatch(message);
    expect(res.headers.get('x-marina-error-code')).toBe('MARINA_ERR_TENSOR_INPUT_INVALID');
  });

  it('counts every request refused for its body in the metrics: undecodable, out of range, or not fitting the model', async () => {
    const refused: Array<{ modelName: string; statusCode: number }> = [];
    const listener = (e: { modelName: string; statusCode: number }) =>
      refused.push({ modelName: e.modelName, statusCode: e.statusCode });
    server.app.registry.events.on('request', listener);
    try {
      expect(
        (
          await v2('POST', '/v2/models/mixed/infer', {
            body: Buffer.from('not json'),
            headers: { 'content-type': 'application/json' },
          })
        ).status,
      ).toBe(400);
      expect((await infer({ inputs: withInput('small', { data: [1, 300] }) })).status).toBe(400);
      expect((await infer({ inputs: mixedInput(1).inputs.filter((i) => i.name !== 'wide') })).status).toBe(400);
      // An unknown model's request is not a model's request: not counted.
      expect((await infer({ inputs: mixedInput(1).inputs }, 'nope')).status).toBe(404);
    } finally {
      server.app.registry.events.off('request', listener);
    }
    expect(refused).toEqual([
      { modelName: 'mixed', statusCode: 400 },
      { modelName: 'mixed', statusCode: 400 },
      { modelName: 'mixed', statusCode: 400 },
    ]);
  });

  it('400 for an unknown output', async () => {
    const res = await infer({ inputs: mixedInput(1).inputs, outputs: [{ name: 'nope' }] });
    expect(res.status).toBe(400);
    expect(res.json().error).toMatch(/unknown output 'nope'; model 'mixed' has outputs: y, ids_out/);
    expect(res.headers.get('x-marina-error-code')).toBe('MARINA_ERR_TENSOR_OUTPUT_UNKNOWN');
  });

  it('400 for a body that is not JSON and for a JSON body without inputs', async () => {
    expect(
      (
        await v2('POST', '/v2/models/mixed/infer', {
          body: Buffer.from('{oops'),
          headers: { 'content-type': 'application/json' },
        })
      ).json().error,
    ).toMatch(/not valid JSON/);
    const empty = await infer({ inputs: [] });
    expect(empty.status).toBe(400);
    expect(empty.json().error).toMatch(/non-empty "inputs" list/);
  });

  it('400 for a binary body whose sizes do not add up, or whose header length is wrong', async () => {
    const header = Buffer.from(
      JSON.stringify({
        inputs: [{ name: 'x', datatype: 'FP32', shape: [1, 4], parameters: { binary_data_size: 16 } }],
      }),
    );
    const short = await v2('POST', '/v2/models/mixed/infer', {
      body: Buffer.concat([header, Buffer.alloc(8)]),
      headers: { 'content-type': 'application/octet-stream', 'inference-header-content-length': String(header.length) },
    });
    expect(short.status).toBe(400);
    expect(short.json().error).toMatch(/declares binary_data_size 16 but only 8 bytes are left/);
    const tooLong = await v2('POST', '/v2/models/mixed/infer', {
      body: Buffer.concat([header, Buffer.alloc(16)]),
      headers: {
        'content-type': 'application/octet-stream',
        'inference-header-content-length': String(header.length + 100),
      },
    });
    expect(tooLong.status).toBe(400);
    expect(tooLong.json().error).toMatch(/Inference-Header-Content-Length is \d+, but the body has \d+ bytes/);
    const wrongSize = Buffer.from(
      JSON.stringify({
        inputs: [{ name: 'x', datatype: 'FP32', shape: [1, 4], parameters: { binary_data_size: 12 } }],
      }),
    );
    const res = await v2('POST', '/v2/models/mixed/infer', {
      body: Buffer.concat([wrongSize, Buffer.alloc(12)]),
      headers: {
        'content-type': 'application/octet-stream',
        'inference-header-content-length': String(wrongSize.length),
      },
    });
    expect(res.status).toBe(400);
    expect(res.json().error).toMatch(/input 'x': FP32 shape \[1, 4\] needs 16 bytes, got 12/);
  });

  it('400 for an image_classifier tensor of the wrong size', async () => {
    const res = await infer(
      { inputs: [{ name: 'input', datatype: 'FP32', shape: [1, 3, 16, 16], data: new Array(3 * 16 * 16).fill(0) }] },
      'classifier',
    );
    expect(res.status).toBe(400);
    expect(res.json().error).toMatch(
      /input 'input' has shape \[1, 3, 16, 16\], but the model expects FP32 with shape \[-1, 3, 32, 32\]/,
    );
  });

  it('413 for a body over max_request_size', async () => {
    const res = await v2('POST', '/v2/models/mixed/infer', {
      body: Buffer.alloc(server.config.maxRequestBytes + 1),
      headers: { 'content-type': 'application/octet-stream' },
    });
    expect(res.status).toBe(413);
    expect(res.json().error).toMatch(/max_request_size/);
  });

  it('refuses an answer over max_response_size with MARINA_ERR_RESPONSE_TOO_LARGE, on v2 and on the TorchServe route', async () => {
    const { inputs } = mixedInput(2000);
    const v2res = await infer({ inputs });
    expect(v2res.status).toBe(500);
    expect(v2res.headers.get('x-marina-error-code')).toBe('MARINA_ERR_RESPONSE_TOO_LARGE');
    expect(v2res.json().error).toMatch(/larger than max_response_size \(100000 bytes\); ask for fewer outputs/);
    const small = await infer({ inputs, outputs: [{ name: 'mask_out' }], parameters: { binary_data_output: true } });
    expect(small.status).toBe(200);
    const ts = await fetch(`${server.rest}/predictions/mixed`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${server.keys.inference}` },
      body: JSON.stringify({ inputs }),
    });
    expect(ts.status).toBe(500);
    expect((await ts.json()).marinaCode).toBe('MARINA_ERR_RESPONSE_TOO_LARGE');
  });

  it('decides before building the v2 JSON answer whether it can fit, from the least its JSON can take', () => {
    // 60,000 BOOL values: 60,000 bytes in binary, at least 119,999 as JSON ("true," or "false," each).
    const outputs = [{ name: 'mask_out', datatype: 'BOOL' as const, shape: [20000, 3], raw: Buffer.alloc(60000, 1) }];
    const response = { modelName: 'mixed', modelVersion: '1.0', id: '1', outputs };
    expect(() => encodeInferResponse(response, () => false, 100000)).toThrow(
      /would take at least 119999 bytes, larger than max_response_size \(100000 bytes\)/,
    );
    const binary = encodeInferResponse(response, () => true, 100000);
    expect(binary.body.length).toBeLessThan(100000);
    expect(binary.headerLength).toBeGreaterThan(0);
  });
});
