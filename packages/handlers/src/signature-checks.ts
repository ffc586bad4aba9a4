import type { ModelSignature, SignatureProblem, TensorSignature } from './types.ts';

/** True when a dimension is symbolic or unknown (ORT reports a string or -1). */
export function isDynamicDim(dim: number | string | undefined): boolean {
  return typeof dim === 'string' || dim === -1 || dim === undefined;
}

export function describeTensor(t: TensorSignature): string {
  return `'${t.name}' ${t.type}[${t.shape.map(String).join(',')}]`;
}

function mismatch(message: string): SignatureProblem {
  return { code: 'MARINA_ERR_HANDLER_SIGNATURE_MISMATCH', message };
}

/**
 * The one rule on batching, shared by `model-archiver validate` and `serve`: a model whose
 * batch dimension is fixed is accepted whatever batchSize says; Marina's built-in handlers run it
 * in groups of that size (one request at a time for a batch dimension of 1), so batchSize above
 * it brings no speed-up. Returns the warning both print (code MARINA_ERR_MODEL_BATCH_NOT_DYNAMIC,
 * severity 'warning') when batchSize is above 1 and an input's batch dimension is fixed at
 * another value; undefined otherwise.
 */
export function fixedBatchWarning(signature: ModelSignature, batchSize: number): SignatureProblem | undefined {
  if (batchSize <= 1) return undefined;
  const fixed = signature.inputs.filter(
    (i) => i.shape.length > 0 && !isDynamicDim(i.shape[0]) && i.shape[0] !== batchSize,
  );
  const first = fixed[0];
  if (!first) return undefined;
  const group = Number(first.shape[0]);
  const which = `input ${describeTensor(first)} has a fixed batch dimension of ${group}`;
  return {
    code: 'MARINA_ERR_MODEL_BATCH_NOT_DYNAMIC',
    severity: 'warning',
    message: `batchSize is ${batchSize} but ${which}: Marina serves it and the built-in handlers run it ${group === 1 ? 'one image or request at a time' : `in groups of ${group}`}, so batching brings no speed-up; export the model with a dynamic first dimension to batch, or set batchSize to ${group === 1 ? 1 : group} to silence this warning`,
  };
}

/** The single [N,C,H,W] float input of the image handlers, or the problems that stop it. */
function checkImageInput(handler: string, signature: ModelSignature, problems: SignatureProblem[]): void {
  const { inputs } = signature;
  if (inputs.length !== 1)
    problems.push(
      mismatch(
        `${handler} needs exactly one model input, the model has ${inputs.length} (${inputs.map(describeTensor).join(', ')}); use the tensor handler for other models`,
      ),
    );
  const input = inputs[0];
  if (!input) return;
  if (input.type !== 'float32')
    problems.push(mismatch(`${handler} needs a float32 input, ${describeTensor(input)} is ${input.type}`));
  if (input.shape.length !== 4)
    problems.push(
      mismatch(
        `${handler} needs a 4-D input [N,C,H,W] (C = 3 for colour, 1 for grayscale), got ${describeTensor(input)}`,
      ),
    );
  else if (!isDynamicDim(input.shape[1]) && input.shape[1] !== 3 && input.shape[1] !== 1)
    problems.push(
      mismatch(
        `${handler} needs 3 (colour) or 1 (grayscale) channels in dimension 1, got ${describeTensor(input)}; an NHWC model needs the tensor handler`,
      ),
    );
}

function configProblem(resolve: () => unknown): SignatureProblem[] {
  try {
    resolve();
    return [];
  } catch (error) {
    return [{ code: 'MARINA_ERR_MODEL_CONFIG_INVALID', message: (error as Error).message }];
  }
}

/** The output a handler reads: the one `handler.output` names, else the only one. */
function pickOutput(
  handler: string,
  signature: ModelSignature,
  named: unknown,
  problems: SignatureProblem[],
): TensorSignature | undefined {
  const { outputs } = signature;
  if (typeof named === 'string') {
    const found = outputs.find((o) => o.name === named);
    if (!found)
      problems.push({
        code: 'MARINA_ERR_MODEL_CONFIG_INVALID',
        message: `model-config.yaml handler.output is '${named}' but the model's outputs are ${outputs.map(describeTensor).join(', ')}`,
      });
    return found;
  }
  if (outputs.length !== 1) {
    problems.push(
      mismatch(
        `${handler} needs exactly one model output or handler.output naming one in model-config.yaml; the model has ${outputs.length} (${outputs.map(describeTensor).join(', ')})`,
      ),
    );
  }
  return outputs[0];
}

export interface SignatureCheckOptions {
  batchSize: number;
  modelYamlConfig?: Record<string, unknown>;
  classCount?: number;
  /** Resolves the handler's model-config.yaml knobs against the input shape; what it throws becomes a MARINA_ERR_MODEL_CONFIG_INVALID problem. */
  resolveOptions?: (inputShape: ReadonlyArray<number | string>) => unknown;
}

function handlerConfig(options: SignatureCheckOptions): Record<string, unknown> {
  const section = options.modelYamlConfig?.handler;
  return typeof section === 'object' && section !== null && !Array.isArray(section)
    ? (section as Record<string, unknown>)
    : {};
}

function withBatchAndConfig(
  signature: ModelSignature,
  options: SignatureCheckOptions,
  problems: SignatureProblem[],
): SignatureProblem[] {
  const warning = fixedBatchWarning(signature, options.batchSize);
  if (warning) problems.push(warning);
  const input = signature.inputs[0];
  // The handler's own reading of its config; skipped when a config problem was already named (it would repeat it).
  const isConfigReported = problems.some((p) => p.code === 'MARINA_ERR_MODEL_CONFIG_INVALID');
  if (options.resolveOptions && !isConfigReported && input && signature.inputs.length === 1 && input.shape.length === 4)
    problems.push(...configProblem(() => options.resolveOptions!(input.shape)));
  return problems;
}

/**
 * image_classifier needs one float input [N,C,H,W] (C 3 or 1) and one output [N,classes]
 * (or the one handler.output names); classes equal to index_to_name.json's count.
 */
export function checkImageClassifierSignature(
  signature: ModelSignature,
  options: SignatureCheckOptions,
): SignatureProblem[] {
  const problems: SignatureProblem[] = [];
  checkImageInput('image_classifier', signature, problems);
  const output = pickOutput('image_classifier', signature, handlerConfig(options).output, problems);
  if (output) {
    const meaningful = output.shape.slice(1).filter((d) => d !== 1);
    if (output.shape.length < 2 || meaningful.length > 1)
      problems.push(
        mismatch(
          `image_classifier needs a 2-D output [N,classes], got ${describeTensor(output)}; for per-pixel classes use image_segmenter`,
        ),
      );
    else {
      const classes = output.shape[1];
      if (
        options.classCount !== undefined &&
        typeof classes === 'number' &&
        classes > 0 &&
        classes !== options.classCount
      ) {
        problems.push({
          code: 'MARINA_ERR_INDEX_TO_NAME_MISMATCH',
          message: `index_to_name.json has ${options.classCount} names but output ${describeTensor(output)} has ${classes} classes; give one name per class`,
        });
      }
    }
  }
  return withBatchAndConfig(signature, options, problems);
}

/** image_segmenter needs one float input [N,C,H,W] and an output [N,classes,H,W] or [N,1,H,W]. */
export function checkImageSegmenterSignature(
  signature: ModelSignature,
  options: SignatureCheckOptions,
): SignatureProblem[] {
  const problems: SignatureProblem[] = [];
  checkImageInput('image_segmenter', signature, problems);
  const output = pickOutput('image_segmenter', signature, handlerConfig(options).output, problems);
  if (output && output.shape.length !== 4)
    problems.push(
      mismatch(`image_segmenter needs a 4-D output [N,classes,H,W] or [N,1,H,W], got ${describeTensor(output)}`),
    );
  return withBatchAndConfig(signature, options, problems);
}

/**
 * object_detector needs one float input [N,C,H,W] and, per handler.layout, either outputs
 * named by handler.boxes / handler.scores (/ handler.labels) with boxes' last dimension 4, or one
 * output [N,K,4+1+C] (handler.output, or the only one).
 */
export function checkObjectDetectorSignature(
  signature: ModelSignature,
  options: SignatureCheckOptions,
): SignatureProblem[] {
  const problems: SignatureProblem[] = [];
  checkImageInput('object_detector', signature, problems);
  const h = handlerConfig(options);
  const layout = h.layout ?? (signature.outputs.length === 1 ? 'combined' : 'separate');
  const byName = (key: string, fallback: string | undefined): TensorSignature | undefined => {
    const name = typeof h[key] === 'string' ? (h[key] as string) : fallback;
    const found = signature.outputs.find((o) => o.name === name);
    if (!found && name !== undefined)
      problems.push({
        code: 'MARINA_ERR_MODEL_CONFIG_INVALID',
        message: `object_detector reads output '${name}' (handler.${key}) but the model's outputs are ${signature.outputs.map(describeTensor).join(', ')}; name them in model-config.yaml handler.${key}`,
      });
    return found;
  };
  if (layout === 'separate') {
    const boxes = byName('boxes', 'boxes');
    byName('scores', 'scores');
    if (h.labels !== undefined || signature.outputs.some((o) => o.name === 'labels')) byName('labels', 'labels');
    const last = boxes?.shape[boxes.shape.length - 1];
    if (boxes && (boxes.shape.length < 2 || (!isDynamicDim(last) && last !== 4)))
      problems.push(mismatch(`object_detector needs boxes of shape [N,K,4] or [K,4], got ${describeTensor(boxes)}`));
  } else if (layout === 'combined') {
    const output = pickOutput('object_detector', signature, h.output, problems);
    const last = output?.shape[output.shape.length - 1];
    if (output && (output.shape.length !== 3 || (!isDynamicDim(last) && Number(last) < 5)))
      problems.push(
        mismatch(
          `object_detector with layout combined needs one output [N,K,4+1+classes], got ${describeTensor(output)}`,
        ),
      );
  } else {
    problems.push({
      code: 'MARINA_ERR_MODEL_CONFIG_INVALID',
      message: `model-config.yaml handler.layout must be separate or combined, got ${JSON.stringify(layout)}`,
    });
  }
  return withBatchAndConfig(signature, options, problems);
}

/** The generic tensor handler serves any model whose inputs and outputs are tensors; only the batch dimension is checked. */
export function checkTensorSignature(signature: ModelSignature, options: { batchSize: number }): SignatureProblem[] {
  const problems: SignatureProblem[] = [];
  if (signature.inputs.length === 0) problems.push(mismatch('the model has no inputs'));
  if (signature.outputs.length === 0) problems.push(mismatch('the model has no outputs'));
  const warning = fixedBatchWarning(signature, options.batchSize);
  if (warning) problems.push(warning);
  return problems;
}
