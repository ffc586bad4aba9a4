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
export { createTensorHandler, type TensorHandlerResponse } from './tensor-handler.ts';
export {
  parseTensorRequest,
  checkTensorAgainstSignature,
  selectedOutputNames,
  INFERENCE_HEADER_CONTENT_LENGTH,
  type ParsedTensorRequest,
  type RequestedOutput,
} from './tensor-request.ts';
export * from './v2-tensors.ts';
