import { resolveInside } from '@marina/archive';
import type { MarinaError } from '@marina/errors';
import { type ModelSignature, readOnnxGraph } from '@marina/handlers';
import { createServeError } from '../errors.ts';

/** A version's signature as read at registration, or why it could not be read (answered to the requests that need it). */
export type SignatureRead = { signature: ModelSignature } | { error: MarinaError };

/**
 * Reads a model version's inputs and outputs once, while it is registered (off the request path),
 * with the handlers' ONNX reader (no weights, no session). Empty for an archive without an ONNX
 * serializedFile (a custom handler's). A file that cannot be read does not fail the registration
 * (the worker's session decides whether the model loads); the requests that need the signature
 * get MARINA_ERR_MODEL_SIGNATURE_UNREADABLE.
 */
export async function readModelSignature(options: {
  modelDir: string;
  serializedFile: string | undefined;
}): Promise<SignatureRead> {
  const file = options.serializedFile;
  if (!file || !/\.onnx$/i.test(file)) return { signature: { inputs: [], outputs: [] } };
  try {
    const graph = await readOnnxGraph(resolveInside(options.modelDir, file, 'model.serializedFile'));
    return { signature: { inputs: graph.inputs, outputs: graph.outputs } };
  } catch (error) {
    return {
      error: createServeError.MARINA_ERR_MODEL_SIGNATURE_UNREADABLE(
        `cannot read the inputs and outputs of the archive's ${file}: ${(error as Error).message}; check that it is an ONNX model`,
        { cause: error },
      ),
    };
  }
}
