/**
 * The Open Inference Protocol's GRPCInferenceService: a thin adapter from ModelInferRequest
 * (typed `contents` or `raw_input_contents`) to the DataPlane's InferRequest and back.
 * Outputs go in `raw_output_contents` when the request used raw inputs or an output is FP16
 * (which has no typed field), in typed `contents` otherwise.
 */
import { randomUUID } from 'node:crypto';
import type * as grpc from '@grpc/grpc-js';
import {
  createHandlerError,
  decodeBytesElements,
  encodeBytesElements,
  isV2Datatype,
  jsonToRaw,
  rawToJson,
  type RawTensor,
  type V2Datatype,
} from '@marina/handlers';
import type { CompleteInferRequest, DataPlane } from '../data-plane.ts';
import { callScheduling, unary, versionMetadata, type KeyCheck } from '../grpc-common.ts';
import { metadataHeaders } from '../request-headers.ts';

type Contents = Partial<
  Record<
    | 'bool_contents'
    | 'int_contents'
    | 'int64_contents'
    | 'uint_contents'
    | 'uint64_contents'
    | 'fp32_contents'
    | 'fp64_contents',
    unknown[]
  >
> & { bytes_contents?: Buffer[] };

interface WireInput {
  name: string;
  datatype: string;
  shape: number[];
  contents?: Contents | null;
}

interface WireParameter {
  parameter_choice?: 'bool_param' | 'int64_param' | 'string_param' | 'double_param' | 'uint64_param';
  [key: string]: unknown;
}

interface ModelInferRequest {
  model_name: string;
  model_version: string;
  id: string;
  parameters: Record<string, WireParameter>;
  inputs: WireInput[];
  outputs: Array<{ name: string }>;
  raw_input_contents: Buffer[];
}

/** The typed `contents` field that carries a datatype (FP16 has none: it must be raw). */
const CONTENTS_FIELD: Record<V2Datatype, keyof Contents | undefined> = {
  BOOL: 'bool_contents',
  INT8: 'int_contents',
  INT16: 'int_contents',
  INT32: 'int_contents',
  INT64: 'int64_contents',
  UINT8: 'uint_contents',
  UINT16: 'uint_contents',
  UINT32: 'uint_contents',
  UINT64: 'uint64_contents',
  FP16: undefined,
  FP32: 'fp32_contents',
  FP64: 'fp64_contents',
  BYTES: 'bytes_contents',
};

function invalid(message: string) {
  return createHandlerError.MARINA_ERR_TENSOR_INPUT_INVALID(message);
}

function parameterValues(parameters: Record<string, WireParameter> | undefined): Record<string, unknown> | undefined {
  if (!parameters || Object.keys(parameters).length === 0) return undefined;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(parameters)) out[k] = v.parameter_choice ? v[v.parameter_choice] : undefined;
  return out;
}

/** ModelInferRequest → tensors. @throws MARINA_ERR_TENSOR_INPUT_INVALID */
function decodeModelInferRequest(request: ModelInferRequest): { inputs: RawTensor[]; isRaw: boolean } {
  const raws = request.raw_input_contents ?? [];
  const isRaw = raws.length > 0;
  if (request.inputs.length === 0) throw invalid('the request has no inputs');
  if (isRaw && raws.length !== request.inputs.length) {
    throw invalid(
      `raw_input_contents has ${raws.length} entries for ${request.inputs.length} inputs; with raw_input_contents every input's data must be raw, one entry per input in order`,
    );
  }
  const inputs = request.inputs.map((input, i): RawTensor => {
    const where = `input '${input.name}'`;
    if (!input.name) throw invalid(`inputs[${i}] needs a name`);
    if (!isV2Datatype(input.datatype))
      throw invalid(
        `${where}: datatype must be one of BOOL, UINT8, UINT16, UINT32, UINT64, INT8, INT16, INT32, INT64, FP16, FP32, FP64, BYTES; got '${input.datatype}'`,
      );
    const shape = input.shape.map(Number);
    if (!shape.every((d) => Number.isInteger(d) && d >= 0))
      throw invalid(`${where}: shape must be non-negative integers, got [${shape.join(', ')}]`);
    if (isRaw) return { name: input.name, datatype: input.datatype, shape, raw: raws[i]! };
    const field = CONTENTS_FIELD[input.datatype];
    if (!field) throw invalid(`${where}: FP16 has no typed contents field; send it in raw_input_contents`);
    if (input.datatype === 'BYTES')
      return {
        name: input.name,
        datatype: 'BYTES',
        shape,
        raw: encodeBytesElements(input.contents?.bytes_contents ?? []),
      };
    const values = (input.contents?.[field] ?? []) as unknown[];
    return { name: input.name, datatype: input.datatype, shape, raw: jsonToRaw(input.datatype, values, shape, where) };
  });
  return { inputs, isRaw };
}

/** Tensors → the response's outputs and raw_output_contents. */
function encodeModelInferOutputs(
  outputs: RawTensor[],
  isRaw: boolean,
): { outputs: unknown[]; raw_output_contents: Buffer[] } {
  const useRaw = isRaw || outputs.some((t) => !CONTENTS_FIELD[t.datatype]);
  if (useRaw)
    return {
      outputs: outputs.map((t) => ({ name: t.name, datatype: t.datatype, shape: t.shape, parameters: {} })),
      raw_output_contents: outputs.map((t) => t.raw),
    };
  return {
    outputs: outputs.map((t) => ({
      name: t.name,
      datatype: t.datatype,
      shape: t.shape,
      parameters: {},
      contents: {
        [CONTENTS_FIELD[t.datatype]!]:
          t.datatype === 'BYTES' ? decodeBytesElements(t.raw) : rawToJson(t.datatype, t.raw),
      },
    })),
    raw_output_contents: [],
  };
}

export function createOipGrpcService(options: {
  dataPlane: DataPlane;
  checkKey: KeyCheck;
  /** The model repository extension's calls change which models are in memory: they need the management key. */
  checkManagementKey: KeyCheck;
}): grpc.UntypedServiceImplementation {
  const { dataPlane, checkKey, checkManagementKey } = options;
  const version = (v: string | undefined) => (v ? v : undefined);
  return {
    ServerLive: unary(checkKey, () => ({ live: dataPlane.isLive() })),
    ServerReady: unary(checkKey, () => ({ ready: dataPlane.isReady() })),
    ModelReady: unary<{ name: string; version: string }, unknown>(checkKey, (r) => ({
      ready: dataPlane.isModelReady(r.name, version(r.version)),
    })),
    ServerMetadata: unary(checkKey, () => dataPlane.serverMetadata()),
    ModelMetadata: unary<{ name: string; version: string }, unknown>(checkKey, (r) =>
      dataPlane.modelMetadata(r.name, version(r.version)),
    ),
    ModelInfer: unary<ModelInferRequest, unknown>(
      checkKey,
      async (r, call, trace) => {
        const arrivedAt = performance.now();
        const { scheduling, onClientGone } = callScheduling(call, arrivedAt);
        let decoded: ReturnType<typeof decodeModelInferRequest>;
        try {
          decoded = decodeModelInferRequest(r);
        } catch (error) {
          dataPlane.recordUndecodable(r.model_name, version(r.model_version), arrivedAt, error);
          throw error;
        }
        const { inputs, isRaw } = decoded;
        const parameters = parameterValues(r.parameters);
        // Every field named, not spread: see CompleteInferRequest.
        const inferRequest: CompleteInferRequest = {
          modelName: r.model_name,
          modelVersion: version(r.model_version),
          id: r.id ? r.id : undefined,
          inputs,
          outputs: r.outputs.length > 0 ? r.outputs.map((o) => ({ name: o.name })) : undefined,
          parameters,
          requestId: randomUUID(),
          headers: metadataHeaders(call.metadata),
          arrivedAt,
          scheduling,
          onClientGone,
          trace,
        };
        const response = await dataPlane.infer(inferRequest);
        call.sendMetadata(versionMetadata(response.modelVersion));
        return {
          model_name: response.modelName,
          model_version: response.modelVersion,
          id: r.id,
          parameters: {},
          ...encodeModelInferOutputs(response.outputs, isRaw),
        };
      },
      'oip',
      {
        tracing: dataPlane.tracing,
        service: 'inference.GRPCInferenceService',
        method: 'ModelInfer',
        protocol: 'oip-grpc',
      },
    ),
    // KServe's messages (model_name in, model_name and isLoaded/isUnloaded out), the default version.
    RepositoryModelLoad: unary<{ model_name: string }, unknown>(checkManagementKey, async (r) => {
      await dataPlane.loadModel(r.model_name);
      return { model_name: r.model_name, isLoaded: true };
    }),
    RepositoryModelUnload: unary<{ model_name: string }, unknown>(checkManagementKey, async (r) => {
      await dataPlane.unloadModel(r.model_name);
      return { model_name: r.model_name, isUnloaded: true };
    }),
  };
}
