import type { Dirent } from 'node:fs';
import { stat } from 'node:fs/promises';
import { readdir } from 'node:fs/promises';
import { isAbsolute, join, normalize, resolve } from 'node:path';
import { resolveInside } from '@marina/archive';
import type { MarinaError } from '@marina/errors';
import type { LoadModelSpec, ServerConfig } from './config/server-config.ts';
import { createServeError, toMarinaError } from './errors.ts';
import { normaliseModelUrl } from './model-download/resolve-model-url.ts';
import type { LoadReason } from './registry/model-registry-api.ts';
import type { ModelRegistry } from './registry/model-registry.ts';
import type { ModelVersion } from './scheduling/model-version.ts';
import type { StartupProgressEvent } from './startup-progress.ts';

export interface StartupLoadResult {
  loaded: Array<{ modelName: string; modelVersion: string }>;
  /** Registered and not loaded: beyond model_memory_budget (each loads on its first request). */
  registered: Array<{ modelName: string; modelVersion: string }>;
  failed: Array<{ url: string; error: MarinaError }>;
}

const archivePattern = /\.(mar|model|tar\.gz|tgz)$/i;

/** The archives `load_models` names: `all` = every .mar/.model/.tar.gz or folder in the store. */
export async function listStartupModels(config: ServerConfig): Promise<Array<LoadModelSpec & { archivePath: string }>> {
  const specs = config.loadModels;
  if (specs !== 'all' && specs.length === 0) return [];
  const store = config.modelStore;
  if (specs === 'all') {
    if (!store)
      throw createServeError.MARINA_ERR_MODEL_STORE_MISSING(
        'load_models=all needs a model store; set model_store or --model-store',
      );
    let entries: Dirent[];
    try {
      entries = await readdir(store, { withFileTypes: true });
    } catch (error) {
      throw createServeError.MARINA_ERR_MODEL_STORE_MISSING(
        `cannot read the model store ${store}: ${(error as Error).message}`,
        { cause: error },
      );
    }
    return entries
      .filter((e) => !e.name.startsWith('.') && (e.isDirectory() || (e.isFile() && archivePattern.test(e.name))))
      .sort((a, b) => (a.name < b.name ? -1 : 1))
      .map((e) => ({ url: e.name, archivePath: join(store, e.name) }));
  }
  return specs.map((spec) => ({ ...spec, archivePath: startupArchivePath(spec.url, store) }));
}

/**
 * Where a `load_models` entry points, decoded and normalised like a register url (no encoded dot
 * segments); a relative name stays inside the model store. An entry that is refused gets an
 * empty path, so loading it fails on its own (`Model not found`) without stopping the others.
 */
function startupArchivePath(url: string, store: string | undefined): string {
  try {
    if (/^file:\/\//i.test(url)) return normaliseModelUrl(url).filePath!;
    if (isAbsolute(url)) return normalize(url);
    return store ? resolveInside(store, url, 'load_models entry') : resolve(url);
  } catch {
    return '';
  }
}

/** What became of one version `startOpenedModels` was given. */
export type StartOutcome =
  | { outcome: 'loaded' }
  | { outcome: 'registered' }
  | { outcome: 'failed'; error: MarinaError };

/**
 * Starts opened (registered) versions the way start-up does: in the order given, the ones that
 * fit model_memory_budget beside each other are loaded, at most `concurrency` at once (default:
 * the cores); the rest stay registered, each logged once, and load on their first request. Every
 * version to load is counted in the thread split before any worker starts. A version that fails
 * is removed (as a failed registration is) and reported; the others go on.
 */
export async function startOpenedModels(options: {
  registry: ModelRegistry;
  versions: ModelVersion[];
  reason: LoadReason;
  concurrency?: number;
  log: (level: 'info' | 'warn' | 'error', message: string) => void;
  onDone?: (version: ModelVersion, outcome: StartOutcome) => void;
}): Promise<Map<ModelVersion, StartOutcome>> {
  const { registry, versions, log } = options;
  const outcomes = new Map<ModelVersion, StartOutcome>();
  const budget = registry.memoryBudgetBytes;
  let planned = registry.residentBytes();
  const toLoad: ModelVersion[] = [];
  for (const version of versions) {
    if (version.settings.minWorkers === 0) {
      outcomes.set(version, { outcome: 'registered' });
      continue;
    }
    const need = version.residentBytes || version.estimatedBytes;
    if (budget !== undefined && planned + need > budget) {
      log(
        'info',
        `${version.label} is registered, not loaded: with it the models loaded at start-up would need about ${((planned + need) / 2 ** 20).toFixed(0)} MiB, more than model_memory_budget (${(budget / 2 ** 20).toFixed(0)} MiB); it loads on its first request`,
      );
      outcomes.set(version, { outcome: 'registered' });
      options.onDone?.(version, { outcome: 'registered' });
      continue;
    }
    planned += need;
    toLoad.push(version);
  }
  // Counted in the thread split before any worker starts: no worker is started with threads it must give back.
  for (const version of toLoad) version.plannedWorkers = Math.max(1, version.settings.minWorkers);
  const concurrency = Math.max(1, options.concurrency ?? registry.cpuCount);
  let next = 0;
  const runOne = async (): Promise<void> => {
    while (next < toLoad.length) {
      const version = toLoad[next++]!;
      let outcome: StartOutcome;
      try {
        const result = await registry.start(version, { synchronous: true, reason: options.reason });
        outcome = result.workersReady > 0 ? { outcome: 'loaded' } : { outcome: 'registered' };
      } catch (error) {
        outcome = { outcome: 'failed', error: toMarinaError(error) };
      }
      outcomes.set(version, outcome);
      options.onDone?.(version, outcome);
    }
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, toLoad.length) }, runOne));
  return outcomes;
}

/**
 * Loads `load_models` from the model store: every archive is opened (registered) first, then
 * loaded through startOpenedModels (in parallel up to the cores, within model_memory_budget). A
 * model that fails is logged, reported and skipped; `onProgress` hears each one start and end.
 */
export async function loadStartupModels(options: {
  registry: ModelRegistry;
  config: ServerConfig;
  log: (level: 'info' | 'warn' | 'error', message: string) => void;
  onProgress?: (event: StartupProgressEvent) => void;
}): Promise<StartupLoadResult> {
  const { registry, config, log } = options;
  const onProgress = options.onProgress ?? (() => undefined);
  const result: StartupLoadResult = { loaded: [], registered: [], failed: [] };
  let specs: Array<LoadModelSpec & { archivePath: string }>;
  try {
    specs = await listStartupModels(config);
  } catch (error) {
    result.failed.push({ url: String(config.modelStore), error: toMarinaError(error) });
    return result;
  }
  const opened = new Map<ModelVersion, { url: string; startedAt: number }>();
  for (const spec of specs) {
    let startedAt: number | undefined;
    try {
      if (/^https?:\/\//i.test(spec.url))
        throw createServeError.MARINA_ERR_MODEL_LOAD_FAILED(
          `${spec.url}: loading models from a URL at startup is not supported; download it into the model store`,
        );
      if (spec.archivePath === '')
        throw createServeError.MARINA_ERR_MODEL_LOAD_FAILED(
          `load_models entry '${spec.url}' leaves the model store or has an encoded '..'; name an archive inside the model store or an absolute path`,
        );
      const archive = await stat(spec.archivePath);
      // A FIFO or a device would hold a thread of Node's pool for ever once opened.
      if (!archive.isFile() && !archive.isDirectory())
        throw createServeError.MARINA_ERR_MODEL_LOAD_FAILED(
          `load_models entry '${spec.url}' is neither an archive file nor a model folder`,
        );
      startedAt = performance.now();
      onProgress({ phase: 'loading', url: spec.url, ...(archive.isFile() ? { sizeBytes: archive.size } : {}) });
      const version = await registry.open({
        url: spec.url,
        archivePath: spec.archivePath,
        modelName: spec.name,
        loadedAtStartup: true,
        synchronous: true,
      });
      opened.set(version, { url: spec.url, startedAt });
    } catch (error) {
      const wrapped =
        (error as NodeJS.ErrnoException).code === 'ENOENT'
          ? createServeError.MARINA_ERR_MODEL_LOAD_FAILED(
              `Model not found at: ${spec.archivePath} (load_models entry '${spec.url}')`,
              { cause: error },
            )
          : toMarinaError(error);
      log('error', `model ${spec.url} was not loaded: ${wrapped.message}`);
      if (startedAt !== undefined)
        onProgress({ phase: 'failed', url: spec.url, elapsedMs: performance.now() - startedAt });
      result.failed.push({ url: spec.url, error: wrapped });
    }
  }
  await startOpenedModels({
    registry,
    versions: [...opened.keys()],
    reason: 'startup',
    log,
    onDone: (version, outcome) => {
      const { url, startedAt } = opened.get(version)!;
      const elapsedMs = performance.now() - startedAt;
      const id = { modelName: version.modelName, modelVersion: version.modelVersion };
      if (outcome.outcome === 'loaded') {
        onProgress({ phase: 'loaded', url, ...id, elapsedMs });
        result.loaded.push(id);
      } else if (outcome.outcome === 'registered') {
        onProgress({ phase: 'registered', url, ...id, elapsedMs });
        result.registered.push(id);
      } else {
        log('error', `model ${url} was not loaded: ${outcome.error.message}`);
        onProgress({ phase: 'failed', url, elapsedMs });
        result.failed.push({ url, error: outcome.error });
      }
    },
  });
  return result;
}
