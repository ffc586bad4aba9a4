export { quantizeErrors } from './errors.ts';
export {
  CALIBRATION_METHODS,
  CALIBRATION_CHOICES,
  CalibrationStats,
  chooseRangeByError,
  rangeError,
  type CalibrationChoice,
  DEFAULT_PERCENTILE,
  HISTOGRAM_BINS,
  chooseRange,
  entropyThreshold,
  percentileThreshold,
  HistogramCollector,
  MinMaxCollector,
  type CalibrationMethod,
  type TensorRange,
} from './calibration.ts';
export {
  compareOutputs,
  cosine,
  labelIou,
  outputKind,
  DEFAULT_MIN_AGREEMENT,
  type Agreement,
  type OutputAgreement,
  type OutputKind,
  type OutputValues,
} from './compare-outputs.ts';
export { loadModel, saveModel, encodeModel, type LoadedModel, type ModelProto } from './onnx-model.ts';
export {
  quantizeToQdq,
  quantizeWeights,
  activationParams,
  roundHalfEven,
  QUANTIZABLE_OP_TYPES,
  type QdqOptions,
  type QdqResult,
  type QuantParams,
} from './qdq-transform.ts';
export { inferTensorTypes } from './tensor-types.ts';
export {
  quantizeModel,
  hasVnni,
  DEFAULT_FOLDS,
  DEFAULT_MAX_SEARCH_STEPS,
  MIN_SAMPLES_FOR_ESTIMATE,
  type Feeds,
  type FoldResult,
  type QuantizeModelOptions,
  type QuantizeModelResult,
  type QuantizationReport,
  type SearchReport,
} from './quantize-model.ts';
export { createFolds, heldOutFold, type Fold } from './k-fold.ts';
export {
  rankBySensitivity,
  searchFp32Set,
  type Measurement,
  type RankedGroup,
  type SearchResult,
  type SearchStep,
} from './sensitivity.ts';
export {
  firstConvolutions,
  isMeasurablyBetter,
  measuredDefaults,
  probabilityOutputs,
  type DefaultTried,
  type KeptFp32,
} from './quantize-defaults.ts';
export {
  readSamples,
  recordHandlerFeeds,
  MAX_SAMPLES,
  MAX_SAMPLE_BYTES,
  type Sample,
  type SampleRun,
  type HandlerFeedsOptions,
} from './handler-feeds.ts';
export {
  quantizeForArchive,
  formatQuantizationSummary,
  QUANTIZATION_REPORT_FILE,
  DEFAULT_CALIBRATION_METHOD,
  type QuantizeForArchiveOptions,
  type QuantizeForArchiveResult,
  type QuantizationRecord,
} from './quantize-for-archive.ts';
