import { defineErrors } from '@marina/errors';

/**
 * Every error `@marina/quantize` throws. Codes are stable; docs/reference/errors.md
 * lists them (a test keeps the two in step).
 */
export const quantizeErrors = defineErrors({
  MARINA_ERR_QUANTIZE_MODEL_INVALID: {
    statusCode: 400,
    description:
      'The ONNX model could not be read for quantisation (not an ONNX file, opset below 9, missing external data file); the message names the file and what was wrong.',
  },
  MARINA_ERR_QUANTIZE_OPTION_INVALID: {
    statusCode: 400,
    description:
      'A quantisation option is out of range (unknown --quantize precision or --calibration-method, --min-agreement outside 0..1, an --exclude-nodes name the model does not have); the message names the option and the allowed values.',
  },
  MARINA_ERR_QUANTIZE_CALIBRATION_EMPTY: {
    statusCode: 400,
    description:
      "The --calibration (or --eval) folder has no usable samples, or every sample failed the handler's preprocessing; put request bodies (images for the image handlers, JSON for the tensor handler) in it.",
  },
  MARINA_ERR_QUANTIZE_CALIBRATION_FAILED: {
    statusCode: 400,
    description:
      "A calibration sample could not be run through the handler and the model; the message names the file and the handler's error.",
  },
  MARINA_ERR_QUANTIZE_ACCURACY_BELOW_TARGET: {
    statusCode: 422,
    description:
      "The int8 model's agreement with fp32 stayed below --min-agreement even after keeping the most sensitive nodes in fp32; the message gives the agreement reached and the nodes kept. Add calibration samples like your requests, lower --min-agreement, or pass --force to write it anyway.",
  },
});

export const createError = quantizeErrors.create;
