/**
 * The client's own error codes (the server's codes travel as they are, in `MarinaClientError.code`).
 * Plain data with the same shape as `@marina/errors`' definitions, so that this package has no
 * dependencies and docs/reference/errors.md still lists every code.
 */
export const clientErrorDefinitions = {
  MARINA_ERR_CLIENT_RESPONSE_TIMEOUT: {
    statusCode: 504,
    description:
      'The client gave up on a request after its `timeoutMs` (Python: `timeout_s`); the server may still run it. Raise the timeout, or lower the concurrency so requests wait less in the queue.',
  },
  MARINA_ERR_CLIENT_CONNECTION_FAILED: {
    statusCode: 502,
    description:
      'The client could not reach the server (connection refused or reset, DNS); check the URL and that `serve` is running.',
  },
  MARINA_ERR_CLIENT_HTTP_ERROR: {
    statusCode: 502,
    description:
      'The server (or a proxy in front of it) answered an error without a Marina error body; the status and the start of the body are in the message.',
  },
  MARINA_ERR_CLIENT_KEY_FILE_INVALID: {
    statusCode: 400,
    description:
      "The key file given to the client (`keyFile`, `MARINA_KEY_FILE`) cannot be read or has no `inference.key`; point it at the server's key_file.json.",
  },
  MARINA_ERR_CLIENT_OPTION_INVALID: {
    statusCode: 400,
    description:
      'A client option or argument is invalid (for example a concurrency of 0 or a URL that is not http(s)); the message names it.',
  },
} as const;

export type ClientErrorCode = keyof typeof clientErrorDefinitions;

/**
 * Every failure the client reports. `code` is the server's `marinaCode` when the server sent one
 * (for example `MARINA_ERR_QUEUE_FULL`, `MARINA_ERR_MODEL_NOT_FOUND`), else one of the client's
 * own codes. `statusCode` is the HTTP status received (0 when there was no answer).
 */
export class MarinaClientError extends Error {
  readonly code: string;
  readonly statusCode: number;
  /** TorchServe's exception type from the error body (`ServiceUnavailableException`), when there was one. */
  readonly type: string | undefined;
  /** Seconds from the server's Retry-After header, when it sent one. */
  readonly retryAfterS: number | undefined;
  /** Attempts made, retries included. */
  readonly attempts: number;
  /** The `x-request-id` of the last answer, for the server's log. */
  readonly requestId: string | undefined;

  constructor(
    code: string,
    message: string,
    options: {
      statusCode: number;
      type?: string;
      retryAfterS?: number;
      attempts?: number;
      requestId?: string;
      cause?: unknown;
    },
  ) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'MarinaClientError';
    this.code = code;
    this.statusCode = options.statusCode;
    this.type = options.type;
    this.retryAfterS = options.retryAfterS;
    this.attempts = options.attempts ?? 1;
    this.requestId = options.requestId;
  }
}

export function isMarinaClientError(value: unknown): value is MarinaClientError {
  return value instanceof MarinaClientError;
}
