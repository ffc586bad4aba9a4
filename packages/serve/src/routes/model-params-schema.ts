/** The path parameters of every per-model route (TorchServe and Open Inference Protocol): `model_name` and an optional `model_version`. */
export const modelParamsSchema = {
  type: 'object',
  properties: { model_name: { type: 'string', minLength: 1 }, model_version: { type: 'string', minLength: 1 } },
  required: ['model_name'],
} as const;
