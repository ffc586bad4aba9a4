import { resolveInside } from '@marina/archive';
import { fixedBatchWarning, readOnnxGraph } from '@marina/handlers';

/**
 * The fixed-batch warning `model-archiver validate` reports (`fixedBatchWarning`, code
 * MARINA_ERR_MODEL_BATCH_NOT_DYNAMIC), for serve to log when it registers a model: a model whose
 * batch dimension is fixed below `batchSize` is served, one group of its fixed size at a time.
 * Reads only the ONNX graph's framing (no weights, no session). Returns undefined when there is
 * nothing to say or the file cannot be read as ONNX (the worker then reports the load failure).
 */
export async function fixedBatchNotice(options: {
  modelDir: string;
  serializedFile: string | undefined;
  batchSize: number;
}): Promise<string | undefined> {
  if (options.serializedFile === undefined || options.batchSize <= 1) return undefined;
  try {
    const graph = await readOnnxGraph(resolveInside(options.modelDir, options.serializedFile, 'model.serializedFile'));
    const warning = fixedBatchWarning(graph, options.batchSize);
    return warning && `${warning.code}: ${warning.message}`;
  } catch {
    return undefined;
  }
}
