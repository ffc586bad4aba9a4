/**
 * Marina's one error shape: every error a user can meet carries a stable `code`
 * (documented in the README), an HTTP `statusCode` for the APIs, an optional `cause`
 * and optional structured `details`.
 */
export interface MarinaErrorOptions {
  cause?: unknown;
  details?: Record<string, unknown>;
}

export class MarinaError extends Error {
  readonly code: string;
  readonly statusCode: number;
  readonly details: Record<string, unknown> | undefined;

  constructor(code: string, message: string, statusCode = 500, options: MarinaErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'MarinaError';
    this.code = code;
    this.statusCode = statusCode;
    this.details = options.details;
  }

  toJSON(): Record<string, unknown> {
    return { code: this.code, message: this.message, ...(this.details ? { details: this.details } : {}) };
  }
}

export interface ErrorDefinition {
  /** HTTP status used when the error reaches an API. */
  statusCode: number;
  /** One sentence for the README's error table: when it happens and what to do. */
  description: string;
}

export type ErrorFactory = (message: string, options?: MarinaErrorOptions) => MarinaError;

/**
 * Declares a package's error codes in one place. Returns a factory per code and the
 * definitions themselves, so a test can check each code is unique and documented.
 *
 * @example
 * const errors = defineErrors({ MARINA_ERR_QUEUE_FULL: { statusCode: 503, description: '...' } });
 * throw errors.create.MARINA_ERR_QUEUE_FULL("model 'resnet' queue is full (100 jobs)");
 */
export function defineErrors<const T extends Record<string, ErrorDefinition>>(
  definitions: T,
): { definitions: T; create: { [K in keyof T]: ErrorFactory } } {
  const create = {} as { [K in keyof T]: ErrorFactory };
  for (const code of Object.keys(definitions) as (keyof T & string)[]) {
    if (!/^MARINA_ERR_[A-Z0-9_]+$/.test(code)) throw new Error(`error code '${code}' must match MARINA_ERR_[A-Z0-9_]+`);
    const { statusCode } = definitions[code]!;
    create[code] = (message, options) => new MarinaError(code, message, statusCode, options);
  }
  return { definitions, create };
}

export function isMarinaError(value: unknown): value is MarinaError {
  return (
    value instanceof MarinaError ||
    (typeof value === 'object' &&
      value !== null &&
      (value as { name?: unknown }).name === 'MarinaError' &&
      typeof (value as { code?: unknown }).code === 'string')
  );
}
export { closestName, didYouMean, editDistance } from './did-you-mean.ts';
