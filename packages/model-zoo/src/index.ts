export { modelZooErrors } from './errors.ts';
export { createPrng, type Prng } from './prng.ts';
export {
  writeOnnxModel,
  readModelMetadata,
  IR_VERSION,
  OPSET_VERSION,
  EXTERNAL_DATA_ALIGNMENT_BYTES,
  type WriteModelResult,
  type WriteOnnxModelOptions,
  type GraphSpec,
  type TensorSource,
  type ValueInfoSpec,
} from './onnx-model-writer.ts';
export { GraphBuilder, type AttributeValue } from './graph-builder.ts';
export { writeTinyClassifier, writeTinyTensorModel, writeSlowModel, writeMixedTypesModel } from './tiny-models.ts';
export {
  writeHeadClassifier,
  writeMultiOutputModel,
  writeTinySegmenter,
  writeTinyDetector,
  TINY_DETECTOR_BOXES,
  TINY_DETECTOR_CLASSES,
} from './handler-models.ts';
export {
  writeResnet,
  countResnetParameters,
  countResnetFoldedParameters,
  countResnetMacs,
  RESNET_DEPTHS,
  type ResnetDepth,
} from './resnet.ts';
export { writeSampleJpeg, writeCorruptJpeg } from './sample-image.ts';
export { renderDocumentJpeg } from './document-image.ts';
export { loadImagenetClassNames, writeIndexToName, parseImagenetClassesSource } from './imagenet-class-names.ts';
export {
  generateModels,
  GENERATABLE_MODELS,
  DEFAULT_MODELS,
  type GeneratableModel,
  type GenerateModelsOptions,
  type GeneratedFile,
} from './generate-models.ts';
export { createProgram, runCli, type CliOutput } from './cli.ts';
