import { defineErrors } from '@marina/errors';

/** Error codes of config snapshots (listed in docs/reference/errors.md). */
export const snapshotErrors = defineErrors({
  MARINA_ERR_SNAPSHOT_WRITE_FAILED: {
    statusCode: 500,
    description:
      'A config snapshot could not be written; the previous snapshot stays in force. Check that the snapshot folder is writable and the disk is not full.',
  },
  MARINA_ERR_SNAPSHOT_INVALID: {
    statusCode: 500,
    description:
      'A snapshot file is truncated or not in the expected form; restore skips it and uses the previous one.',
  },
});
