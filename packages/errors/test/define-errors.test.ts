import { describe, expect, it } from 'vitest';
import { defineErrors, isMarinaError, MarinaError } from '../src/index.ts';

describe('defineErrors', () => {
  const errors = defineErrors({
    MARINA_ERR_EXAMPLE_FULL: { statusCode: 503, description: 'The example is full; retry later.' },
  });

  it('creates errors that carry the code, the status, the cause and the details', () => {
    const cause = new Error('disk');
    const error = errors.create.MARINA_ERR_EXAMPLE_FULL("queue 'x' is full (2 waiting)", {
      cause,
      details: { size: 2 },
    });
    expect(error).toBeInstanceOf(MarinaError);
    expect(error).toMatchObject({
      code: 'MARINA_ERR_EXAMPLE_FULL',
      statusCode: 503,
      message: "queue 'x' is full (2 waiting)",
      details: { size: 2 },
    });
    expect(error.cause).toBe(cause);
    expect(error.toJSON()).toEqual({
      code: 'MARINA_ERR_EXAMPLE_FULL',
      message: "queue 'x' is full (2 waiting)",
      details: { size: 2 },
    });
  });

  it('keeps a merged code working under its old name: the alias creates the code it was merged into', () => {
    const merged = defineErrors(
      { MARINA_ERR_EXAMPLE_BAD: { statusCode: 400, description: 'The example request is malformed.' } },
      { aliases: { MARINA_ERR_EXAMPLE_OLD_BAD: 'MARINA_ERR_EXAMPLE_BAD' } },
    );
    expect(merged.create.MARINA_ERR_EXAMPLE_OLD_BAD('bad')).toMatchObject({
      code: 'MARINA_ERR_EXAMPLE_BAD',
      statusCode: 400,
    });
    expect(merged.aliases).toEqual({ MARINA_ERR_EXAMPLE_OLD_BAD: 'MARINA_ERR_EXAMPLE_BAD' });
    expect(() =>
      defineErrors(
        { MARINA_ERR_EXAMPLE_BAD: { statusCode: 400, description: 'x' } },
        { aliases: { MARINA_ERR_EXAMPLE_OTHER: 'MARINA_ERR_EXAMPLE_MISSING' as 'MARINA_ERR_EXAMPLE_BAD' } },
      ),
    ).toThrow(/not defined/);
  });

  it('refuses a code that does not follow MARINA_ERR_*', () => {
    expect(() => defineErrors({ QUEUE_FULL: { statusCode: 503, description: 'no prefix' } })).toThrow(/MARINA_ERR_/);
  });

  it('recognises Marina errors, also when they crossed a thread as plain objects', () => {
    expect(isMarinaError(errors.create.MARINA_ERR_EXAMPLE_FULL('x'))).toBe(true);
    expect(isMarinaError({ name: 'MarinaError', code: 'MARINA_ERR_EXAMPLE_FULL', message: 'x' })).toBe(true);
    expect(isMarinaError(new Error('plain'))).toBe(false);
  });
});
