/**
 * The two on-disk caches a server fills: archive extractions (`<tmpdir>/marina/models/<sha256>`,
 * written by @marina/archive's extractToCache) and onnxruntime's optimised model copies
 * (`<tmpdir>/marina/ort-optimized/<key>`, written by backend/ort-session.ts in the workers).
 * This module bounds them: an extraction no registered model uses any more is removed with the
 * model (with its optimised copies), and each cache is kept under its byte cap by evicting the
 * least recently used entries that no registered model uses. The extraction cache is shared by
 * every server on the host, so each marks the extractions it uses (`.users/<entry>/<pid>`) and
 * leaves alone those another live server has marked. `serve --clean-cache` empties both.
 */
import { lstat, mkdir, readdir, readFile, rm, unlink, utimes, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, relative, resolve, sep } from 'node:path';

/** `<tmpdir>/marina/models`: where a server extracts archives (ServerConfig.extractionCacheDir). */
export function defaultExtractionCacheDir(): string {
  return join(tmpdir(), 'marina', 'models');
}

/**
 * `<tmpdir>/marina/ort-optimized`: the same folder as backend/ort-session.ts's
 * optimizedModelCacheDir(), which this main-thread module must not import (it loads onnxruntime).
 */
export function optimizedModelCacheDir(): string {
  return join(tmpdir(), 'marina', 'ort-optimized');
}

/** One folder of a cache. */
interface CacheEntry {
  path: string;
  /** Bytes of the files below it (sizes as stat reports them). */
  sizeBytes: number;
  /** Epoch ms of its last use: the folder's mtime, which every use refreshes. */
  lastUsedMs: number;
}

/** Entries written less than this long ago are never evicted: another register may be about to use them. Default 1 minute. */
const DEFAULT_MIN_EVICTION_AGE_MS = 60_000;

function isInside(root: string, path: string): boolean {
  const rel = relative(root, path);
  return rel === '' || (!rel.startsWith(`..${sep}`) && rel !== '..' && !rel.startsWith(sep) && !/^[A-Za-z]:/.test(rel));
}

async function sizeOf(path: string): Promise<number> {
  let stats: Awaited<ReturnType<typeof lstat>>;
  try {
    stats = await lstat(path);
  } catch {
    return 0;
  }
  if (!stats.isDirectory()) return stats.size;
  let total = 0;
  for (const name of await readdir(path).catch(() => [] as string[])) total += await sizeOf(join(path, name));
  return total;
}

/** The finished entries of a cache folder (folders only; temp folders being written are left out). */
async function listCacheEntries(cacheDir: string): Promise<CacheEntry[]> {
  const names = await readdir(cacheDir).catch(() => [] as string[]);
  const entries: CacheEntry[] = [];
  for (const name of names) {
    if (name.startsWith('.') || name.includes('.tmp-')) continue;
    const path = join(cacheDir, name);
    const stats = await lstat(path).catch(() => undefined);
    if (!stats?.isDirectory()) continue;
    entries.push({ path, sizeBytes: await sizeOf(path), lastUsedMs: stats.mtimeMs });
  }
  return entries;
}

/**
 * Removes least recently used entries until the cache's total is at most `maxBytes`, never one
 * `isInUse` claims or one used within `minAgeMs`. An in-use cache may therefore stay above the cap.
 * Returns the entries removed.
 */
async function evictLeastRecentlyUsed(options: {
  cacheDir: string;
  maxBytes: number;
  isInUse: (entry: CacheEntry) => Promise<boolean> | boolean;
  minAgeMs?: number;
  now?: number;
}): Promise<CacheEntry[]> {
  const entries = await listCacheEntries(options.cacheDir);
  let total = entries.reduce((n, e) => n + e.sizeBytes, 0);
  const removed: CacheEntry[] = [];
  const youngest = (options.now ?? Date.now()) - (options.minAgeMs ?? DEFAULT_MIN_EVICTION_AGE_MS);
  for (const entry of entries.sort((a, b) => a.lastUsedMs - b.lastUsedMs)) {
    if (total <= options.maxBytes) break;
    if (entry.lastUsedMs > youngest || (await options.isInUse(entry))) continue;
    await rm(entry.path, { recursive: true, force: true });
    total -= entry.sizeBytes;
    removed.push(entry);
  }
  return removed;
}

/** The model file an optimised copy was made from (its `source.json`), or undefined. */
async function optimizedCopySource(entryPath: string): Promise<string | undefined> {
  try {
    const recorded = JSON.parse(await readFile(join(entryPath, 'source.json'), 'utf8')) as { source?: unknown };
    return typeof recorded.source === 'string' ? recorded.source : undefined;
  } catch {
    return undefined;
  }
}

export interface ModelCachesOptions {
  /** Where archives are extracted (ServerConfig.extractionCacheDir). */
  extractionCacheDir: string;
  /** Where optimised copies are written. Default `optimizedModelCacheDir()`. */
  optimizedCacheDir?: string;
  /** extraction_cache_max_bytes. */
  extractionCacheMaxBytes: number;
  /** optimized_model_cache_max_bytes. */
  optimizedModelCacheMaxBytes: number;
  /** See DEFAULT_MIN_EVICTION_AGE_MS. */
  minEvictionAgeMs?: number;
  log?: (level: 'info' | 'warn' | 'error', message: string) => void;
}

/** What the registry calls: after a version opens, and after one is removed. Never throws. */
export interface ModelCaches {
  /** Marks `modelDir`'s extraction used now, then evicts over-cap entries not in `modelDirsInUse`. */
  opened(modelDir: string, modelDirsInUse: readonly string[]): Promise<void>;
  /** Removes `modelDir`'s extraction and its optimised copies, unless a version in `modelDirsInUse` still uses it. */
  removed(modelDir: string, modelDirsInUse: readonly string[]): Promise<void>;
}

function isProcessAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * Which server processes use an extraction: `<cacheDir>/.users/<entry>/<pid>` files. The cache is
 * shared by every server on the host (same content, same folder), so a server removes or evicts
 * an extraction only when no other live process has marked it.
 */
function createUserMarks(extractionDir: string) {
  const folder = (entryPath: string) => join(extractionDir, '.users', relative(extractionDir, entryPath));
  return {
    async mark(entryPath: string): Promise<void> {
      await mkdir(folder(entryPath), { recursive: true });
      await writeFile(join(folder(entryPath), String(process.pid)), '');
    },
    async unmark(entryPath: string): Promise<void> {
      await unlink(join(folder(entryPath), String(process.pid))).catch(() => undefined);
    },
    /** True when a live process other than this one has marked the entry. */
    async hasOtherUsers(entryPath: string): Promise<boolean> {
      const pids = await readdir(folder(entryPath)).catch(() => [] as string[]);
      return pids.some(
        (name) => Number(name) !== process.pid && Number.isInteger(Number(name)) && isProcessAlive(Number(name)),
      );
    },
    async forget(entryPath: string): Promise<void> {
      await rm(folder(entryPath), { recursive: true, force: true });
    },
  };
}

export function createModelCaches(options: ModelCachesOptions): ModelCaches {
  const extractionDir = resolve(options.extractionCacheDir);
  const users = createUserMarks(extractionDir);
  const optimizedDir = resolve(options.optimizedCacheDir ?? optimizedModelCacheDir());
  const log = options.log ?? (() => undefined);
  /** The cache folder holding `modelDir` (`<cacheDir>/<sha256>`), or undefined for a folder archive used in place. */
  const extractionOf = (modelDir: string): string | undefined => {
    const path = resolve(modelDir);
    if (!isInside(extractionDir, path) || path === extractionDir) return undefined;
    return join(extractionDir, relative(extractionDir, path).split(sep)[0]!);
  };
  const inUseSet = (modelDirs: readonly string[]) =>
    new Set(modelDirs.map(extractionOf).filter((p): p is string => p !== undefined));
  const report = (what: string, removed: CacheEntry[]) => {
    if (removed.length > 0)
      log(
        'info',
        `${what}: removed ${removed.length} least recently used entries (${removed.reduce((n, e) => n + e.sizeBytes, 0)} bytes) to stay under the cap`,
      );
  };

  return {
    async opened(modelDir, modelDirsInUse) {
      try {
        const own = extractionOf(modelDir);
        if (own !== undefined) {
          const now = new Date();
          await utimes(own, now, now).catch(() => undefined);
          await users.mark(own);
        }
        const inUse = inUseSet([...modelDirsInUse, modelDir]);
        const evicted = await evictLeastRecentlyUsed({
          cacheDir: extractionDir,
          maxBytes: options.extractionCacheMaxBytes,
          isInUse: async (entry) => inUse.has(entry.path) || (await users.hasOtherUsers(entry.path)),
          ...(options.minEvictionAgeMs !== undefined ? { minAgeMs: options.minEvictionAgeMs } : {}),
        });
        for (const entry of evicted) await users.forget(entry.path);
        report(`extraction cache ${extractionDir}`, evicted);
        report(
          `optimised model cache ${optimizedDir}`,
          await evictLeastRecentlyUsed({
            cacheDir: optimizedDir,
            maxBytes: options.optimizedModelCacheMaxBytes,
            isInUse: async (entry) => {
              const source = await optimizedCopySource(entry.path);
              return (
                source !== undefined && [...modelDirsInUse, modelDir].some((dir) => isInside(resolve(dir), source))
              );
            },
            ...(options.minEvictionAgeMs !== undefined ? { minAgeMs: options.minEvictionAgeMs } : {}),
          }),
        );
      } catch (error) {
        log('warn', `could not keep the model caches under their caps: ${(error as Error).message}`);
      }
    },

    async removed(modelDir, modelDirsInUse) {
      try {
        const own = extractionOf(modelDir);
        if (own === undefined || inUseSet(modelDirsInUse).has(own)) return;
        await users.unmark(own);
        // Another server on this host registered the same archive content: it keeps the folder.
        if (await users.hasOtherUsers(own)) return;
        await rm(own, { recursive: true, force: true });
        await users.forget(own);
        for (const entry of await listCacheEntries(optimizedDir)) {
          const source = await optimizedCopySource(entry.path);
          if (source !== undefined && isInside(own, source)) await rm(entry.path, { recursive: true, force: true });
        }
      } catch (error) {
        log('warn', `could not remove the extraction of ${modelDir}: ${(error as Error).message}`);
      }
    },
  };
}

/** What `cleanModelCaches` removed from one folder. */
export interface CleanedCache {
  dir: string;
  entries: number;
  bytes: number;
}

/**
 * Empties both caches (for `serve --clean-cache`, with no server running: a live server's
 * workers read from them). Missing folders count as empty.
 */
export async function cleanModelCaches(options: {
  extractionCacheDir: string;
  optimizedCacheDir?: string;
}): Promise<CleanedCache[]> {
  const result: CleanedCache[] = [];
  for (const dir of [
    resolve(options.extractionCacheDir),
    resolve(options.optimizedCacheDir ?? optimizedModelCacheDir()),
  ]) {
    const names = await readdir(dir).catch(() => [] as string[]);
    let bytes = 0;
    for (const name of names) {
      bytes += await sizeOf(join(dir, name));
      await rm(join(dir, name), { recursive: true, force: true });
    }
    result.push({ dir, entries: names.length, bytes });
  }
  return result;
}
