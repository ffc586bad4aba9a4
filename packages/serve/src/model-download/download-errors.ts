import { defineErrors } from '@marina/errors';

/** Error codes of model URL resolution and downloads (listed in docs/reference/errors.md). Statuses and messages follow TorchServe. */
export const downloadErrors = defineErrors({
  MARINA_ERR_MODEL_STORE_NOT_CONFIGURED: {
    statusCode: 404,
    description: 'Register needs a model store; start the server with --model-store or model_store=.',
  },
  MARINA_ERR_URL_RELATIVE_PATH: {
    statusCode: 404,
    description: 'The model url contains `..`, which is refused before anything is read or downloaded.',
  },
  MARINA_ERR_URL_NOT_ALLOWED: {
    statusCode: 404,
    description: 'The model url matches none of the allowed_urls patterns; add a pattern or use another url.',
  },
  MARINA_ERR_MODEL_URL_INVALID: {
    statusCode: 404,
    description:
      'The model url is neither a plain file name in the model store nor a file:// or http(s):// URL with a usable file name.',
  },
  MARINA_ERR_MODEL_FILE_NOT_FOUND: {
    statusCode: 404,
    description: 'No archive or folder of that name exists in the model store (or at the file:// path).',
  },
  MARINA_ERR_MODEL_FILE_EXISTS: {
    statusCode: 500,
    description:
      'A download would overwrite a file already in the model store; register it by file name or remove it first.',
  },
  MARINA_ERR_DOWNLOAD_FAILED: {
    statusCode: 400,
    description: 'The archive could not be downloaded (network error, non-2xx status or too many redirects).',
  },
  MARINA_ERR_DOWNLOAD_TOO_LARGE: {
    statusCode: 400,
    description: 'The download exceeded the size limit; raise the limit or serve a smaller archive.',
  },
  MARINA_ERR_DOWNLOAD_TIMEOUT: {
    statusCode: 400,
    description:
      'The download did not finish within download_timeout_ms, or received nothing for download_idle_timeout_ms; its partial file was removed.',
  },
  MARINA_ERR_DOWNLOADS_BUSY: {
    statusCode: 503,
    description:
      'max_concurrent_downloads model downloads are already running; retry the register when one has finished.',
  },
  MARINA_ERR_DOWNLOAD_CANCELLED: {
    statusCode: 400,
    description:
      'The management client closed its connection while its archive was downloading; the download was stopped and its partial file removed.',
  },
  MARINA_ERR_MODEL_STORE_FULL: {
    statusCode: 507,
    description:
      "The model store's disk (or quota) filled up while an archive was downloaded or copied into it (TorchServe's 507, insufficient storage); the partial file was removed. Free space in the model store and register again.",
  },
  MARINA_ERR_DOWNLOAD_NOT_ARCHIVE: {
    statusCode: 400,
    description: 'The downloaded file is neither a zip (.mar) nor a gzip (.tar.gz) archive; it was deleted.',
  },
});
