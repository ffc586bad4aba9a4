import { describe, expect, it } from 'vitest';
import { getBuiltinHandler, joinBinaryBody, parseTensorRequest, rawToJson, resolveImageClassifierOptions, topK } from '../src/index.ts';

describe('image_classifier options', () => {
  it('takes the crop from the model input and scales resize by 256/224', () => {
    expect(resolveImageClassifierOptions({}, ['batch', 3, 224, 224])).toMatchObject({ resize: 256, crop: [224, 224], topk: 5 });
    expect(resolveImageClassifierOptions({}, ['batch', 3, 112, 112])).toMatchObject({ resize: 128, crop: [112, 112] });
  });

  it('reads handler.resize/mean/std/topk from model-config.yaml and rejects bad values by name', () => {
    const o = resolveImageClassifierOptions({ handler: { resize: 300, mean: [0.5, 0.5, 0.5], std: [0.5, 0.5, 0.5], topk: 3 } }, [1, 3, 224, 224]);
    expect(o).toMatchObject({ resize: 300, mean: [0.5, 0.5, 0.5], std: [0.5, 0.5, 0.5], topk: 3 });
    expect(() => resolveImageClassifierOptions({ handler: { std: [0, 1, 1] } }, [1, 3, 224, 224])).toThrow(/handler.std/);
    expect(() => resolveImageClassifierOptions({ handler: { crop: 200 } }, [1, 3, 224, 224])).toThrow(/handler.crop is 200x200 but the model's input takes 224x224/);
  });
});

describe('topK', () => {
  it('returns softmax probabilities of the k best, in rank order, labelled by index_to_name', () => {
    const top = topK([1, 3, 2, 0], 2, new Map([[1, 'cat']]));
    expect([...top.keys()]).toEqual(['cat', '2']);
    const e = [1, 3, 2, 0].map((x) => Math.exp(x));
    const sum = e.reduce((a, b) => a + b);
    expect(top.get('cat')).toBeCloseTo(e[1]! / sum, 10);
  });
});

describe('tensor handler requests', () => {
  const x = [{ name: 'x', type: 'float32', shape: ['batch', 2] }];
  const values = (body: unknown, options = {}) => {
    const t = parseTensorRequest(body, x, options).tensors.get('x')!;
    return { shape: t.shape, data: rawToJson(t.datatype, t.raw) };
  };

  it('accepts named inputs, KServe v2 lists and bare nested arrays', () => {
    expect(values({ inputs: { x: { shape: [1, 2], data: [1, 2] } } })).toEqual({ shape: [1, 2], data: [1, 2] });
    expect(values({ inputs: [{ name: 'x', shape: [2, 2], datatype: 'FP32', data: [1, 2, 3, 4] }] })).toEqual({ shape: [2, 2], data: [1, 2, 3, 4] });
    expect(values(Buffer.from('[[1,2],[3,4]]'))).toEqual({ shape: [2, 2], data: [1, 2, 3, 4] });
  });

  it('reads the v2 binary layout and names the outputs asked for', () => {
    const raw = Buffer.from(Float32Array.from([5, 6]).buffer);
    const { body, headerLength } = joinBinaryBody({ inputs: [{ name: 'x', datatype: 'FP32', shape: [1, 2], parameters: { binary_data_size: 8 } }], outputs: [{ name: 'y', parameters: { binary_data: false } }] }, [raw]);
    const parsed = parseTensorRequest(body, x, { headerLength });
    expect(parsed.format).toBe('v2-binary');
    expect(parsed.outputs).toEqual([{ name: 'y', isBinary: false }]);
    expect(rawToJson('FP32', parsed.tensors.get('x')!.raw)).toEqual([5, 6]);
  });

  it('rejects shapes that do not match the data or the model, wrong datatypes, unknown inputs and bad JSON', () => {
    expect(() => parseTensorRequest({ inputs: { x: { shape: [1, 2], data: [1, 2, 3] } } }, x)).toThrow(/shape \[1, 2\] needs 2 values, 'data' has 3/);
    expect(() => parseTensorRequest({ inputs: { x: { shape: [1, 3], data: [1, 2, 3] } } }, x)).toThrow(/input 'x' has shape \[1, 3\], but the model expects FP32 with shape \[-1, 2\]/);
    expect(() => parseTensorRequest({ inputs: [{ name: 'x', shape: [1, 2], datatype: 'INT32', data: [1, 2] }] }, x)).toThrow(/datatype INT32, but the model expects FP32/);
    expect(() => parseTensorRequest({ inputs: { y: { data: [1] } } }, x)).toThrow(/unknown input 'y'/);
    expect(() => parseTensorRequest('{oops', x)).toThrow(/not valid JSON/);
  });
});

describe('built-in handler registry', () => {
  it('serves base_handler with the tensor handler and keeps checkSignature', () => {
    expect(getBuiltinHandler('base_handler')?.name).toBe('tensor');
    expect(getBuiltinHandler('image_classifier')?.checkSignature({ inputs: [{ name: 'i', type: 'float32', shape: ['n', 3, 224, 224] }], outputs: [{ name: 'o', type: 'float32', shape: ['n', 1000] }] }, { batchSize: 4, modelYamlConfig: {} })).toEqual([]);
  });
});
