export type * from './types.ts';
export {
  checkImageClassifierSignature,
  checkImageSegmenterSignature,
  checkObjectDetectorSignature,
  checkTensorSignature,
  describeTensor,
  fixedBatchWarning,
  isDynamicDim,
} from './signature-checks.ts';
export { getBuiltinHandler, builtinHandlerNames } from './builtin-handlers.ts';
export { handlerErrors, createHandlerError } from './errors.ts';
export { sessionSignature } from './session-signature.ts';
export { meanIou } from './mean-iou.ts';
export { loadCustomHandler } from './custom-handler-loader.ts';
export { rowPayload, payloadBytes } from './row-input.ts';
export {
  readOnnxGraph,
  readOnnxGraphFile,
  rememberOnnxGraph,
  forgetOnnxGraphs,
  finalActivation,
  readFinalActivation,
  type OnnxGraph,
  type OnnxGraphFile,
  type OnnxNode,
} from './onnx-graph.ts';
export {
  preprocessImage,
  resolveImagePreprocessOptions,
  toOriginal,
  IMAGENET_MEAN,
  IMAGENET_STD,
  RESIZE_MODES,
  type ImageGeometry,
  type ImagePreprocessOptions,
  type ResizeMode,
  warmUpImageDecoding,
} from './image-preprocess.ts';
export {
  createImageClassifier,
  resolveImageClassifierOptions,
  readIndexToName,
  topK,
  topIndices,
  isProbabilityRow,
  type ImageClassifierOptions,
  type ProbabilityTransform,
} from './image-classifier.ts';
export {
  createImageSegmenter,
  resolveImageSegmenterOptions,
  segmentPixels,
  type ImageSegmenterOptions,
  type SegmenterResponse,
} from './image-segmenter.ts';
export {
  createObjectDetector,
  resolveObjectDetectorOptions,
  nonMaxSuppression,
  readDetections,
  finishDetections,
  type Detection,
  type ObjectDetectorOptions,
  type BoxFormat,
} from './object-detector.ts';
export { createTensorHandler, type TensorHandlerResponse } from './tensor-handler.ts';
export {
  parseTensorRequest,
  isPlainFloatTensorBody,
  checkTensorAgainstSignature,
  selectedOutputNames,
  INFERENCE_HEADER_CONTENT_LENGTH,
  type ParsedTensorRequest,
  type RequestedOutput,
} from './tensor-request.ts';
export * from './v2-tensors.ts';
export { concreteShape, syntheticFeeds, syntheticRequestBody, type SyntheticShapeOptions } from './synthetic-input.ts';
