export type * from './types.ts';
export { checkImageClassifierSignature, checkTensorSignature, isDynamicDim } from './signature-checks.ts';
export { getBuiltinHandler, builtinHandlerNames } from './builtin-handlers.ts';
export { handlerErrors, createHandlerError } from './errors.ts';
export { sessionSignature } from './session-signature.ts';
export { loadCustomHandler } from './custom-handler-loader.ts';
export { rowPayload, payloadBytes } from './row-input.ts';
export {
  createImageClassifier,
  resolveImageClassifierOptions,
  decodeImageInto,
  readIndexToName,
  topK,
  IMAGENET_MEAN,
  IMAGENET_STD,
  type ImageClassifierOptions,
} from './image-classifier.ts';
export { createTensorHandler, parseTensorRequest, type JsonTensor, type TensorHandlerResponse } from './tensor-handler.ts';
export { concreteShape, syntheticFeeds, syntheticRequestBody, type SyntheticShapeOptions } from './synthetic-input.ts';
