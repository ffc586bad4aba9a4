import type { InferenceSession } from 'onnxruntime-node';
import type { ModelSignature, TensorSignature } from './types.ts';

/** The inputs and outputs of a loaded session, in the shape the signature checks use. */
export function sessionSignature(session: InferenceSession): ModelSignature {
  const convert = (m: InferenceSession.ValueMetadata): TensorSignature =>
    m.isTensor ? { name: m.name, type: m.type, shape: [...m.shape] } : { name: m.name, type: 'non-tensor', shape: [] };
  return { inputs: session.inputMetadata.map(convert), outputs: session.outputMetadata.map(convert) };
}
