import sharp from 'sharp';
import * as ort from 'onnxruntime-node';
import { createHandlerError } from './errors.ts';
import { isDynamicDim } from './signature-checks.ts';
import type { ModelSignature, TensorSignature } from './types.ts';

export interface SyntheticShapeOptions {
  /** Size of a dynamic first (batch) dimension. Default 1. */
  batchSize?: number;
  /** Sizes of other dynamic dimensions by their symbolic name (`sequence: 128`); unnamed or unlisted ones get 1. */
  dims?: Readonly<Record<string, number>>;
}

/** A concrete shape for one input: the dynamic batch dimension becomes `batchSize`, other dynamic ones `dims[name]` or 1. */
export function concreteShape(input: TensorSignature, options: SyntheticShapeOptions = {}): number[] {
  return input.shape.map((d, i) => {
    if (!isDynamicDim(d)) return Number(d);
    if (typeof d === 'string' && options.dims?.[d] !== undefined) return options.dims[d]!;
    return i === 0 ? (options.batchSize ?? 1) : 1;
  });
}

/** A small seeded generator (mulberry32): the same inputs on every run, so profiles compare. */
function createRandom(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/**
 * Values for one input: floats uniform in [-1, 1), integers 0 (a valid index for embeddings and
 * gathers), booleans false, strings empty.
 * @throws MARINA_ERR_HANDLER_CONFIG_INVALID for a type that has no synthetic form (a non-tensor input).
 */
function syntheticData(input: TensorSignature, count: number, random: () => number): ort.Tensor['data'] {
  switch (input.type) {
    case 'float32':
      return Float32Array.from({ length: count }, () => random() * 2 - 1);
    case 'float64':
      return Float64Array.from({ length: count }, () => random() * 2 - 1);
    case 'float16':
      return new Uint16Array(count);
    case 'int8':
      return new Int8Array(count);
    case 'uint8':
      return new Uint8Array(count);
    case 'int16':
      return new Int16Array(count);
    case 'uint16':
      return new Uint16Array(count);
    case 'int32':
      return new Int32Array(count);
    case 'uint32':
      return new Uint32Array(count);
    case 'int64':
      return new BigInt64Array(count);
    case 'uint64':
      return new BigUint64Array(count);
    case 'bool':
      return new Uint8Array(count);
    case 'string':
      return new Array<string>(count).fill('');
    default:
      throw createHandlerError.MARINA_ERR_HANDLER_CONFIG_INVALID(
        `input '${input.name}' has type '${input.type}', for which no synthetic value can be made; give a sample input instead`,
      );
  }
}

/**
 * Representative feeds for a model from its signature alone: one tensor per input, shaped by
 * `concreteShape`, with seeded values. What `marina-bench profile` and warm-up use when there is
 * no sample input.
 */
export function syntheticFeeds(
  signature: ModelSignature,
  options: SyntheticShapeOptions & { seed?: number } = {},
): Record<string, ort.Tensor> {
  const random = createRandom(options.seed ?? 42);
  const feeds: Record<string, ort.Tensor> = {};
  for (const input of signature.inputs) {
    const dims = concreteShape(input, options);
    const count = dims.reduce((a, b) => a * b, 1);
    feeds[input.name] = new ort.Tensor(
      input.type as 'float32',
      syntheticData(input, count, random) as Float32Array,
      dims,
    );
  }
  return feeds;
}

/**
 * One request body a built-in handler accepts, made from the model's signature: for
 * the image handlers (`image_classifier`, `image_segmenter`, `object_detector`) a JPEG of noise larger than the model's input (so decoding, resizing and
 * cropping all run); for `tensor` the JSON form `{"inputs": {name: {shape, data}}}` with one row.
 * Returns undefined for a custom handler, whose input format only its author knows.
 */
export async function syntheticRequestBody(
  handler: string,
  signature: ModelSignature,
  options: SyntheticShapeOptions = {},
): Promise<{ body: Buffer; contentType: string } | undefined> {
  if (handler === 'image_classifier' || handler === 'image_segmenter' || handler === 'object_detector') {
    const shape = signature.inputs[0]?.shape ?? [];
    const h = shape.length === 4 && !isDynamicDim(shape[2]) ? Number(shape[2]) : 224;
    const w = shape.length === 4 && !isDynamicDim(shape[3]) ? Number(shape[3]) : 224;
    const width = Math.round((w * 640) / 224);
    const height = Math.round((h * 480) / 224);
    const random = createRandom(7);
    const pixels = Buffer.from(Uint8Array.from({ length: width * height * 3 }, () => Math.floor(random() * 256)));
    const body = await sharp(pixels, { raw: { width, height, channels: 3 } })
      .jpeg({ quality: 85 })
      .toBuffer();
    return { body, contentType: 'image/jpeg' };
  }
  if (handler === 'tensor' || handler === 'base_handler') {
    const feeds = syntheticFeeds(signature, { ...options, batchSize: 1 });
    const inputs: Record<string, { shape: readonly number[]; data: unknown[] }> = {};
    for (const [name, tensor] of Object.entries(feeds)) {
      const data = Array.from(tensor.data as ArrayLike<number | bigint | string>, (v) =>
        typeof v === 'bigint' ? Number(v) : v,
      );
      inputs[name] = { shape: tensor.dims, data };
    }
    return { body: Buffer.from(JSON.stringify({ inputs })), contentType: 'application/json' };
  }
  return undefined;
}
