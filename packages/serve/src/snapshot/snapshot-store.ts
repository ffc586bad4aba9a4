/**
 * Config snapshots in TorchServe's form: `<snapshotDir>/<yyyyMMddHHmmssSSS>-<kind>.cfg` (kind
 * `startup` once the server is up, `snapshot` after every change, `shutdown` on a graceful stop), a
 * config.properties file whose `model_snapshot` key holds
 * `{"name","modelCount","created","models":{name:{version:{defaultVersion,marName,minWorkers,...}}},"marina":{...}}`:
 * TorchServe's entry fields exactly, Marina's extras (url, pinned, traffic policies) under `marina`.
 * Written after every `changed` event, atomically (temp file in the same folder, fsync, rename,
 * fsync of the folder): a crash mid-write leaves the previous snapshot intact.
 */
import { randomBytes } from 'node:crypto';
import { mkdir, open, readdir, readFile, rename, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { parse as parseProperties, stringify as stringifyProperties } from 'dot-properties';
import type { ModelRegistryApi, SnapshotModelVersion } from '../registry/model-registry-api.ts';
import { snapshotErrors } from './snapshot-errors.ts';
import { TRAFFIC_KEY } from '../config/models-json.ts';
import { parseTrafficPolicy, type TrafficPolicy } from '../registry/traffic-policy.ts';

/**
 * A version entry's fields as TorchServe writes them (wlm/Model.java getModelState), in its order:
 * what TorchServe itself reads back. Marina's own fields go under the top-level `marina` key, which
 * TorchServe's Gson reader ignores (so TorchServe can restore a Marina snapshot and the reverse).
 */
const TORCHSERVE_ENTRY_FIELDS = [
  'defaultVersion',
  'marName',
  'minWorkers',
  'maxWorkers',
  'batchSize',
  'maxBatchDelay',
  'responseTimeout',
  'startupTimeout',
  'runtimeType',
] as const;

/** The top-level key of Marina's extras in `model_snapshot`: per-version fields and the traffic policies. */
const MARINA_SNAPSHOT_KEY = 'marina';

/** Matches snapshot file names; anything else in the folder (temp files start with '.') is ignored. */
export const SNAPSHOT_FILE_PATTERN = /^(\d{17})-(snapshot|startup|shutdown)\.cfg$/;

/** TorchServe's three snapshot kinds, the suffix of the file name. */
type SnapshotKind = 'snapshot' | 'startup' | 'shutdown';

export type SnapshotModels = Record<string, Record<string, SnapshotModelVersion>>;

/** What `readLatestSnapshot` returns. */
export interface Snapshot {
  /** Absolute path of the file read. */
  path: string;
  /** Epoch ms when it was written. */
  createdMs: number;
  /** `model_store` recorded in the snapshot, when there was one. */
  modelStore: string | undefined;
  models: SnapshotModels;
  /** Traffic policies by model name (the models' `$traffic` entries), checked. */
  traffic: Record<string, TrafficPolicy>;
  /** Every key of the file (including model_snapshot), for a config loader that treats it as config.properties. */
  properties: Record<string, string>;
}

/** `yyyyMMddHHmmssSSS` in UTC, TorchServe's snapshot name stamp. */
function formatSnapshotTimestamp(epochMs: number): string {
  return new Date(epochMs).toISOString().replace(/[-:TZ.]/g, '');
}

function isVersionEntry(value: unknown): value is SnapshotModelVersion {
  if (typeof value !== 'object' || value === null) return false;
  const v = value as Record<string, unknown>;
  return (
    typeof v.marName === 'string' &&
    typeof v.defaultVersion === 'boolean' &&
    ['minWorkers', 'maxWorkers', 'batchSize', 'maxBatchDelay', 'responseTimeout'].every((k) => typeof v[k] === 'number')
  );
}

/** Parses one snapshot file; throws MARINA_ERR_SNAPSHOT_INVALID when it is truncated or malformed. */
export function parseSnapshot(path: string, text: string): Snapshot {
  const invalid = (why: string) =>
    snapshotErrors.create.MARINA_ERR_SNAPSHOT_INVALID(`snapshot '${path}' is unusable: ${why}`);
  const properties = parseProperties(text) as Record<string, string>;
  const raw = properties.model_snapshot;
  if (typeof raw !== 'string') throw invalid('it has no model_snapshot key');
  let json: unknown;
  try {
    json = JSON.parse(raw);
  } catch (cause) {
    throw invalid(`model_snapshot is not complete JSON (${(cause as Error).message})`);
  }
  const snap = json as { modelCount?: unknown; created?: unknown; models?: unknown; [MARINA_SNAPSHOT_KEY]?: unknown };
  if (typeof snap !== 'object' || snap === null || typeof snap.models !== 'object' || snap.models === null)
    throw invalid('model_snapshot has no "models" object');
  const models = snap.models as Record<string, Record<string, unknown>>;
  const traffic: Record<string, TrafficPolicy> = {};
  const extras = (snap[MARINA_SNAPSHOT_KEY] ?? {}) as {
    models?: Record<string, Record<string, Record<string, unknown>>>;
    traffic?: Record<string, unknown>;
  };
  for (const [name, policy] of Object.entries(extras.traffic ?? {})) {
    try {
      traffic[name] = parseTrafficPolicy(policy, `${MARINA_SNAPSHOT_KEY} > traffic > '${name}'`);
    } catch (error) {
      throw invalid((error as Error).message);
    }
  }
  for (const [name, versions] of Object.entries(extras.models ?? {}))
    for (const [version, own] of Object.entries(versions ?? {})) {
      const entry = models[name]?.[version];
      if (entry && typeof entry === 'object' && own && typeof own === 'object')
        models[name]![version] = { ...own, ...(entry as Record<string, unknown>) };
    }
  let count = 0;
  for (const [name, versions] of Object.entries(models)) {
    if (typeof versions !== 'object' || versions === null) throw invalid(`model '${name}' has no versions object`);
    if (versions[TRAFFIC_KEY] !== undefined) {
      try {
        traffic[name] = parseTrafficPolicy(versions[TRAFFIC_KEY], `model '${name}' ${TRAFFIC_KEY}`);
      } catch (error) {
        throw invalid((error as Error).message);
      }
      const { [TRAFFIC_KEY]: _policy, ...only } = versions;
      models[name] = only;
    }
    for (const [version, entry] of Object.entries(models[name]!)) {
      if (!isVersionEntry(entry))
        throw invalid(`model '${name}' version '${version}' lacks marName, defaultVersion or worker settings`);
      count++;
    }
  }
  if (typeof snap.modelCount === 'number' && snap.modelCount !== count)
    throw invalid(`modelCount is ${snap.modelCount} but ${count} versions are listed`);
  return {
    path,
    createdMs: typeof snap.created === 'number' ? snap.created : 0,
    modelStore: properties.model_store,
    models: models as SnapshotModels,
    traffic,
    properties,
  };
}

/** Snapshot files in `snapshotDir`, newest first. */
export async function listSnapshots(snapshotDir: string): Promise<string[]> {
  let names: string[];
  try {
    names = await readdir(snapshotDir);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw error;
  }
  // By timestamp (the first 17 characters), not by whole name: `-startup` must not sort after a later `-snapshot`.
  return names
    .filter((n) => SNAPSHOT_FILE_PATTERN.test(n))
    .sort((a, b) => (a.slice(0, 17) === b.slice(0, 17) ? 0 : a.slice(0, 17) < b.slice(0, 17) ? 1 : -1))
    .map((n) => join(snapshotDir, n));
}

/**
 * The newest usable snapshot in `snapshotDir`, or undefined when there is none. A truncated or
 * corrupt file is skipped with a warning and the one before it is used.
 */
export async function readLatestSnapshot(
  snapshotDir: string,
  options: { onWarning?: (message: string) => void } = {},
): Promise<Snapshot | undefined> {
  for (const path of await listSnapshots(snapshotDir)) {
    try {
      return parseSnapshot(path, await readFile(path, 'utf8'));
    } catch (error) {
      options.onWarning?.(`${(error as Error).message}; trying the previous snapshot`);
    }
  }
  return undefined;
}

/** Renders the snapshot file text. `properties` are written first, `model_snapshot` last. */
export function renderSnapshot(options: {
  name: string;
  createdMs: number;
  models: SnapshotModels;
  /** Traffic policies by model name, written as each model's `$traffic` entry. */
  traffic?: Record<string, TrafficPolicy>;
  modelStore?: string;
  properties?: Record<string, string>;
}): string {
  const modelCount = Object.values(options.models).reduce((n, versions) => n + Object.keys(versions).length, 0);
  const lines: (string | [string, string])[] = [
    `Marina config snapshot, written ${new Date(options.createdMs).toISOString()}`,
  ];
  const properties = { ...options.properties };
  delete properties.model_snapshot;
  if (options.modelStore !== undefined) properties.model_store = options.modelStore;
  for (const [key, value] of Object.entries(properties)) lines.push([key, value]);
  // TorchServe's fields in `models`, Marina's own beside them under `marina` (see TORCHSERVE_ENTRY_FIELDS).
  const models: Record<string, Record<string, Record<string, unknown>>> = {};
  const own: Record<string, Record<string, Record<string, unknown>>> = {};
  for (const [name, versions] of Object.entries(options.models)) {
    for (const [version, entry] of Object.entries(versions)) {
      const torchServe: Record<string, unknown> = {};
      const marina: Record<string, unknown> = {};
      for (const field of TORCHSERVE_ENTRY_FIELDS) if (entry[field] !== undefined) torchServe[field] = entry[field];
      for (const [key, value] of Object.entries(entry))
        if (!(TORCHSERVE_ENTRY_FIELDS as readonly string[]).includes(key) && value !== undefined) marina[key] = value;
      models[name] ??= {};
      models[name][version] = torchServe;
      if (Object.keys(marina).length > 0) {
        own[name] ??= {};
        own[name][version] = marina;
      }
    }
  }
  const traffic = Object.fromEntries(Object.entries(options.traffic ?? {}).filter(([name]) => models[name]));
  const extras = {
    ...(Object.keys(own).length > 0 ? { models: own } : {}),
    ...(Object.keys(traffic).length > 0 ? { traffic } : {}),
  };
  lines.push([
    'model_snapshot',
    JSON.stringify({
      name: options.name,
      modelCount,
      created: options.createdMs,
      models,
      ...(Object.keys(extras).length > 0 ? { [MARINA_SNAPSHOT_KEY]: extras } : {}),
    }),
  ]);
  return `${stringifyProperties(lines, { keySep: '=', lineWidth: null, latin1: false })}\n`;
}

export interface SnapshotStoreOptions {
  registry: ModelRegistryApi;
  snapshotDir: string;
  modelStore?: string;
  /** Extra config.properties keys copied into every snapshot (e.g. the server's own settings). */
  properties?: Record<string, string>;
  /** Wait after a `changed` event before writing, so a burst of changes makes one file. Default 50 ms. */
  debounceMs?: number;
  /** Snapshots kept; older ones are deleted. Default 10. */
  keep?: number;
  /** Called when a write fails (the server keeps serving; the previous snapshot stays). */
  onError?: (error: Error) => void;
  /** Epoch ms; injectable for tests. */
  now?: () => number;
}

export interface SnapshotStore {
  /** Writes a snapshot now (waits for one in progress first), named `<timestamp>-<kind>.cfg` (default `snapshot`). Returns its path. */
  write(kind?: SnapshotKind): Promise<string>;
  /**
   * Writes any pending change now and resolves with the error of the latest write when it failed
   * (MARINA_ERR_SNAPSHOT_WRITE_FAILED), undefined when the state on disk is current. Never rejects.
   * The management routes call it after each change, so a snapshot that cannot be written
   * (disk full, folder gone) is reported to the caller who changed the state.
   */
  settle(): Promise<Error | undefined>;
  /**
   * Holds the debounced writes until the returned release is called (idempotent), so that one
   * management call writes one snapshot, as TorchServe, however many changes it makes (register,
   * then its workers up). Changes made meanwhile are written by `settle`/`flush`, or after the
   * last release.
   */
  hold(): () => void;
  /** Writes any pending change, and waits for any running write to finish. */
  flush(): Promise<void>;
  /** Flushes, then stops listening to `changed`. */
  close(): Promise<void>;
}

/** Writes `text` to `path` so that `path` holds either the old or the complete new content. */
async function writeAtomically(dir: string, path: string, text: string): Promise<void> {
  const temp = join(dir, `.snapshot-${process.pid}-${randomBytes(4).toString('hex')}.tmp`);
  try {
    const file = await open(temp, 'wx', 0o600);
    try {
      await file.writeFile(text, 'utf8');
      await file.sync();
    } finally {
      await file.close();
    }
    await rename(temp, path);
  } catch (error) {
    await unlink(temp).catch(() => undefined);
    throw error;
  }
  // fsync the folder so the rename itself survives a power cut.
  const folder = await open(dir, 'r');
  try {
    await folder.sync();
  } catch {
    // Some file systems refuse fsync on directories; the rename is still atomic.
  } finally {
    await folder.close();
  }
}

/**
 * Subscribes to `registry.events` `changed` and writes a snapshot after each change (debounced).
 * Also removes temp files left by a crash during an earlier write.
 */
export function createSnapshotStore(options: SnapshotStoreOptions): SnapshotStore {
  const { registry, snapshotDir } = options;
  const debounceMs = options.debounceMs ?? 50;
  const keep = Math.max(1, options.keep ?? 10);
  const now = options.now ?? Date.now;
  let lastStamp = '';
  let timer: NodeJS.Timeout | undefined;
  let running: Promise<unknown> = Promise.resolve();
  let isDirty = false;
  let isClosed = false;
  let holds = 0;
  /** The error of the latest write, cleared by the next successful one. */
  let lastError: Error | undefined;

  // Also surfaced through flush()/write(): an unwritable folder must not be an unhandled rejection.
  const ready = (async () => {
    await mkdir(snapshotDir, { recursive: true });
    for (const name of await readdir(snapshotDir)) {
      if (name.startsWith('.snapshot-') && name.endsWith('.tmp'))
        await unlink(join(snapshotDir, name)).catch(() => undefined);
    }
  })();
  ready.catch(() => undefined);

  const writeOnce = async (kind: SnapshotKind): Promise<string> => {
    try {
      await ready;
    } catch (cause) {
      throw snapshotErrors.create.MARINA_ERR_SNAPSHOT_WRITE_FAILED(
        `cannot prepare the snapshot folder '${snapshotDir}': ${(cause as Error).message}`,
        { cause },
      );
    }
    const createdMs = now();
    let stamp = formatSnapshotTimestamp(createdMs);
    // Two writes in one millisecond must not share a name: newest-first ordering depends on it.
    if (stamp <= lastStamp) stamp = String(BigInt(lastStamp) + 1n);
    lastStamp = stamp;
    const name = `${stamp}-${kind}.cfg`;
    const path = join(snapshotDir, name);
    const text = renderSnapshot({
      name,
      createdMs,
      models: registry.snapshot(),
      traffic: registry.trafficPolicies(),
      modelStore: options.modelStore,
      properties: options.properties,
    });
    try {
      await writeAtomically(snapshotDir, path, text);
    } catch (cause) {
      throw snapshotErrors.create.MARINA_ERR_SNAPSHOT_WRITE_FAILED(
        `cannot write snapshot '${path}': ${(cause as Error).message}`,
        { cause },
      );
    }
    const all = await listSnapshots(snapshotDir);
    for (const old of all.slice(keep)) await unlink(old).catch(() => undefined);
    return path;
  };

  const recordedWrite = async (kind: SnapshotKind): Promise<string> => {
    try {
      const path = await writeOnce(kind);
      lastError = undefined;
      return path;
    } catch (error) {
      lastError = error as Error;
      throw error;
    }
  };

  const write = (kind: SnapshotKind = 'snapshot'): Promise<string> => {
    isDirty = false;
    const next = running.then(
      () => recordedWrite(kind),
      () => recordedWrite(kind),
    );
    running = next.catch(() => undefined);
    return next;
  };

  const schedule = (): void => {
    if (timer || holds > 0 || isClosed) return;
    timer = setTimeout(() => {
      timer = undefined;
      write().catch((error: Error) => options.onError?.(error));
    }, debounceMs);
  };
  const onChanged = (): void => {
    if (isClosed) return;
    isDirty = true;
    schedule();
  };
  registry.events.on('changed', onChanged);

  const flush = async (): Promise<void> => {
    if (timer) {
      clearTimeout(timer);
      timer = undefined;
    }
    if (isDirty) await write().catch((error: Error) => options.onError?.(error));
    await running;
    await ready.catch((error: Error) => options.onError?.(error));
  };

  return {
    write,
    hold() {
      holds++;
      let isReleased = false;
      return () => {
        if (isReleased) return;
        isReleased = true;
        holds--;
        if (isDirty) schedule();
      };
    },
    flush,
    async settle() {
      await flush();
      return lastError;
    },
    async close() {
      isClosed = true;
      registry.events.off('changed', onChanged);
      await flush();
    },
  };
}
