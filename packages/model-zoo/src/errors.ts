import { defineErrors } from '@marina/errors';

/**
 * Every error `@marina/model-zoo` throws. Codes are stable; docs/reference/errors.md
 * lists them (a test keeps the two in step).
 */
export const modelZooErrors = defineErrors({
  MARINA_ERR_MODEL_ZOO_INVALID_OPTION: {
    statusCode: 400,
    description:
      'An option passed to a model-zoo function or the marina-models CLI is out of range or of the wrong type; the message names the option, the value and the allowed values.',
  },
  MARINA_ERR_MODEL_ZOO_UNKNOWN_MODEL: {
    statusCode: 400,
    description:
      'marina-models generate was asked for a model name it does not know; use one of resnet-18, resnet-50, resnet-152, tiny.',
  },
  MARINA_ERR_MODEL_ZOO_OUTPUT_EXISTS: {
    statusCode: 409,
    description:
      'An output file exists but was not written by marina-models with the same settings; pass --force to overwrite it.',
  },
  MARINA_ERR_MODEL_ZOO_WRITE_FAILED: {
    statusCode: 500,
    description:
      'Writing a model, image or label file failed (disk full, permissions, missing directory); the message names the path and the cause.',
  },
  MARINA_ERR_MODEL_ZOO_CLASS_NAMES_UNAVAILABLE: {
    statusCode: 500,
    description:
      'The ImageNet class names could not be read from the installed @tensorflow-models/mobilenet package; reinstall dependencies.',
  },
  MARINA_ERR_MODEL_ZOO_UNSUPPORTED_PLATFORM: {
    statusCode: 500,
    description: 'The machine is big-endian; ONNX raw tensor data is little-endian and the writer does not byte-swap.',
  },
});

export const createError = modelZooErrors.create;
