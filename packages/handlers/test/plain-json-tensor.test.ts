/**
 * isPlainFloatTensorBody is admission's shortcut for the common small JSON body: whatever it
 * accepts, parseTensorRequest (the full check) must accept too, with the shape the body has. It
 * may say "not sure" (false) for anything; the full check then decides. Checked on hand-picked
 * bodies and on bodies made from a seeded random generator and mutated.
 */
import { describe, expect, it } from 'vitest';
import { isPlainFloatTensorBody, parseTensorRequest, type TensorSignature } from '../src/index.ts';

const signatures: Record<string, TensorSignature[]> = {
  'float32 [N,4]': [{ name: 'input', type: 'float32', shape: ['N', 4] }],
  'float64 [2,3]': [{ name: 'x', type: 'float64', shape: [2, 3] }],
  'float32 [batch,3,2]': [{ name: 'image', type: 'float32', shape: ['batch', 3, 2] }],
  'float32 [-1]': [{ name: 'v', type: 'float32', shape: [-1] }],
  'int64 [N,4]': [{ name: 'ids', type: 'int64', shape: ['N', 4] }],
  'float16 [N,4]': [{ name: 'h', type: 'float16', shape: ['N', 4] }],
  'two inputs': [
    { name: 'a', type: 'float32', shape: ['N', 4] },
    { name: 'b', type: 'float32', shape: ['N', 4] },
  ],
  'float32 scalar': [{ name: 's', type: 'float32', shape: [] }],
};

/** Whether the full check accepts the body, and the shape of the tensor it reads. */
function fullCheck(text: string, inputs: TensorSignature[]): { ok: true; shape: number[] } | { ok: false } {
  try {
    const parsed = parseTensorRequest(Buffer.from(text), inputs);
    return { ok: true, shape: parsed.tensors.get(inputs[0]!.name)!.shape };
  } catch {
    return { ok: false };
  }
}

function nestedShapeOf(value: unknown): number[] {
  const shape: number[] = [];
  for (let probe = value; Array.isArray(probe); probe = probe[0]) shape.push(probe.length);
  return shape;
}

/** Every body the shortcut accepts is accepted by the full check, with the same shape; returns whether the shortcut accepted. */
function expectNeverLooser(text: string, inputs: TensorSignature[]): boolean {
  const body: unknown = JSON.parse(text);
  const isPlain = isPlainFloatTensorBody(body, inputs);
  if (isPlain) {
    const full = fullCheck(text, inputs);
    expect(full, `${text} against ${JSON.stringify(inputs)}`).toEqual({
      ok: true,
      shape: nestedShapeOf(Array.isArray(body) ? body : (body as { data: unknown }).data),
    });
  }
  return isPlain;
}

describe('isPlainFloatTensorBody', () => {
  it('accepts the plain bodies of a one-input float model, which the full check accepts too', () => {
    const accepted: Array<[string, string]> = [
      ['float32 [N,4]', '{"data": [[1, 2, 3, 4]]}'],
      ['float32 [N,4]', '{"data":[[1,2,3,4],[5,6,7,8.5]]}'],
      ['float32 [N,4]', '[[1, 2, 3, 4]]'],
      ['float32 [N,4]', '{"data": [[-1e-3, 0, 1E5, -0]]}'],
      ['float64 [2,3]', '{"data": [[1, 2, 3], [4, 5, 6]]}'],
      ['float32 [batch,3,2]', '{"data": [[[1, 2], [3, 4], [5, 6]]]}'],
      ['float32 [-1]', '{"data": [1, 2, 3]}'],
    ];
    for (const [signature, text] of accepted)
      expect(expectNeverLooser(text, signatures[signature]!), `${signature}: ${text}`).toBe(true);
  });

  it('leaves everything else to the full check: other forms, other types, ragged, empty or wrongly sized arrays', () => {
    const notSure: Array<[string, string]> = [
      ['float32 [N,4]', '{"data": [[1, 2, 3]]}'], // a fixed dimension of the wrong size
      ['float32 [N,4]', '{"data": [[1, 2, 3, 4], [1, 2, 3]]}'], // ragged
      ['float32 [N,4]', '{"data": [[1, 2], [3, [4, 5]]]}'],
      ['float32 [N,4]', '{"data": [1, 2, 3, 4]}'], // rank 1 for a rank-2 input
      ['float32 [N,4]', '{"data": [[[1, 2, 3, 4]]]}'], // rank 3
      ['float32 [N,4]', '{"data": [[1, 2, "3", 4]]}'],
      ['float32 [N,4]', '{"data": [[1, 2, null, 4]]}'],
      ['float32 [N,4]', '{"data": [[true, 2, 3, 4]]}'],
      ['float32 [N,4]', '{"data": []}'],
      ['float32 [N,4]', '{"data": [[]]}'],
      ['float32 [N,4]', '{"data": [[1, 2, 3, 4]], "outputs": ["output"]}'],
      ['float32 [N,4]', '{"inputs": {"input": [[1, 2, 3, 4]]}}'],
      ['float32 [N,4]', '{"inputs": [{"name": "input", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]}'],
      ['float32 [N,4]', '{"data": {"shape": [1, 4], "data": [1, 2, 3, 4]}}'],
      ['float32 [N,4]', '{"__proto__": [[1, 2, 3, 4]], "data": [[1, 2, 3, 4]]}'],
      ['float32 [N,4]', '"text"'],
      ['float32 [N,4]', '42'],
      ['float32 [N,4]', 'null'],
      ['int64 [N,4]', '{"data": [[1, 2, 3, 4]]}'],
      ['float16 [N,4]', '{"data": [[1, 2, 3, 4]]}'],
      ['two inputs', '{"data": [[1, 2, 3, 4]]}'],
      ['float32 scalar', '{"data": 1}'],
      ['float64 [2,3]', '{"data": [[1, 2, 3]]}'],
    ];
    for (const [signature, text] of notSure)
      expect(expectNeverLooser(text, signatures[signature]!), `${signature}: ${text}`).toBe(false);
  });

  it('is never looser than the full check on random and mutated bodies', () => {
    let seed = 42;
    const random = () => {
      seed = (seed * 1103515245 + 12345) % 2147483648;
      return seed / 2147483648;
    };
    const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)]!;
    const leaf = (): unknown =>
      random() < 0.9 ? Math.round((random() - 0.5) * 1e4) / 100 : pick(['1', null, true, [], {}, [1]]);
    const nested = (depth: number): unknown => {
      if (depth === 0) return leaf();
      const n = random() < 0.1 ? 0 : 1 + Math.floor(random() * 4);
      return Array.from({ length: n }, () =>
        nested(random() < 0.1 ? Math.max(0, depth - 1 - Math.floor(random() * 2)) : depth - 1),
      );
    };
    let accepted = 0;
    for (let i = 0; i < 3000; i++) {
      const name = pick(Object.keys(signatures));
      const inputs = signatures[name]!;
      const rank = inputs[0]!.shape.length;
      const data = nested(Math.max(0, rank + pick([0, 0, 0, 0, -1, 1])));
      const body = pick(['data', 'data', 'bare', 'extra'] as const);
      const text = JSON.stringify(body === 'bare' ? data : body === 'data' ? { data } : { data, extra: 1 });
      if (expectNeverLooser(text, inputs)) accepted++;
    }
    // The generator reaches the accepted case often enough for the comparison to mean something.
    expect(accepted).toBeGreaterThan(100);
  });
});
