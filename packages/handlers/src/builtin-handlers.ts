import type { BuiltinHandler } from './types.ts';
import { checkImageClassifierSignature, checkTensorSignature } from './signature-checks.ts';

// TODO(serve): create() implementations live in image-classifier.ts and tensor-handler.ts.
const builtins: BuiltinHandler[] = [
  {
    name: 'image_classifier',
    description: 'decodes an image (sharp), resizes, centre-crops, normalises, runs the model, returns the top-5 {label: probability}',
    create: () => { throw new Error('image_classifier runtime not implemented yet'); },
    checkSignature: (signature, options) => checkImageClassifierSignature(signature, options),
  },
  {
    name: 'tensor',
    description: 'takes and returns JSON tensors: {"inputs": {name: {shape, data}}} or a bare nested array for a single input',
    create: () => { throw new Error('tensor handler runtime not implemented yet'); },
    checkSignature: (signature, options) => checkTensorSignature(signature, options),
  },
];

/** Built-in handler names, as accepted by `--handler` and the manifest's `handler`. */
export const builtinHandlerNames: readonly string[] = builtins.map((b) => b.name);

export function getBuiltinHandler(name: string): BuiltinHandler | undefined {
  return builtins.find((b) => b.name === name);
}
