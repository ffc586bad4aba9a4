/**
 * Marina's one error shape: every error a user can meet carries a stable `code`
 * (listed in docs/reference/errors.md), an HTTP `statusCode` for the APIs, an optional `cause`
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
  /** One sentence for the error reference (docs/reference/errors.md): when it happens and what to do. */
  description: string;
}

export type ErrorFactory = (message: string, options?: MarinaErrorOptions) => MarinaError;

/**
 * Declares a package's error codes in one place. Returns a factory per code and the
 * definitions themselves, so a test can check each code is unique and documented.
 * `aliases` keeps a merged code's old name working: its factory creates the code it was merged
 * into, and the error reference lists it as an alias of that code.
 *
 * @example
 * const errors = defineErrors({ MARINA_ERR_QUEUE_FULL: { statusCode: 503, description: '...' } });
 * throw errors.create.MARINA_ERR_QUEUE_FULL("model 'resnet' queue is full (100 jobs)");
 */
export function defineErrors<
  const T extends Record<string, ErrorDefinition>,
  const A extends Record<string, keyof T & string> = Record<never, never>,
>(
  definitions: T,
  options: { aliases?: A } = {},
): { definitions: T; aliases: A; create: { [K in keyof T | keyof A]: ErrorFactory } } {
  const create = {} as { [K in keyof T | keyof A]: ErrorFactory };
  const aliases = options.aliases ?? ({} as A);
  for (const code of [...Object.keys(definitions), ...Object.keys(aliases)]) {
    if (!/^MARINA_ERR_[A-Z0-9_]+$/.test(code)) throw new Error(`error code '${code}' must match MARINA_ERR_[A-Z0-9_]+`);
  }
  for (const code of Object.keys(definitions) as (keyof T & string)[]) {
    const { statusCode } = definitions[code]!;
    create[code] = (message, options) => new MarinaError(code, message, statusCode, options);
  }
  for (const [alias, code] of Object.entries(aliases) as [keyof A & string, keyof T & string][]) {
    if (alias in definitions) throw new Error(`error code '${alias}' cannot be both a code and an alias`);
    if (!(code in definitions)) throw new Error(`alias '${alias}' names '${code}', which is not defined`);
    create[alias] = create[code];
  }
  return { definitions, aliases, create };
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
