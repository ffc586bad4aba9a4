export { archiveErrors, type ArchiveErrorCode } from './errors.ts';
export {
  assertModelIdentity,
  createManifest,
  formatCreatedOn,
  MANIFEST_PATH,
  MODEL_NAME_MAX_LENGTH,
  MODEL_NAME_PATTERN,
  MODEL_VERSION_PATTERN,
  modelIdentityProblem,
  modelNameFromArchivePath,
  normalizeManifest,
  parseManifest,
  readManifest,
  RUNTIMES,
  serializeManifest,
  type CreateManifestOptions,
  type Manifest,
  type ManifestModel,
  type NormalizeManifestOptions,
  type Runtime,
} from './manifest.ts';
export { parseModelConfig, readModelConfig } from './model-config.ts';
export { DEFAULT_EXTRACT_LIMITS, resolveExtractLimits, type ExtractLimits } from './extract-limits.ts';
export {
  detectArchiveFormat,
  extractArchive,
  extractToCache,
  findModelRoot,
  listArchive,
  sha256File,
  type ArchiveEntry,
  type ArchiveFormat,
  type ExtractArchiveOptions,
  type ExtractArchiveResult,
  type ExtractToCacheOptions,
  type ExtractToCacheResult,
} from './open-archive.ts';
export {
  ARCHIVE_FORMATS,
  archiveOutputPath,
  packArchive,
  type ArchiveFormatOption,
  type PackOptions,
  type PackProgress,
  type PackResult,
} from './pack-archive.ts';
export { probeHandler, type HandlerProbeResult, type ProbeHandlerOptions } from './handler-probe.ts';
export {
  validateArchive,
  type ValidateArchiveOptions,
  type ValidationProblem,
  type ValidationReport,
} from './validate-archive.ts';
export { ARCHIVER_VERSION } from './version.ts';
export {
  isInside,
  MANIFEST_FILE_FIELDS,
  resolveInside,
  resolveManifestFiles,
  resolveManifestPath,
  unsafeEntryReason,
  type ManifestFileField,
} from './safe-path.ts';
export { defaultOrtTelemetryOff, ORT_TELEMETRY_ENV } from './ort-telemetry.ts';
export { QUANTIZATION_FILE, readQuantizationSummary, type QuantizationSummary } from './quantization-record.ts';
