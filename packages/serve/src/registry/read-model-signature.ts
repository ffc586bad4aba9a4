import { resolveInside } from '@marina/archive';
import type { MarinaError } from '@marina/errors';
import { type ModelSignature, type OnnxGraphFile, readOnnxGraphFile } from '@marina/handlers';
import { createServeError } from '../errors.ts';

/**
 * A version's signature as read at registration, or why it could not be read (answered to the
 * requests that need it). `graph`: the whole graph, kept for the version's workers (see
 * GRAPH_NODES_KEPT).
 */
export type SignatureRead = { signature: ModelSignature; graph?: OnnxGraphFile } | { error: MarinaError };

/**
 * Graphs up to this many nodes are kept with their version (a few hundred bytes a node) and given
 * to each worker that loads it, whose handler would otherwise read the file again on the load's
 * path (6–8 ms for a ResNet-50 in a fresh thread). A larger graph is read by its workers.
 */
const GRAPH_NODES_KEPT = 10_000;

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
    const read = await readOnnxGraphFile(resolveInside(options.modelDir, file, 'model.serializedFile'));
    const signature = { inputs: read.graph.inputs, outputs: read.graph.outputs };
    return read.graph.nodes.length <= GRAPH_NODES_KEPT ? { signature, graph: read } : { signature };
  } catch (error) {
    return {
      error: createServeError.MARINA_ERR_MODEL_SIGNATURE_UNREADABLE(
        `cannot read the inputs and outputs of the archive's ${file}: ${(error as Error).message}; check that it is an ONNX model`,
        { cause: error },
      ),
    };
  }
}
