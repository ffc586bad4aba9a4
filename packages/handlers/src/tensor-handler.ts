import * as ort from 'onnxruntime-node';
import { isMarinaError, type MarinaError } from '@marina/errors';
import { createHandlerError } from './errors.ts';
import { isDynamicDim } from './signature-checks.ts';
import { rowPayload } from './row-input.ts';
import { binaryHeaderLength, parseTensorRequest, selectedOutputNames, tensorAnswer, type ParsedTensorRequest } from './tensor-request.ts';
import type { Handler, HandlerContext, RequestRow, TensorSignature } from './types.ts';
import { rawToOrt } from './v2-tensors.ts';

/** The tensor handler's JSON answer per request: `{"outputs": {name: {shape, data}}}` with flat data. */
export interface TensorHandlerResponse {
  outputs: Record<string, { shape: number[]; data: number[] | boolean[] | string[] }>;
}

function invalid(message: string): MarinaError {
  return createHandlerError.MARINA_ERR_TENSOR_INPUT_INVALID(message);
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
  let isStackable = false;

  const run = async (requests: Array<{ index: number; parsed: ParsedTensorRequest; names: string[] }>, context: HandlerContext): Promise<unknown[]> => {
    const first = inputs[0]!.name;
    const rowsPer = requests.map((r) => r.parsed.tensors.get(first)!.shape[0] ?? 1);
    const feeds: Record<string, ort.Tensor> = {};
    for (const input of inputs) feeds[input.name] = rawToOrt(requests.map((r) => r.parsed.tensors.get(input.name)!));
    const fetch = [...new Set(requests.flatMap((r) => r.names))];
    const result = await session.run(feeds, fetch);
    const total = rowsPer.reduce((a, b) => a + b, 0);
    if (requests.length > 1) {
      for (const name of fetch) {
        if (result[name]!.dims[0] !== total) throw createHandlerError.MARINA_ERR_MODEL_OUTPUT_UNEXPECTED(`output '${name}' has ${result[name]!.dims[0]} rows for ${total} input rows; the tensor handler needs outputs batched along dimension 0`);
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
      inputs = session.inputMetadata.map((m) => (m.isTensor ? { name: m.name, type: m.type, shape: [...m.shape] } : { name: m.name, type: 'non-tensor', shape: [] }));
      isStackable = inputs.every((i) => i.shape.length > 0 && isDynamicDim(i.shape[0]));
    },

    async handle(rows: RequestRow[], context: HandlerContext) {
      const results: unknown[] = new Array(rows.length);
      const good: Array<{ index: number; parsed: ParsedTensorRequest; names: string[] }> = [];
      rows.forEach((row, index) => {
        try {
          const parsed = parseTensorRequest(rowPayload(row), inputs, { headerLength: binaryHeaderLength(context, index) });
          good.push({ index, parsed, names: selectedOutputNames(parsed, session.outputNames) });
        } catch (error) {
          results[index] = isMarinaError(error) ? error : invalid(String(error));
        }
      });
      const key = (p: ParsedTensorRequest) => inputs.map((i) => p.tensors.get(i.name)!.shape.slice(1).join('x')).join('|');
      const canStack = good.length > 1 && isStackable && good.every((g) => key(g.parsed) === key(good[0]!.parsed));
      if (canStack) {
        const answers = await run(good, context);
        good.forEach((g, i) => (results[g.index] = answers[i]!));
      } else {
        for (const g of good) {
          try {
            results[g.index] = (await run([g], context))[0]!;
          } catch (error) {
            // A shape the model rejects is the caller's mistake, and only this request's.
            results[g.index] = isMarinaError(error) ? error : invalid(`the model rejected the input: ${(error as Error).message}`);
          }
        }
      }
      return results;
    },
  };
}
