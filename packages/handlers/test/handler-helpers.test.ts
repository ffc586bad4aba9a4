import { describe, expect, it } from 'vitest';
import {
  fixedBatchWarning,
  getBuiltinHandler,
  isProbabilityRow,
  joinBinaryBody,
  parseTensorRequest,
  rawToJson,
  resolveImageClassifierOptions,
  topIndices,
  topK,
} from '../src/index.ts';

describe('image_classifier options', () => {
  it('takes the crop from the model input and scales resize by 256/224', () => {
    expect(resolveImageClassifierOptions({}, ['batch', 3, 224, 224])).toMatchObject({
      resize: 256,
      height: 224,
      width: 224,
      topk: 5,
      resizeMode: 'crop',
      softmax: 'auto',
    });
    expect(resolveImageClassifierOptions({}, ['batch', 3, 112, 112])).toMatchObject({
      resize: 128,
      height: 112,
      width: 112,
    });
  });

  it('reads handler.resize/mean/std/topk from model-config.yaml and rejects bad values by name', () => {
    const o = resolveImageClassifierOptions(
      { handler: { resize: 300, mean: [0.5, 0.5, 0.5], std: [0.5, 0.5, 0.5], topk: 3 } },
      [1, 3, 224, 224],
    );
    expect(o).toMatchObject({ resize: 300, mean: [0.5, 0.5, 0.5], std: [0.5, 0.5, 0.5], topk: 3 });
    expect(() => resolveImageClassifierOptions({ handler: { std: [0, 1, 1] } }, [1, 3, 224, 224])).toThrow(
      /handler.std/,
    );
    expect(() => resolveImageClassifierOptions({ handler: { crop: 200 } }, [1, 3, 224, 224])).toThrow(
      /handler.crop is 200x200 but the model's input takes 224x224 images/,
    );
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

  it('picks the same k indices in the same order as a stable sort of every index (ties by index), NaN ranked last', () => {
    // A seeded generator: the same 2,000 rows on every run.
    let seed = 7;
    const random = () => {
      seed = (seed * 1103515245 + 12345) % 2147483648;
      return seed / 2147483648;
    };
    for (let row = 0; row < 2000; row++) {
      const length = 1 + Math.floor(random() * 40);
      // Few distinct values, so rows are full of ties; some rows also have infinities.
      const values = Array.from({ length }, () =>
        random() < 0.05 ? [Infinity, -Infinity, Number.NaN][Math.floor(random() * 3)]! : Math.floor(random() * 6) - 3,
      );
      const k = 1 + Math.floor(random() * (length + 2));
      // NaN below every number; the sort is stable, so ties (NaN with NaN too) keep index order.
      const expected = values
        .map((_, i) => i)
        .sort((a, b) => {
          const x = values[a]!;
          const y = values[b]!;
          if (Number.isNaN(x) !== Number.isNaN(y)) return Number.isNaN(x) ? 1 : -1;
          return y > x ? 1 : y < x ? -1 : 0;
        })
        .slice(0, Math.min(k, length));
      expect(topIndices(values, Math.min(k, length))).toEqual(expected);
    }
    expect(topIndices([Number.NaN, Number.NaN, Number.NaN], 2)).toEqual([0, 1]);
    expect(topIndices(new Float64Array([0.1, Number.NaN, 0.7, 0.7]), 3)).toEqual([2, 3, 0]);
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
    expect(values({ inputs: [{ name: 'x', shape: [2, 2], datatype: 'FP32', data: [1, 2, 3, 4] }] })).toEqual({
      shape: [2, 2],
      data: [1, 2, 3, 4],
    });
    expect(values(Buffer.from('[[1,2],[3,4]]'))).toEqual({ shape: [2, 2], data: [1, 2, 3, 4] });
  });

  it('reads the v2 binary layout and names the outputs asked for', () => {
    const raw = Buffer.from(Float32Array.from([5, 6]).buffer);
    const { body, headerLength } = joinBinaryBody(
      {
        inputs: [{ name: 'x', datatype: 'FP32', shape: [1, 2], parameters: { binary_data_size: 8 } }],
        outputs: [{ name: 'y', parameters: { binary_data: false } }],
      },
      [raw],
    );
    const parsed = parseTensorRequest(body, x, { headerLength });
    expect(parsed.format).toBe('v2-binary');
    expect(parsed.outputs).toEqual([{ name: 'y', isBinary: false }]);
    expect(rawToJson('FP32', parsed.tensors.get('x')!.raw)).toEqual([5, 6]);
  });

  it('rejects shapes that do not match the data or the model, wrong datatypes, unknown inputs and bad JSON', () => {
    expect(() => parseTensorRequest({ inputs: { x: { shape: [1, 2], data: [1, 2, 3] } } }, x)).toThrow(
      /shape \[1, 2\] needs 2 values, 'data' has 3/,
    );
    expect(() => parseTensorRequest({ inputs: { x: { shape: [1, 3], data: [1, 2, 3] } } }, x)).toThrow(
      /input 'x' has shape \[1, 3\], but the model expects FP32 with shape \[-1, 2\]/,
    );
    expect(() =>
      parseTensorRequest({ inputs: [{ name: 'x', shape: [1, 2], datatype: 'INT32', data: [1, 2] }] }, x),
    ).toThrow(/datatype INT32, but the model expects FP32/);
    expect(() => parseTensorRequest({ inputs: { y: { data: [1] } } }, x)).toThrow(/unknown input 'y'/);
    expect(() => parseTensorRequest('{oops', x)).toThrow(/not valid JSON/);
  });

  it('rejects ragged nested arrays, also one whose leaves happen to add up to the shape', () => {
    expect(() => parseTensorRequest({ data: [[1, 2], [3]] }, x)).toThrow(
      /input 'x': the nested array is not rectangular \(shape looks like \[2, 2\]/,
    );
    expect(() =>
      parseTensorRequest(
        {
          data: [
            [1, 2],
            [3, [4]],
          ],
        },
        x,
      ),
    ).toThrow(/not rectangular/);
    expect(() => parseTensorRequest({ data: [[1, 2], 3] }, x)).toThrow(/not rectangular/);
    expect(() =>
      parseTensorRequest(
        {
          inputs: {
            x: {
              data: [
                [1, 2],
                [3, 4, 5],
              ],
            },
          },
        },
        x,
      ),
    ).toThrow(/not rectangular/);
    // Nested data with an explicit shape is read row-major, however it is nested.
    expect(
      values({
        inputs: {
          x: {
            shape: [2, 2],
            data: [
              [1, 2],
              [3, [4]],
            ],
          },
        },
      }),
    ).toEqual({ shape: [2, 2], data: [1, 2, 3, 4] });
  });
});

describe('topK with probabilities the model already computed', () => {
  it("'none' keeps them, 'exp' undoes a LogSoftmax, and isProbabilityRow recognises a distribution", () => {
    expect([...topK([0.1, 0.9], 2, undefined, 'none').entries()]).toEqual([
      ['1', 0.9],
      ['0', 0.1],
    ]);
    expect(topK([Math.log(0.25), Math.log(0.75)], 1, undefined, 'exp').get('1')).toBeCloseTo(0.75, 12);
    expect(isProbabilityRow([0.2, 0.3, 0.5])).toBe(true);
    expect(isProbabilityRow([0.2, 0.3, 0.4])).toBe(false);
    expect(isProbabilityRow([1.2, -0.2])).toBe(false);
  });
});

describe('the fixed-batch rule', () => {
  const signature = (batch: number | string) => ({
    inputs: [{ name: 'x', type: 'float32', shape: [batch, 3, 8, 8] }],
    outputs: [{ name: 'y', type: 'float32', shape: [batch, 10] }],
  });
  it('warns (never refuses) when batchSize is above a fixed batch dimension, for every built-in handler', () => {
    expect(fixedBatchWarning(signature('n'), 8)).toBeUndefined();
    expect(fixedBatchWarning(signature(1), 1)).toBeUndefined();
    expect(fixedBatchWarning(signature(1), 4)).toMatchObject({
      code: 'MARINA_ERR_MODEL_BATCH_NOT_DYNAMIC',
      severity: 'warning',
      message: expect.stringMatching(
        /batchSize is 4 but input 'x' float32\[1,3,8,8\] has a fixed batch dimension of 1.*one image or request at a time/,
      ),
    });
    for (const name of ['image_classifier', 'tensor']) {
      const problems = getBuiltinHandler(name)!.checkSignature(signature(1), { batchSize: 4, modelYamlConfig: {} });
      expect(problems).toEqual([fixedBatchWarning(signature(1), 4)]);
    }
  });
});

describe('built-in handler registry', () => {
  it('serves base_handler with the tensor handler and keeps checkSignature', () => {
    expect(getBuiltinHandler('base_handler')?.name).toBe('tensor');
    expect(
      getBuiltinHandler('image_classifier')?.checkSignature(
        {
          inputs: [{ name: 'i', type: 'float32', shape: ['n', 3, 224, 224] }],
          outputs: [{ name: 'o', type: 'float32', shape: ['n', 1000] }],
        },
        { batchSize: 4, modelYamlConfig: {} },
      ),
    ).toEqual([]);
  });
});

describe('signature checks of the image handlers', () => {
  const input = { name: 'x', type: 'float32', shape: ['n', 3, 64, 64] };
  const check = (
    name: string,
    outputs: Array<{ name: string; shape: Array<number | string>; type?: string }>,
    handler: Record<string, unknown> = {},
  ) =>
    getBuiltinHandler(name)!
      .checkSignature(
        { inputs: [input], outputs: outputs.map((o) => ({ type: 'float32', ...o })) },
        { batchSize: 1, modelYamlConfig: { handler } },
      )
      .map((p) => p.code);

  it('image_classifier: several outputs need handler.output, which must exist; a per-pixel output is refused', () => {
    const outputs = [
      { name: 'logits', shape: ['n', 10] },
      { name: 'features', shape: ['n', 512] },
    ];
    expect(check('image_classifier', outputs)).toEqual(['MARINA_ERR_HANDLER_SIGNATURE_MISMATCH']);
    expect(check('image_classifier', outputs, { output: 'logits' })).toEqual([]);
    expect(check('image_classifier', outputs, { output: 'probs' })).toEqual(['MARINA_ERR_MODEL_CONFIG_INVALID']);
    expect(check('image_classifier', [{ name: 'mask', shape: ['n', 12, 64, 64] }])).toEqual([
      'MARINA_ERR_HANDLER_SIGNATURE_MISMATCH',
    ]);
  });

  it('image_segmenter takes [N,C,H,W] and [N,1,H,W] outputs and refuses [N,classes]', () => {
    expect(check('image_segmenter', [{ name: 'out', shape: ['n', 21, 64, 64] }])).toEqual([]);
    expect(check('image_segmenter', [{ name: 'out', shape: ['n', 1, 64, 64] }], { response: 'png' })).toEqual([]);
    expect(check('image_segmenter', [{ name: 'out', shape: ['n', 10] }])).toEqual([
      'MARINA_ERR_HANDLER_SIGNATURE_MISMATCH',
    ]);
  });

  it('object_detector reads the named outputs of either layout', () => {
    const separate = [
      { name: 'boxes', shape: ['n', 'k', 4] },
      { name: 'scores', shape: ['n', 'k'] },
      { name: 'labels', shape: ['n', 'k'], type: 'int64' },
    ];
    expect(check('object_detector', separate)).toEqual([]);
    expect(
      check(
        'object_detector',
        [
          { name: 'det_boxes', shape: ['n', 'k', 4] },
          { name: 'det_scores', shape: ['n', 'k'] },
        ],
        { boxes: 'det_boxes', scores: 'det_scores' },
      ),
    ).toEqual([]);
    expect(
      check('object_detector', [
        { name: 'det_boxes', shape: ['n', 'k', 4] },
        { name: 'det_scores', shape: ['n', 'k'] },
      ]),
    ).toEqual(['MARINA_ERR_MODEL_CONFIG_INVALID', 'MARINA_ERR_MODEL_CONFIG_INVALID']);
    expect(check('object_detector', [{ name: 'output', shape: [1, 25200, 85] }])).toEqual([]);
    expect(check('object_detector', [{ name: 'output', shape: [1, 25200, 3] }])).toEqual([
      'MARINA_ERR_HANDLER_SIGNATURE_MISMATCH',
    ]);
  });
});
