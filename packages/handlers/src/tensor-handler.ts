import type * as ort from 'onnxruntime-node';
import { isMarinaError, type MarinaError } from '@marina/errors';
import { createHandlerError } from './errors.ts';
import { isDynamicDim } from './signature-checks.ts';
import { rowPayload } from './row-input.ts';
import {
  binaryHeaderLength,
  parseTensorRequest,
  selectedOutputNames,
  tensorAnswer,
  type ParsedTensorRequest,
} from './tensor-request.ts';
import type { Handler, HandlerContext, RequestRow, TensorSignature } from './types.ts';
import { rawToOrt, V2_DATATYPES, v2DatatypeOf } from './v2-tensors.ts';

/** The tensor handler's JSON answer per request: `{"outputs": {name: {shape, data}}}` with flat data. */
export interface TensorHandlerResponse {
  outputs: Record<string, { shape: number[]; data: number[] | boolean[] | string[] }>;
}

function invalid(message: string): MarinaError {
  return createHandlerError.MARINA_ERR_TENSOR_INPUT_INVALID(message);
}

/** Default of `handler.maxTensorBytesPerRequest`: 256 MiB of input and output tensors per request. */
const DEFAULT_MAX_TENSOR_BYTES_PER_REQUEST = 256 * 1024 * 1024;

/**
 * The bytes one request's tensors will take: its inputs, and each output it asked for whose shape
 * follows from the inputs (fixed sizes, or symbolic dimensions the inputs bind, like the batch
 * dimension N). An output with a dimension only the data decides (e.g. a detector's box count)
 * cannot be computed before run(); it is left out, and `isExact` is false.
 */
function tensorBytesOf(
  request: ParsedTensorRequest,
  inputs: readonly TensorSignature[],
  outputs: readonly TensorSignature[],
): { bytes: number; isExact: boolean } {
  const bound = new Map<string, number>();
  let bytes = 0;
  for (const input of inputs) {
    const tensor = request.tensors.get(input.name);
    if (!tensor) continue;
    tensor.shape.forEach((size, i) => {
      const dim = input.shape[i];
      if (typeof dim === 'string' && dim !== '') bound.set(dim, size);
    });
    bytes += tensor.raw.length;
  }
  let isExact = true;
  for (const output of outputs) {
    let count = 1;
    for (const dim of output.shape) {
      const size = typeof dim === 'number' && dim >= 0 ? dim : typeof dim === 'string' ? bound.get(dim) : undefined;
      if (size === undefined) {
        count = Number.NaN;
        break;
      }
      count *= size;
    }
    const datatype = v2DatatypeOf(output.type);
    if (Number.isNaN(count)) isExact = false;
    else bytes += count * (datatype ? V2_DATATYPES[datatype].bytes || 8 : 8);
  }
  return { bytes, isExact };
}

/**
 * Whether requests can run as one batch: every input has the same size in every dimension after
 * the first (the one they are stacked along). A module function rather than a closure per batch.
 */
function canStackRequests(
  inputs: readonly TensorSignature[],
  requests: ReadonlyArray<{ parsed: ParsedTensorRequest }>,
): boolean {
  const first = requests[0]!.parsed.tensors;
  for (const input of inputs) {
    const shape = first.get(input.name)!.shape;
    for (let r = 1; r < requests.length; r++) {
      const other = requests[r]!.parsed.tensors.get(input.name)!.shape;
      if (other.length !== shape.length) return false;
      for (let d = 1; d < shape.length; d++) if (other[d] !== shape[d]) return false;
    }
  }
  return true;
}

/**
 * The generic tensor handler: tensors in, tensors out, for any ONNX model whose inputs and
 * outputs are tensors of a type the Open Inference Protocol names (bool, (u)int8…64, float16/32/64, string).
 * Requests come as JSON (see parseTensorRequest) or in the v2 binary layout (Inference-Header-Content-Length);
 * each is checked strictly against the model's signature, may name the outputs it wants, and is
 * answered in the form it came in. Requests of a batch are stacked along dimension 0 when every
 * input's batch dimension is dynamic and their other dimensions agree; otherwise each runs alone.
 */
export function createTensorHandler(): Handler {
  let session: ort.InferenceSession;
  let inputs: TensorSignature[];
  let outputs: TensorSignature[];
  let isStackable = false;
  let maxTensorBytes = DEFAULT_MAX_TENSOR_BYTES_PER_REQUEST;

  /** Refuses, before run(), a request whose tensors would take more than maxTensorBytesPerRequest. */
  const checkTensorBytes = (parsed: ParsedTensorRequest, names: string[]): void => {
    const { bytes, isExact } = tensorBytesOf(
      parsed,
      inputs,
      outputs.filter((o) => names.includes(o.name)),
    );
    if (bytes <= maxTensorBytes) return;
    throw createHandlerError.MARINA_ERR_TENSOR_TOO_LARGE(
      `this request's tensors need ${bytes} bytes${isExact ? '' : ' or more'} (inputs and the outputs their shapes determine), over the model's limit of ${maxTensorBytes} bytes (model-config.yaml handler.maxTensorBytesPerRequest); send fewer rows or smaller dimensions`,
      { details: { tensorBytes: bytes, maxTensorBytesPerRequest: maxTensorBytes } },
    );
  };

  const run = async (
    requests: Array<{ index: number; parsed: ParsedTensorRequest; names: string[] }>,
    context: HandlerContext,
  ): Promise<unknown[]> => {
    const first = inputs[0]!.name;
    const rowsPer = requests.map((r) => r.parsed.tensors.get(first)!.shape[0] ?? 1);
    const feeds: Record<string, ort.Tensor> = {};
    for (const input of inputs) feeds[input.name] = rawToOrt(requests.map((r) => r.parsed.tensors.get(input.name)!));
    const fetch = [...new Set(requests.flatMap((r) => r.names))];
    const result = await session.run(feeds, fetch);
    const total = rowsPer.reduce((a, b) => a + b, 0);
    if (requests.length > 1) {
      for (const name of fetch) {
        if (result[name]!.dims[0] !== total)
          throw createHandlerError.MARINA_ERR_MODEL_OUTPUT_UNEXPECTED(
            `output '${name}' has ${result[name]!.dims[0]} rows for ${total} input rows; the tensor handler needs outputs batched along dimension 0`,
          );
      }
    }
    let start = 0;
    return requests.map((r, i) => {
      const rows = requests.length > 1 ? { start, end: start + rowsPer[i]! } : undefined;
      start += rowsPer[i]!;
      return tensorAnswer({ request: r.parsed, names: r.names, outputs: result, rows, context, index: r.index });
    });
  };

  return {
    async initialize(context: HandlerContext) {
      session = await context.createSession();
      const signatureOf = (m: ort.InferenceSession.ValueMetadata): TensorSignature =>
        m.isTensor
          ? { name: m.name, type: m.type, shape: [...m.shape] }
          : { name: m.name, type: 'non-tensor', shape: [] };
      inputs = session.inputMetadata.map(signatureOf);
      outputs = session.outputMetadata.map(signatureOf);
      const configured = (context.modelYamlConfig?.handler as Record<string, unknown> | undefined)
        ?.maxTensorBytesPerRequest;
      if (configured !== undefined) {
        if (typeof configured !== 'number' || !Number.isInteger(configured) || configured <= 0) {
          throw createHandlerError.MARINA_ERR_HANDLER_CONFIG_INVALID(
            `model-config.yaml handler.maxTensorBytesPerRequest must be a positive integer (bytes), got ${JSON.stringify(configured)}`,
          );
        }
        maxTensorBytes = configured;
      }
      isStackable = inputs.every((i) => i.shape.length > 0 && isDynamicDim(i.shape[0]));
    },

    async handle(rows: RequestRow[], context: HandlerContext) {
      const results: unknown[] = new Array(rows.length);
      const good: Array<{ index: number; parsed: ParsedTensorRequest; names: string[] }> = [];
      rows.forEach((row, index) => {
        try {
          const parsed = parseTensorRequest(rowPayload(row), inputs, {
            headerLength: binaryHeaderLength(context, index),
          });
          const names = selectedOutputNames(parsed, session.outputNames);
          checkTensorBytes(parsed, names);
          good.push({ index, parsed, names });
        } catch (error) {
          results[index] = isMarinaError(error) ? error : invalid(String(error));
        }
      });
      const canStack = good.length > 1 && isStackable && canStackRequests(inputs, good);
      if (canStack) {
        const answers = await run(good, context);
        good.forEach((g, i) => {
          results[g.index] = answers[i]!;
        });
      } else {
        for (const g of good) {
          try {
            results[g.index] = (await run([g], context))[0]!;
          } catch (error) {
            // A shape the model rejects is the caller's mistake, and only this request's.
            results[g.index] = isMarinaError(error)
              ? error
              : invalid(`the model rejected the input: ${(error as Error).message}`);
          }
        }
      }
      return results;
    },
  };
}
