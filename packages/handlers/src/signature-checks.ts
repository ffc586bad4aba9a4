import type { ModelSignature, SignatureProblem, TensorSignature } from './types.ts';

/** True when a dimension is symbolic or unknown (ORT reports a string or -1). */
export function isDynamicDim(dim: number | string | undefined): boolean {
  return typeof dim === 'string' || dim === -1 || dim === undefined;
}

function describe(t: TensorSignature): string {
  return `'${t.name}' ${t.type}[${t.shape.map(String).join(',')}]`;
}

/**
 * image_classifier needs one 4-D float input [N,3,H,W] and one 2-D output [N,classes];
 * a dynamic batch dimension when batchSize > 1; classes equal to index_to_name.json's count.
 */
export function checkImageClassifierSignature(
  signature: ModelSignature,
  options: { batchSize: number; classCount?: number },
): SignatureProblem[] {
  const problems: SignatureProblem[] = [];
  const { inputs, outputs } = signature;
  if (inputs.length !== 1) {
    problems.push({ code: 'MARINA_ERR_HANDLER_SIGNATURE_MISMATCH', message: `image_classifier needs exactly one model input, the model has ${inputs.length} (${inputs.map(describe).join(', ')})` });
  }
  const input = inputs[0];
  if (input) {
    if (input.type !== 'float32') problems.push({ code: 'MARINA_ERR_HANDLER_SIGNATURE_MISMATCH', message: `image_classifier needs a float32 input, ${describe(input)} is ${input.type}` });
    if (input.shape.length !== 4) problems.push({ code: 'MARINA_ERR_HANDLER_SIGNATURE_MISMATCH', message: `image_classifier needs a 4-D input [N,3,H,W], got ${describe(input)}` });
    else if (input.shape[1] !== 3 && !isDynamicDim(input.shape[1])) problems.push({ code: 'MARINA_ERR_HANDLER_SIGNATURE_MISMATCH', message: `image_classifier needs 3 colour channels in dimension 1, got ${describe(input)}` });
    if (input.shape.length > 0 && options.batchSize > 1 && !isDynamicDim(input.shape[0]) && input.shape[0] !== options.batchSize) {
      problems.push({ code: 'MARINA_ERR_MODEL_BATCH_NOT_DYNAMIC', message: `batchSize is ${options.batchSize} but input ${describe(input)} has a fixed batch dimension of ${String(input.shape[0])}; export the model with a dynamic batch dimension or set batchSize to 1` });
    }
  }
  if (outputs.length !== 1) {
    problems.push({ code: 'MARINA_ERR_HANDLER_SIGNATURE_MISMATCH', message: `image_classifier needs exactly one model output, the model has ${outputs.length} (${outputs.map(describe).join(', ')})` });
  }
  const output = outputs[0];
  if (output) {
    if (output.shape.length !== 2) problems.push({ code: 'MARINA_ERR_HANDLER_SIGNATURE_MISMATCH', message: `image_classifier needs a 2-D output [N,classes], got ${describe(output)}` });
    else {
      const classes = output.shape[1];
      if (options.classCount !== undefined && typeof classes === 'number' && classes > 0 && classes !== options.classCount) {
        problems.push({ code: 'MARINA_ERR_INDEX_TO_NAME_MISMATCH', message: `index_to_name.json has ${options.classCount} names but output ${describe(output)} has ${classes} classes; give one name per class` });
      }
    }
  }
  return problems;
}

/** The generic tensor handler serves any model whose inputs and outputs are tensors; only the batch dimension is checked. */
export function checkTensorSignature(signature: ModelSignature, options: { batchSize: number }): SignatureProblem[] {
  const problems: SignatureProblem[] = [];
  if (signature.inputs.length === 0) problems.push({ code: 'MARINA_ERR_HANDLER_SIGNATURE_MISMATCH', message: 'the model has no inputs' });
  if (signature.outputs.length === 0) problems.push({ code: 'MARINA_ERR_HANDLER_SIGNATURE_MISMATCH', message: 'the model has no outputs' });
  if (options.batchSize > 1) {
    for (const input of signature.inputs) {
      if (input.shape.length === 0 || !isDynamicDim(input.shape[0])) {
        problems.push({ code: 'MARINA_ERR_MODEL_BATCH_NOT_DYNAMIC', message: `batchSize is ${options.batchSize} but input ${describe(input)} has no dynamic batch dimension; export the model with a dynamic first dimension or set batchSize to 1` });
      }
    }
  }
  return problems;
}
