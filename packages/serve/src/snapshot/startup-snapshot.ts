import { readFile } from 'node:fs/promises';
import type { MarinaApp } from '../app.ts';
import { deepFreeze } from '../config/load-config.ts';
import type { ServerConfig } from '../config/server-config.ts';
import { startOpenedModels } from '../startup-loading.ts';
import {
  assertSnapshotArchivesExist,
  registrationsFromSnapshot,
  type SnapshotRegistration,
} from './restore-snapshot.ts';
import { listSnapshots, parseSnapshot, readLatestSnapshot, type Snapshot } from './snapshot-store.ts';

type Log = (level: 'info' | 'warn' | 'error', message: string) => void;

/** The snapshot a start restores, if any, and whether the snapshots on disk must be left as they are. */
export interface StartupSnapshot {
  snapshot: Snapshot | undefined;
  /** The snapshot's model versions to register again. */
  registrations: SnapshotRegistration[];
  /**
   * True when the snapshot folder holds snapshots this start could not use: writing one now would
   * put a model-less snapshot on top of them.
   */
  isKept: boolean;
}

/**
 * Finds what a start restores: the snapshot the config file carries (a snapshot chosen by
 * loadConfig, or one named with --ts-config). A start that looked in the snapshot folder reports
 * each newer snapshot it skipped as corrupt, into `warnings`, and never buries unusable snapshots
 * under a new one.
 *
 * @throws the snapshot errors of a missing archive, unless snapshot_skip_missing_archives.
 */
export async function readStartupSnapshot(options: {
  config: ServerConfig;
  log: Log;
  warnings: string[];
}): Promise<StartupSnapshot> {
  const { config, log, warnings } = options;
  const isSnapshotFolderRead =
    config.isSnapshotEnabled &&
    config.configFileOrigin !== 'TS_CONFIG_FILE' &&
    config.configFileOrigin !== '--ts-config';
  const usable = isSnapshotFolderRead
    ? await readLatestSnapshot(config.snapshotDir, { onWarning: (message) => warnings.push(message) }).catch(
        () => undefined,
      )
    : undefined;
  const snapshot = await snapshotOfConfigFile(config.configFile, log);
  const registrations = snapshot ? registrationsFromSnapshot(snapshot, { modelStore: config.modelStore }) : [];
  // TorchServe stops a start whose snapshot names a missing archive; Marina's lenient start is asked for.
  if (!config.snapshotSkipMissingArchives) {
    await assertSnapshotArchivesExist(registrations).catch((error: Error) => {
      log(
        'error',
        `${error.message} (snapshot ${snapshot?.path}): put the archive back in the model store, set snapshot_skip_missing_archives=true to start without that model, or start with --ncs to ignore snapshots`,
      );
      throw error;
    });
  }
  const snapshotFiles = isSnapshotFolderRead ? await listSnapshots(config.snapshotDir).catch(() => []) : [];
  const isKept = snapshotFiles.length > 0 && usable === undefined;
  if (isKept)
    warnings.push(
      `none of the ${snapshotFiles.length} snapshot files in ${config.snapshotDir} could be read, so no model was restored; they are left as they are (no snapshot is written until the models change through the management API). Fix or remove them, or start with --ncs to ignore snapshots`,
    );
  return { snapshot, registrations, isKept };
}

/**
 * The snapshot's traffic policies, once their versions are back; a policy whose versions did not
 * all come back is reported in `warnings` and left out (100 % to the default version).
 */
export function restoreTrafficPolicies(options: {
  app: MarinaApp;
  snapshot: Snapshot | undefined;
  warnings: string[];
}): void {
  for (const [modelName, policy] of Object.entries(options.snapshot?.traffic ?? {})) {
    try {
      options.app.registry.setTrafficPolicy(modelName, policy);
    } catch (error) {
      options.warnings.push(
        `the snapshot's traffic policy of model '${modelName}' was not restored: ${(error as Error).message}`,
      );
    }
  }
}

/**
 * Opens every model version of the snapshot (so the thread split counts their workers with the
 * load_models ones), and returns `start` to start their workers once load_models are opened too.
 * A version that cannot come back (archive gone, workers fail) is reported, the others go on.
 */
export async function restoreSnapshotModels(
  app: MarinaApp,
  registrations: SnapshotRegistration[],
  snapshotPath: string | undefined,
) {
  const loaded: string[] = [];
  const failed: string[] = [];
  const describeFailure = (r: SnapshotRegistration, error: unknown) =>
    `${r.url} (model ${r.modelName} version ${r.snapshotVersion} from snapshot ${snapshotPath}): ${(error as { code?: string }).code ?? 'MARINA_ERR_INTERNAL'}: ${(error as Error).message}`;
  const opened: Array<{
    registration: SnapshotRegistration;
    version: Awaited<ReturnType<MarinaApp['registry']['open']>>;
  }> = [];
  for (const registration of registrations) {
    try {
      opened.push({ registration, version: await app.registry.open(registration) });
    } catch (error) {
      failed.push(describeFailure(registration, error));
    }
  }
  return {
    loaded,
    failed,
    async start(): Promise<void> {
      // Under a budget, pinned versions first, then the most recently used: those are what fits.
      const lastUsed = (r: SnapshotRegistration) => (r.lastUsed ? Date.parse(r.lastUsed) || 0 : 0);
      const ordered =
        app.registry.memoryBudgetBytes === undefined
          ? opened
          : [...opened].sort(
              (a, b) =>
                Number(b.registration.pinned === true) - Number(a.registration.pinned === true) ||
                lastUsed(b.registration) - lastUsed(a.registration),
            );
      const byVersion = new Map(ordered.map((o) => [o.version, o.registration]));
      for (const { registration, version } of ordered)
        if (registration.lastUsed) version.lastUsedAt = lastUsed(registration) || undefined;
      await startOpenedModels({
        registry: app.registry,
        versions: ordered.map((o) => o.version),
        reason: 'startup',
        log: (level, message) => app.inference.log[level](message),
        onDone: (version, outcome) => {
          if (outcome.outcome === 'failed') failed.push(describeFailure(byVersion.get(version)!, outcome.error));
          else loaded.push(`${version.modelName} (version ${version.modelVersion})`);
        },
      });
    },
  };
}

/**
 * The snapshot a config file carries in its `model_snapshot` key (a snapshot chosen as the config
 * file, or one named with --ts-config, in Marina's or TorchServe's own format), else undefined.
 */
async function snapshotOfConfigFile(
  configFile: string | undefined,
  log: (level: 'warn', message: string) => void,
): Promise<Snapshot | undefined> {
  if (configFile === undefined) return undefined;
  let text: string;
  try {
    text = await readFile(configFile, 'utf8');
  } catch {
    return undefined; // loadConfig has read it already; a file gone since then holds no snapshot.
  }
  if (!/^\s*model_snapshot\s*[=:\s]/m.test(text)) return undefined;
  try {
    return parseSnapshot(configFile, text);
  } catch (error) {
    log('warn', `${(error as Error).message}; no models were restored`);
    return undefined;
  }
}

/** The configuration without load_models: a restored snapshot replaces them (TorchServe ignores --models then). */
export function withoutStartupModels(
  config: ServerConfig,
  log: (level: 'info', message: string) => void,
): ServerConfig {
  if (config.loadModels !== 'all' && config.loadModels.length === 0) return config;
  log(
    'info',
    `load_models/--models are not loaded: the models of the snapshot in ${config.configFile} are restored instead (TorchServe's rule)`,
  );
  return deepFreeze({ ...config, loadModels: [] });
}
