import type { BuiltinHandler } from './types.ts';
import {
  checkImageClassifierSignature,
  checkImageSegmenterSignature,
  checkObjectDetectorSignature,
  checkTensorSignature,
} from './signature-checks.ts';
import { createImageClassifier, resolveImageClassifierOptions } from './image-classifier.ts';
import { createImageSegmenter, resolveImageSegmenterOptions } from './image-segmenter.ts';
import { createObjectDetector, resolveObjectDetectorOptions } from './object-detector.ts';
import { createTensorHandler } from './tensor-handler.ts';
import { INFERENCE_HEADER_CONTENT_LENGTH } from './tensor-request.ts';

const builtins: BuiltinHandler[] = [
  {
    name: 'image_classifier',
    description:
      'decodes an image (sharp), resizes (centre crop, letterbox or stretch), normalises, runs the model, returns the top-5 {label: probability}',
    create: () => createImageClassifier(),
    // Its raw-tensor path reads a body in the v2 binary layout.
    requestHeaders: [INFERENCE_HEADER_CONTENT_LENGTH],
    checkSignature: (signature, options) =>
      checkImageClassifierSignature(signature, {
        ...options,
        resolveOptions: (shape) => resolveImageClassifierOptions(options.modelYamlConfig, shape),
      }),
  },
  {
    name: 'image_segmenter',
    description:
      'decodes an image, runs a segmentation model ([N,C,H,W] or [N,1,H,W] output), returns per-pixel [class, probability] rows, a class map or a PNG mask',
    create: () => createImageSegmenter(),
    // `Accept: image/png` asks for a PNG mask.
    requestHeaders: ['accept'],
    checkSignature: (signature, options) =>
      checkImageSegmenterSignature(signature, {
        ...options,
        resolveOptions: (shape) => resolveImageSegmenterOptions(options.modelYamlConfig, shape),
      }),
  },
  {
    name: 'object_detector',
    description:
      'decodes an image, runs a detector (boxes/scores/labels outputs or one [N,K,4+1+C] output), applies the score threshold and NMS, returns [{label: [x1,y1,x2,y2], score}]',
    create: () => createObjectDetector(),
    requestHeaders: [],
    checkSignature: (signature, options) =>
      checkObjectDetectorSignature(signature, {
        ...options,
        resolveOptions: (shape) =>
          resolveObjectDetectorOptions(
            options.modelYamlConfig,
            shape,
            signature.outputs.map((o) => o.name),
          ),
      }),
  },
  {
    name: 'tensor',
    description:
      'takes and returns JSON tensors: {"inputs": {name: {shape, data}}} or a bare nested array for a single input',
    create: () => createTensorHandler(),
    requestHeaders: [INFERENCE_HEADER_CONTENT_LENGTH],
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
