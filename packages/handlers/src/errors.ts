/**
 * Error codes raised by the built-in handlers and the custom-handler loader. A handler that
 * returns one of these (or any MarinaError) in a row's place fails only that request, with
 * the error's status code; the rest of the batch is answered normally.
 */
import { defineErrors } from '@marina/errors';

export const handlerErrors = defineErrors({
  MARINA_ERR_INPUT_MISSING: {
    statusCode: 400,
    description:
      "The request has no body and no 'data'/'body' field; send the input as the raw body or as a multipart field named data.",
  },
  MARINA_ERR_IMAGE_DECODE_FAILED: {
    statusCode: 400,
    description:
      'The body is not an image sharp can decode (corrupt, truncated, or another format); send a JPEG, PNG, WebP, GIF, TIFF or AVIF.',
  },
  MARINA_ERR_IMAGE_TOO_SMALL: {
    statusCode: 400,
    description:
      "The image decoded, but after resizing its shorter side (handler.resize) it is smaller than the model's input, so the centre crop cannot be cut; set handler.resize_mode: letterbox (pads, keeping the aspect ratio) or stretch in model-config.yaml.",
  },
  MARINA_ERR_IMAGE_TOO_LARGE: {
    statusCode: 400,
    description:
      'The image has more pixels than limit_max_image_pixels allows (268,402,689); send a smaller image or set limit_max_image_pixels=false.',
  },
  MARINA_ERR_TENSOR_INPUT_INVALID: {
    statusCode: 400,
    description:
      "A tensor input does not fit the model: unknown or missing input name, a datatype or shape other than the signature's, data that does not match the shape, a value out of the datatype's range, or a malformed binary body; the message names the input and what the model expects.",
  },
  MARINA_ERR_TENSOR_OUTPUT_UNKNOWN: {
    statusCode: 400,
    description:
      "The request's `outputs` names an output the model does not have; the message lists the model's outputs.",
  },
  MARINA_ERR_TENSOR_TOO_LARGE: {
    statusCode: 413,
    description:
      "The request's input and output tensors would need more memory than the model allows (model-config.yaml handler.maxTensorBytesPerRequest, default 256 MiB); refused before the model runs. Send fewer rows or smaller dimensions, or raise the limit.",
  },
  MARINA_ERR_RESPONSE_TOO_LARGE: {
    statusCode: 500,
    description:
      'The answer is larger than max_response_size; ask for fewer outputs (`outputs`), use binary tensors, send fewer rows, or raise max_response_size. The tensor handler refuses before it builds a JSON answer that cannot fit.',
  },
  MARINA_ERR_HANDLER_NOT_FOUND: {
    statusCode: 400,
    description:
      "The manifest's handler is neither a built-in handler nor a .js/.mjs file in the archive; check --handler.",
  },
  MARINA_ERR_HANDLER_INVALID: {
    statusCode: 500,
    description: 'The custom handler module does not export a handle function, a handler object, a class or a factory.',
  },
  MARINA_ERR_HANDLER_CONFIG_INVALID: {
    statusCode: 500,
    description:
      "The 'handler' section of model-config.yaml has a bad value (resize_mode, size, resize, pad_value, channel_order, color, mean, std, topk, softmax, output, or a detector/segmenter key), or does not fit the model's input; the message names it.",
  },
  MARINA_ERR_MODEL_OUTPUT_UNEXPECTED: {
    statusCode: 503,
    description:
      'The model returned an output the handler cannot read (wrong rank or batch size); check the model against the handler with the archive validator.',
  },
});

export const createHandlerError = handlerErrors.create;
