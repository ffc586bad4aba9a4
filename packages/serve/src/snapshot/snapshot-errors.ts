import { defineErrors } from '@marina/errors';

/** Error codes of config snapshots (listed in docs/reference/errors.md). */
export const snapshotErrors = defineErrors({
  MARINA_ERR_SNAPSHOT_WRITE_FAILED: {
    statusCode: 500,
    description:
      'A config snapshot could not be written; the previous snapshot stays in force. Check that the snapshot folder is writable and the disk is not full.',
  },
  MARINA_ERR_SNAPSHOT_ARCHIVE_MISSING: {
    statusCode: 500,
    description:
      "The snapshot names a model archive that is not there, so the server does not start (TorchServe's InvalidSnapshotException, with its text). Put the archive back in the model store, set snapshot_skip_missing_archives=true to start without that model, or start with --ncs to ignore snapshots.",
  },
  MARINA_ERR_SNAPSHOT_INVALID: {
    statusCode: 500,
    description:
      'A snapshot file is truncated or not in the expected form; restore skips it and uses the previous one.',
  },
});
