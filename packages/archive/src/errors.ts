import { defineErrors } from '@marina/errors';

/**
 * Every error code @marina/archive throws or reports. Packing throws these as
 * `MarinaError`s; the validator reports them as problems. docs/reference/errors.md lists them
 * all (generated from this registry; a test keeps the two in step).
 */
export const archiveErrors = defineErrors({
  MARINA_ERR_ARCHIVE_MODEL_NAME_INVALID: {
    statusCode: 400,
    description:
      "The model name (or version) breaks the archiver's rule: TorchServe's ^[A-Za-z0-9][A-Za-z0-9_\\-.]*$ (versions may also use '+'), no '..', at most 128 characters; checked at pack, validate and register. Rename it, e.g. 'resnet-152'.",
  },
  MARINA_ERR_ARCHIVE_OPTION_INVALID: {
    statusCode: 400,
    description:
      'An archiving option has a value outside its choices (--runtime, --archive-format) or is empty; use one of the values listed in the message.',
  },
  MARINA_ERR_ARCHIVE_INPUT_MISSING: {
    statusCode: 400,
    description:
      'A file given to the archiver (--serialized-file, --model-file, --extra-files, -r, -c) does not exist; fix the path.',
  },
  MARINA_ERR_ARCHIVE_ENTRY_CONFLICT: {
    statusCode: 400,
    description:
      'Two inputs would land on the same name in the flat archive, or an input uses the reserved MAR-INF folder; rename one of them.',
  },
  MARINA_ERR_ARCHIVE_EXPORT_PATH_NOT_DIR: {
    statusCode: 400,
    description: 'The --export-path exists but is a file; point it at a folder (it is created when missing).',
  },
  MARINA_ERR_ARCHIVE_OUTPUT_EXISTS: {
    statusCode: 409,
    description:
      'The output archive already exists; pass --force/-f to overwrite it, or choose another --export-path or --model-name.',
  },
  MARINA_ERR_ARCHIVE_WRITE_FAILED: {
    statusCode: 500,
    description:
      'Writing the archive failed (disk full, permissions, a file changed while being read); nothing was left behind. Fix the cause in the message and run again.',
  },
  MARINA_ERR_ARCHIVE_NOT_FOUND: {
    statusCode: 404,
    description: 'The archive or folder to read does not exist; check the path.',
  },
  MARINA_ERR_ARCHIVE_UNREADABLE: {
    statusCode: 400,
    description:
      'The archive is not a zip (.mar), a tar.gz or a folder, or it is truncated or corrupt; re-create it with model-archiver.',
  },
  MARINA_ERR_ARCHIVE_PATH_ESCAPE: {
    statusCode: 400,
    description:
      "An archive entry (or a file the manifest names) is absolute, contains '..', is a link, or otherwise resolves outside the archive folder; such archives are refused. Re-create it with model-archiver.",
  },
  MARINA_ERR_ARCHIVE_TOO_LARGE: {
    statusCode: 400,
    description:
      'The archive inflates to more bytes than maxExtractedBytes allows (default 17.2 GB, that is 16 × 1024³ bytes), by its declared sizes or by the bytes actually written; extraction stopped and nothing was kept. A zip bomb looks like this; if the archive is genuine, raise maxExtractedBytes.',
  },
  MARINA_ERR_ARCHIVE_TOO_MANY_ENTRIES: {
    statusCode: 400,
    description:
      'The archive has more entries than maxEntries allows (default 100,000); nothing was extracted. Pack fewer, larger files, or raise maxEntries if the archive is genuine.',
  },
  MARINA_ERR_ARCHIVE_COMPRESSION_RATIO: {
    statusCode: 400,
    description:
      'An entry of a zip (or the whole stream of a tar.gz) inflates more than maxCompressionRatio times its compressed size (default 200:1, checked once past 1.05 MB); extraction stopped and nothing was kept. Model weights barely compress, so this is a bomb or padding; raise maxCompressionRatio if the archive is genuine.',
  },
  MARINA_ERR_ARCHIVE_OVERLAPPING_ENTRIES: {
    statusCode: 400,
    description:
      "Two entries of a zip's central directory point into the same bytes (one compressed stream extracted many times: a bomb that passes the per-entry checks); nothing was written. Re-create the archive with model-archiver.",
  },
  MARINA_ERR_ARCHIVE_MANIFEST_MISSING: {
    statusCode: 400,
    description: 'The archive has no MAR-INF/MANIFEST.json; re-create it with model-archiver, which writes one.',
  },
  MARINA_ERR_ARCHIVE_MANIFEST_INVALID: {
    statusCode: 400,
    description:
      'MAR-INF/MANIFEST.json is not JSON or does not match schemas/manifest.schema.json (e.g. no model.modelName or model.modelVersion); fix the field named in the message.',
  },
  MARINA_ERR_ARCHIVE_MANIFEST_INCOMPLETE: {
    statusCode: 400,
    description:
      'Warning: the manifest lacks archiverVersion or createdOn. TorchServe only warns about this too; re-archiving adds them.',
  },
  MARINA_ERR_ARCHIVE_FILE_MISSING: {
    statusCode: 400,
    description:
      'A file the manifest names (serializedFile, modelFile, requirementsFile, configFile) is not in the archive; add it or fix the manifest.',
  },
  MARINA_ERR_ARCHIVE_NO_MODEL: {
    statusCode: 400,
    description:
      'A built-in handler needs an ONNX model but the manifest has no serializedFile; archive with --serialized-file model.onnx.',
  },
  MARINA_ERR_HANDLER_NOT_FOUND: {
    statusCode: 400,
    description:
      'The handler is neither a built-in name (image_classifier, image_segmenter, object_detector, tensor) nor a JavaScript module (.js/.mjs) that exists (in the archive, or on disk when archiving); Python handlers do not run in Marina.',
  },
  MARINA_ERR_HANDLER_IMPORT_FAILED: {
    statusCode: 400,
    description:
      'The custom handler module threw, failed to import, or took too long to import; fix the error shown (run it with node to see the stack).',
  },
  MARINA_ERR_HANDLER_CONTRACT: {
    statusCode: 400,
    description:
      'The custom handler module does not export the handler contract: a handle(data, context) function, or inference (with optional initialize/preprocess/postprocess), as named exports, a default object, a default class or a default zero-argument factory.',
  },
  MARINA_ERR_MODEL_CONFIG_INVALID: {
    statusCode: 400,
    description:
      'model-config.yaml is not YAML, does not match schemas/model-config.schema.json, or its handler: knobs do not fit the model (a size that contradicts the input, an output name the model lacks); fix the key named in the message.',
  },
  MARINA_ERR_MODEL_LOAD_FAILED: {
    statusCode: 400,
    description:
      'onnxruntime-node cannot load the serialized file (not ONNX, corrupt, or an unsupported opset/operator); re-export the model to ONNX.',
  },
  MARINA_ERR_HANDLER_SIGNATURE_MISMATCH: {
    statusCode: 400,
    description:
      "The model's inputs or outputs do not fit the handler (the image handlers need one float input [N,3,H,W] or [N,1,H,W]; image_classifier one output [N,classes], image_segmenter [N,C,H,W], object_detector boxes/scores or [N,K,4+1+C]); use the tensor handler or re-export the model.",
  },
  MARINA_ERR_MODEL_BATCH_NOT_DYNAMIC: {
    statusCode: 400,
    description:
      "Warning (validate and serve alike): the batch size is above the model's fixed batch dimension. The model is served; the built-in handlers run it in groups of that size (one at a time for 1), so batching brings no speed-up. Export it with a dynamic first dimension, or set batchSize to the fixed size.",
  },
  MARINA_ERR_INDEX_TO_NAME_INVALID: {
    statusCode: 400,
    description:
      'index_to_name.json is not a JSON object mapping class indices ("0", "1", ...) to a name or a list whose last element is the name; fix the file.',
  },
  MARINA_ERR_INDEX_TO_NAME_MISSING: {
    statusCode: 400,
    description:
      'Warning: an image_classifier or object_detector archive has no index_to_name.json, so answers name classes by index ("0", "1", ...); add one with --extra-files index_to_name.json.',
  },
  MARINA_ERR_INDEX_TO_NAME_MISMATCH: {
    statusCode: 400,
    description:
      "index_to_name.json's number of names differs from the model's number of output classes; give one name per class.",
  },
});

/** Union of the codes in `archiveErrors`. */
export type ArchiveErrorCode = keyof typeof archiveErrors.definitions;
