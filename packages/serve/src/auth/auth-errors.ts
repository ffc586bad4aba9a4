import { defineErrors } from '@marina/errors';

/** Error codes of token authorization (listed in docs/reference/errors.md). */
export const authErrors = defineErrors({
  MARINA_ERR_TOKEN_MISSING: {
    statusCode: 401,
    description:
      'The request has no `Authorization: Bearer <key>` header; send the key from key_file.json, or start with --disable-token-auth.',
  },
  MARINA_ERR_TOKEN_INVALID: {
    statusCode: 401,
    description:
      'The bearer token is not the current key for this API; read the right key (inference, management or API) from key_file.json.',
  },
  MARINA_ERR_TOKEN_EXPIRED: {
    statusCode: 401,
    description:
      'The key expired after token_expiration_min minutes; rotate it with `/token?type=` and the API key, then read key_file.json again.',
  },
  MARINA_ERR_TOKEN_TYPE_INVALID: {
    statusCode: 400,
    description: '`/token` was called without `type=inference` or `type=management`.',
  },
  MARINA_ERR_KEY_FILE_PROVIDED: {
    statusCode: 409,
    description:
      '`/token` cannot rotate keys read from `token_key_file` (for example a Kubernetes Secret); change the key in that file and restart the server.',
  },
  MARINA_ERR_KEY_FILE_INVALID: {
    statusCode: 500,
    description:
      "key_file.json could not be read or is not in TorchServe's format; delete it and restart the server to write a new one.",
  },
});
