import * as ort from 'onnxruntime-node';
import { isMarinaError, type MarinaError } from '@marina/errors';
import { createHandlerError } from './errors.ts';
import { preprocessImage, type ImageGeometry, type ImagePreprocessOptions } from './image-preprocess.ts';
import { payloadBytes, rowPayload } from './row-input.ts';
import { readOnnxGraph } from './onnx-graph.ts';
import { sessionSignature } from './session-signature.ts';
import { describeTensor, isDynamicDim } from './signature-checks.ts';
import type { HandlerContext, ModelSignature, RequestRow } from './types.ts';

/** A batch of decoded images: what the image handlers' preprocess returns. */
export interface DecodedImages {
  /** float32 NCHW, one image per row of the batch (failed rows' slots unused). */
  pixels: Float32Array;
  /** Rows that decoded, in order. */
  good: number[];
  /** Per row: where its pixels came from (undefined for failed rows). */
  geometry: Array<ImageGeometry | undefined>;
  /** Per row: the decode error, or undefined. */
  errors: Array<MarinaError | undefined>;
}

/** One model output for one image: its values and its dimensions without the batch dimension. */
export interface ImageOutput {
  data: ort.Tensor['data'];
  dims: number[];
  type: ort.Tensor['type'];
}

/**
 * The session, input and batching shared by the built-in image handlers. A model with a fixed
 * batch dimension B runs in groups of B images (the last group padded with zeros), so it is
 * served whatever the configured batch size (see `fixedBatchWarning`).
 *
 * Made from the model's signature, before its session exists (prepareImageModelRunner reads it
 * from the graph), so a handler can decode a batch while the session is created; the session is
 * attached once it is (attachSession), and only run() needs it.
 */
export class ImageModelRunner {
  #session: ort.InferenceSession | undefined;
  readonly inputName: string;
  readonly inputShape: ReadonlyArray<number | string>;
  readonly outputNames: readonly string[];
  /** The model's fixed batch dimension, or undefined when it is dynamic. */
  readonly fixedBatch: number | undefined;
  readonly #signature: ModelSignature;
  readonly #handlerName: string;
  options!: ImagePreprocessOptions;
  limitInputPixels = true;
  /** Read each image's original size (an extra header read before the decode); handlers that map outputs back need it. */
  isGeometryNeeded = true;

  constructor(signature: ModelSignature, handlerName: string) {
    const input = signature.inputs[0];
    if (input === undefined || input.type === 'non-tensor' || signature.inputs.length !== 1) {
      throw createHandlerError.MARINA_ERR_MODEL_OUTPUT_UNEXPECTED(
        `${handlerName} needs a model with one tensor input [N,C,H,W]; this one has ${signature.inputs.length} inputs (${signature.inputs.map((i) => i.name).join(', ')}); use the tensor handler`,
      );
    }
    this.#signature = signature;
    this.#handlerName = handlerName;
    this.inputName = input.name;
    this.inputShape = [...input.shape];
    this.outputNames = signature.outputs.map((o) => o.name);
    const batch = this.inputShape[0];
    this.fixedBatch = this.inputShape.length === 4 && !isDynamicDim(batch) ? Number(batch) : undefined;
  }

  /** The model's session, once attached. */
  get session(): ort.InferenceSession {
    if (this.#session === undefined) throw new Error(`${this.#handlerName}: the model's session is not created yet`);
    return this.#session;
  }

  /**
   * Gives the runner its session. The session must read the model as the signature it was made
   * from did (same input name and dimensions, same outputs): what was decoded before it existed
   * was shaped for that input.
   * @throws MARINA_ERR_MODEL_OUTPUT_UNEXPECTED when onnxruntime reads the model otherwise.
   */
  attachSession(session: ort.InferenceSession): void {
    const read = sessionSignature(session);
    const input = read.inputs[0];
    const expected = this.#signature.inputs[0]!;
    const isSame =
      read.inputs.length === 1 &&
      input !== undefined &&
      input.name === expected.name &&
      sameDims(input.shape, expected.shape) &&
      read.outputs.length === this.outputNames.length &&
      read.outputs.every((o, i) => o.name === this.outputNames[i]);
    if (!isSame) {
      throw createHandlerError.MARINA_ERR_MODEL_OUTPUT_UNEXPECTED(
        `${this.#handlerName}: the model's graph declares input ${describeTensor(expected)} and outputs ${this.outputNames.join(', ')}, but onnxruntime reads input ${input ? describeTensor(input) : '(none)'} and outputs ${read.outputs.map((o) => o.name).join(', ')}; check that the archive's ONNX file is whole`,
      );
    }
    this.#session = session;
  }

  get imageFloats(): number {
    return this.options.channels * this.options.height * this.options.width;
  }

  async decode(rows: RequestRow[], handlerName: string): Promise<DecodedImages> {
    const perImage = this.imageFloats;
    const pixels = new Float32Array(perImage * rows.length);
    const geometry: Array<ImageGeometry | undefined> = new Array(rows.length).fill(undefined);
    // Decode concurrently: sharp works on libuv's pool, several images in flight is faster than one.
    const outcomes = await Promise.allSettled(
      rows.map(async (row, i) => {
        const bytes = payloadBytes(rowPayload(row));
        if (!bytes)
          throw createHandlerError.MARINA_ERR_IMAGE_DECODE_FAILED(
            `${handlerName} needs image bytes, but the body was parsed as JSON; send the image with Content-Type application/octet-stream or image/*`,
          );
        geometry[i] = await preprocessImage(
          bytes,
          { ...this.options, limitInputPixels: this.limitInputPixels, isGeometryNeeded: this.isGeometryNeeded },
          pixels,
          i * perImage,
        );
      }),
    );
    const good: number[] = [];
    const errors: Array<MarinaError | undefined> = new Array(rows.length).fill(undefined);
    outcomes.forEach((o, i) => {
      if (o.status === 'fulfilled') good.push(i);
      else
        errors[i] = isMarinaError(o.reason)
          ? o.reason
          : createHandlerError.MARINA_ERR_IMAGE_DECODE_FAILED(String(o.reason));
    });
    return { pixels, good, geometry, errors };
  }

  /**
   * Runs the model on the good images and returns, per output name, one `ImageOutput` per good
   * image (in `good` order). An output whose first dimension is not the batch (possible only
   * when a group holds one image) is that image's whole tensor.
   */
  async run(decoded: DecodedImages, outputNames: readonly string[]): Promise<Map<string, ImageOutput[]>> {
    const perImage = this.imageFloats;
    const { good, pixels } = decoded;
    const results = new Map<string, ImageOutput[]>(outputNames.map((n) => [n, []]));
    if (good.length === 0) return results;
    // Compact the good images to the front only when some rows failed (no copy otherwise).
    const packed = good.length === pixels.length / perImage ? pixels : new Float32Array(perImage * good.length);
    if (packed !== pixels)
      good.forEach((src, dst) => {
        packed.set(pixels.subarray(src * perImage, (src + 1) * perImage), dst * perImage);
      });
    const group = this.fixedBatch ?? good.length;
    const { channels, height, width } = this.options;
    for (let start = 0; start < good.length; start += group) {
      const count = Math.min(group, good.length - start);
      let chunk = packed.subarray(start * perImage, (start + count) * perImage);
      if (count < group) {
        const padded = new Float32Array(group * perImage);
        padded.set(chunk);
        chunk = padded;
      }
      const out = await this.session.run(
        { [this.inputName]: new ort.Tensor('float32', chunk, [group, channels, height, width]) },
        [...outputNames],
      );
      for (const name of outputNames) {
        const tensor = out[name]!;
        const list = results.get(name)!;
        if (tensor.dims[0] === group && tensor.dims.length > 0) {
          const dims = tensor.dims.slice(1);
          const per = dims.reduce((a, b) => a * b, 1);
          for (let n = 0; n < count; n++)
            list.push({
              data: (tensor.data as Float32Array).subarray(n * per, (n + 1) * per),
              dims,
              type: tensor.type,
            });
        } else if (group === 1) {
          list.push({ data: tensor.data, dims: [...tensor.dims], type: tensor.type });
        } else {
          throw createHandlerError.MARINA_ERR_MODEL_OUTPUT_UNEXPECTED(
            `output '${name}' has shape [${tensor.dims.join(', ')}] for a batch of ${group} images; its first dimension must be the batch`,
          );
        }
      }
    }
    return results;
  }
}

/**
 * The runner made from the model's graph, before its session exists (a handler's prepare):
 * undefined when the archive names no model file (createSession then needs a path anyway).
 */
export async function prepareImageModelRunner(
  context: HandlerContext,
  handlerName: string,
  setUp: (runner: ImageModelRunner) => Promise<void> | void,
): Promise<ImageModelRunner | undefined> {
  const path = context.serializedFilePath;
  if (!path) return undefined;
  return newRunner(await readOnnxGraph(path), context, handlerName, setUp);
}

/** A runner for the model read as `signature`, set up by its handler. */
async function newRunner(
  signature: ModelSignature,
  context: HandlerContext,
  handlerName: string,
  setUp: (runner: ImageModelRunner) => Promise<void> | void,
): Promise<ImageModelRunner> {
  const runner = new ImageModelRunner(signature, handlerName);
  runner.limitInputPixels = context.systemProperties.limit_max_image_pixels;
  await setUp(runner);
  return runner;
}

/**
 * The one output an image handler reads: `handler.output` from model-config.yaml, which must be
 * one of the model's outputs, else the model's only output.
 * @throws MARINA_ERR_HANDLER_CONFIG_INVALID naming the model's outputs.
 */
export function selectOutput(
  outputs: readonly string[],
  configured: string | undefined,
  handlerName: string,
  what: string,
): string {
  if (configured !== undefined && !outputs.includes(configured)) {
    throw createHandlerError.MARINA_ERR_HANDLER_CONFIG_INVALID(
      `model-config.yaml handler.output is '${configured}' but the model's outputs are ${outputs.join(', ')}`,
    );
  }
  if (configured === undefined && outputs.length !== 1) {
    throw createHandlerError.MARINA_ERR_HANDLER_CONFIG_INVALID(
      `${handlerName} reads one output but the model has ${outputs.length} (${outputs.join(', ')}); name ${what} with handler.output in model-config.yaml`,
    );
  }
  return configured ?? outputs[0]!;
}

/**
 * The runner at initialize time: the one prepared from the graph when there is one, else one
 * made from the session; either way with the session attached. `setUp` is what the handler
 * derives from a new runner (its options), run only for a runner made here.
 */
export async function createImageModelRunner(
  context: HandlerContext,
  handlerName: string,
  prepared: ImageModelRunner | undefined,
  setUp: (runner: ImageModelRunner) => Promise<void> | void,
): Promise<ImageModelRunner> {
  const session = await context.createSession();
  const runner = prepared ?? (await newRunner(sessionSignature(session), context, handlerName, setUp));
  runner.attachSession(session);
  return runner;
}

/** Two shapes' dimensions agree: equal sizes, or both dynamic (a name, -1 or unknown). */
function sameDims(a: ReadonlyArray<number | string>, b: ReadonlyArray<number | string>): boolean {
  return (
    a.length === b.length &&
    a.every((d, i) => (isDynamicDim(d) ? isDynamicDim(b[i]) : !isDynamicDim(b[i]) && Number(d) === Number(b[i])))
  );
}

/** Numbers of any numeric tensor as a plain Float64-compatible accessor. */
export function numberAt(data: ort.Tensor['data'], i: number): number {
  const v = (data as ArrayLike<number | bigint>)[i]!;
  return typeof v === 'bigint' ? Number(v) : v;
}
