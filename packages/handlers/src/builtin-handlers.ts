import type { BuiltinHandler } from './types.ts';
import { checkImageClassifierSignature, checkTensorSignature } from './signature-checks.ts';
import { createImageClassifier } from './image-classifier.ts';
import { createTensorHandler } from './tensor-handler.ts';

const builtins: BuiltinHandler[] = [
  {
    name: 'image_classifier',
    description: 'decodes an image (sharp), resizes, centre-crops, normalises, runs the model, returns the top-5 {label: probability}',
    create: () => createImageClassifier(),
    checkSignature: (signature, options) => checkImageClassifierSignature(signature, options),
  },
  {
    name: 'tensor',
    description: 'takes and returns JSON tensors: {"inputs": {name: {shape, data}}} or a bare nested array for a single input',
    create: () => createTensorHandler(),
    checkSignature: (signature, options) => checkTensorSignature(signature, options),
  },
];

/** TorchServe's generic handler name, served by the tensor handler (an ONNX model's tensors in, tensors out). */
const aliases: Record<string, string> = { base_handler: 'tensor' };

/** Built-in handler names, as accepted by `--handler` and the manifest's `handler`. */
export const builtinHandlerNames: readonly string[] = [...builtins.map((b) => b.name), ...Object.keys(aliases)];

export function getBuiltinHandler(name: string): BuiltinHandler | undefined {
  const resolved = aliases[name] ?? name;
  return builtins.find((b) => b.name === resolved);
}
