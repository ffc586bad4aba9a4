import { isMarinaError, type MarinaError } from '@marina/errors';

/** The MarinaError a promise rejects with; fails the test when it resolves or rejects with anything else. */
export async function marinaErrorOf(promise: Promise<unknown>): Promise<MarinaError> {
  const error = await promise.then(
    () => undefined,
    (caught: unknown) => caught,
  );
  if (!isMarinaError(error)) throw new Error(`expected a MarinaError, got ${String(error)}`);
  return error;
}
