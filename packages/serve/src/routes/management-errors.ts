import { defineErrors } from '@marina/errors';

/** Error codes of the management routes (listed in docs/reference/errors.md). */
export const managementErrors = defineErrors({
  MARINA_ERR_MODEL_API_DISABLED: {
    statusCode: 405,
    description: 'Register and unregister are off by default; start with --enable-model-api or enable_model_api=true.',
  },
  MARINA_ERR_METHOD_NOT_ALLOWED: {
    statusCode: 405,
    description:
      "The path exists but not with this HTTP method (TorchServe's 'Requested method is not allowed'), on any API, `GET /` among them; the `Allow` header and the hint list the methods it accepts.",
  },
  MARINA_ERR_URL_REQUIRED: {
    statusCode: 400,
    description: 'Register was called without the `url` parameter (query string or JSON body).',
  },
});
