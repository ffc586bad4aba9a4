import { createError } from './errors.ts';

/** Checks an optional integer option and returns it or its default. */
export function integerOption(
  name: string,
  value: unknown,
  defaultValue: number,
  min: number,
  max = Number.MAX_SAFE_INTEGER,
): number {
  if (value === undefined) return defaultValue;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    throw createError.MARINA_ERR_MODEL_ZOO_INVALID_OPTION(
      `option '${name}' is ${JSON.stringify(value)}; it must be an integer from ${min} to ${max}`,
      { details: { option: name, value } },
    );
  }
  return value;
}

/** Checks a required non-empty string option. */
export function pathOption(name: string, value: unknown): string {
  if (typeof value !== 'string' || value.length === 0) {
    throw createError.MARINA_ERR_MODEL_ZOO_INVALID_OPTION(
      `option '${name}' is ${JSON.stringify(value)}; it must be a non-empty file path`,
      { details: { option: name, value } },
    );
  }
  return value;
}

/** Seeds are 32-bit unsigned integers: the generator's state is 32-bit. */
export function seedOption(value: unknown, defaultValue: number): number {
  return integerOption('seed', value, defaultValue, 0, 0xffffffff);
}

/** Checks a required integer option. */
export function requiredIntegerOption(
  name: string,
  value: unknown,
  min: number,
  max = Number.MAX_SAFE_INTEGER,
): number {
  return integerOption(name, value === undefined ? 'missing' : value, min, min, max);
}
