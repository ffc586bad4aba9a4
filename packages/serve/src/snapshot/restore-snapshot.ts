/**
 * Bringing a config snapshot back at start-up, and what goes into one besides the models.
 *
 * TorchServe's rule: when the config file read carries `model_snapshot` (the newest snapshot,
 * read when no --ts-config or TS_CONFIG_FILE is given and --ncs is not, or a snapshot file named
 * with --ts-config), every model version in it is registered again with its archive, default
 * version, min/max workers, batchSize, maxBatchDelay and responseTimeout, and `load_models` /
 * --models are not loaded. A --ts-config without `model_snapshot` restores nothing.
 */
import { access, readFile } from 'node:fs/promises';
import { isAbsolute, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { snapshotErrors } from './snapshot-errors.ts';
import { parseProperties } from '../config/properties-parser.ts';
import type { RegisterModelOptions } from '../registry/model-registry-api.ts';
import type { Snapshot } from './snapshot-store.ts';

/** One model version to register again, with where it came from for messages. */
export interface SnapshotRegistration extends RegisterModelOptions {
  modelName: string;
  /** The version recorded in the snapshot (the archive decides the version actually registered). */
  snapshotVersion: string;
  /** When a request last reached it before the snapshot (ISO 8601): under a budget the most recently used load first. */
  lastUsed?: string;
}

/**
 * Where a snapshot entry's archive is now: a file:// URL as its path, an http(s) URL as the
 * copy downloaded into the store (`marName`), an absolute path as is, anything else in the store.
 */
function snapshotArchivePath(entry: { url: string; marName: string }, modelStore: string | undefined): string {
  const { url, marName } = entry;
  if (/^file:\/\//i.test(url)) return fileURLToPath(url);
  const inStore = (name: string) => (modelStore === undefined ? resolve(name) : join(modelStore, name));
  if (/^https?:\/\//i.test(url)) return inStore(marName);
  if (isAbsolute(url)) return url;
  return inStore(url || marName);
}

/**
 * The registrations that bring `snapshot` back: every version, default versions flagged, worker
 * range, batching and timeout as recorded. Workers start at `minWorkers` (the autoscaler then
 * moves them within [min, max] as load requires).
 */
export function registrationsFromSnapshot(
  snapshot: Pick<Snapshot, 'models' | 'modelStore'>,
  options: { modelStore: string | undefined },
): SnapshotRegistration[] {
  const modelStore = options.modelStore ?? snapshot.modelStore;
  const registrations: SnapshotRegistration[] = [];
  for (const [modelName, versions] of Object.entries(snapshot.models)) {
    for (const [snapshotVersion, entry] of Object.entries(versions)) {
      const url = entry.url || entry.marName;
      registrations.push({
        modelName,
        snapshotVersion,
        url,
        archivePath: snapshotArchivePath({ url, marName: entry.marName }, modelStore),
        isDefault: entry.defaultVersion,
        minWorkers: entry.minWorkers,
        maxWorkers: entry.maxWorkers,
        batchSize: entry.batchSize,
        maxBatchDelayMs: entry.maxBatchDelay,
        responseTimeoutSec: entry.responseTimeout,
        ...(typeof entry.startupTimeout === 'number' && entry.startupTimeout > 0
          ? { startupTimeoutSec: entry.startupTimeout }
          : {}),
        isDownloaded: /^https?:\/\//i.test(url),
        loadedAtStartup: true,
        synchronous: true,
        ...(entry.pinned === true ? { pinned: true } : {}),
        ...(typeof entry.idleUnloadSeconds === 'number' ? { idleUnloadSeconds: entry.idleUnloadSeconds } : {}),
        ...(typeof entry.lastUsed === 'string' ? { lastUsed: entry.lastUsed } : {}),
      });
    }
  }
  return registrations;
}

/** Keys of the config file that are not copied into snapshots: the models come from `model_snapshot`. */
const KEYS_NOT_COPIED = new Set(['model_snapshot', 'load_models', 'model_store']);

/**
 * The config file's own keys, as written (before `$$VAR$$` substitution, so secrets stay in the
 * environment), for the snapshot: a start without a config file then reads the snapshot as
 * config.properties (TorchServe's order) and gets the same addresses, limits and security
 * settings. `load_models` is left out (the snapshot's models replace it), and so are launcher
 * flags (`--disable-token-auth` in one start must not turn auth off for every later start).
 */
export async function snapshotPropertiesFromConfigFile(
  configFile: string | undefined,
): Promise<Record<string, string>> {
  if (configFile === undefined) return {};
  const parsed = parseProperties(await readFile(configFile, 'utf8'), { filePath: configFile });
  const properties: Record<string, string> = {};
  for (const entry of parsed.entries) {
    if (KEYS_NOT_COPIED.has(entry.key) || entry.value.trim() === '') continue;
    properties[entry.key] = entry.value;
  }
  return properties;
}

/**
 * TorchServe's check before it restores a snapshot (SnapshotManager.validate): every version's
 * archive must be there, else the start stops with its InvalidSnapshotException and its text
 * (the misspelling is TorchServe's own). Marina checks the path it would load, which for a
 * downloaded or store archive is TorchServe's `<model_store>/<marName>`.
 * @throws MARINA_ERR_SNAPSHOT_ARCHIVE_MISSING for the first version whose archive is gone.
 */
export async function assertSnapshotArchivesExist(registrations: readonly SnapshotRegistration[]): Promise<void> {
  for (const registration of registrations) {
    const exists = await access(registration.archivePath).then(
      () => true,
      () => false,
    );
    if (!exists)
      throw snapshotErrors.create.MARINA_ERR_SNAPSHOT_ARCHIVE_MISSING(
        `Correspoding mar file for model :${registration.modelName}, version :${registration.snapshotVersion} not found in model store`,
        { details: { modelName: registration.modelName, modelVersion: registration.snapshotVersion } },
      );
  }
}
