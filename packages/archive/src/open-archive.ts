import { createHash, randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { createReadStream, createWriteStream } from 'node:fs';
import { lstat, mkdir, open, readdir, realpath, rename, rm, stat } from 'node:fs/promises';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { Readable, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { createGunzip } from 'node:zlib';
import * as tar from 'tar';
import unzipper from 'unzipper';
import { isMarinaError } from '@marina/errors';
import { archiveErrors } from './errors.ts';
import {
  ExtractionBudget,
  readZipDeclaredEntryCount,
  resolveExtractLimits,
  tooLarge,
  tooManyEntries,
  type ExtractLimits,
} from './extract-limits.ts';
import { MANIFEST_PATH, normalizeManifest, readManifest, type Manifest } from './manifest.ts';
import { isInside, unsafeEntryReason } from './safe-path.ts';

/** The containers Marina reads: a zip (.mar, deflate or store), a gzipped tar, or a plain folder. */
export type ArchiveFormat = 'zip' | 'tgz' | 'folder';

/** One entry of an archive, as listed before anything is written. */
export interface ArchiveEntry {
  /** The name as stored, '/'-separated. */
  name: string;
  type: 'file' | 'directory' | 'symlink' | 'other';
  /** Uncompressed bytes (0 for non-files), as the archive declares them (a zip's may lie; extraction counts the real ones). */
  sizeBytes: number;
  /** A zip entry's compressed bytes, as declared. */
  compressedSizeBytes?: number;
  /** Set when extracting this entry could write outside the destination; such entries are never written. */
  unsafeReason?: string;
}

// tar reads 16 MiB at a time by default and inflates ahead of the parser; smaller reads keep memory flat.
const TAR_READ_BYTES = 1024 * 1024;
const S_IFMT = 0o170000;
const S_IFLNK = 0o120000;

/**
 * Detects the container by content: zip magic `PK\x03\x04` (also an empty zip's
 * `PK\x05\x06`), gzip `1f 8b`, or a directory. The file name does not matter.
 * @throws MARINA_ERR_ARCHIVE_NOT_FOUND when the path does not exist;
 *   MARINA_ERR_ARCHIVE_UNREADABLE when it is none of the three.
 */
export async function detectArchiveFormat(archivePath: string): Promise<ArchiveFormat> {
  let stats: Awaited<ReturnType<typeof stat>>;
  try {
    stats = await stat(archivePath);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT')
      throw archiveErrors.create.MARINA_ERR_ARCHIVE_NOT_FOUND(
        `archive '${archivePath}' does not exist; check the path`,
        { cause: error },
      );
    throw archiveErrors.create.MARINA_ERR_ARCHIVE_UNREADABLE(
      `cannot read '${archivePath}': ${(error as Error).message}`,
      { cause: error },
    );
  }
  if (stats.isDirectory()) return 'folder';
  const handle = await open(archivePath, 'r');
  const head = Buffer.alloc(4);
  try {
    await handle.read(head, 0, 4, 0);
  } finally {
    await handle.close();
  }
  if (head[0] === 0x50 && head[1] === 0x4b && ((head[2] === 3 && head[3] === 4) || (head[2] === 5 && head[3] === 6)))
    return 'zip';
  if (head[0] === 0x1f && head[1] === 0x8b) return 'tgz';
  // Its first bytes are not quoted: they would be a few bytes of any file the server can read.
  throw archiveErrors.create.MARINA_ERR_ARCHIVE_UNREADABLE(
    `'${archivePath}' is neither a zip (.mar) nor a tar.gz nor a folder; re-create it with model-archiver`,
  );
}

/** How many unsafe entries an error names. */
const UNSAFE_ENTRIES_SHOWN = 3;

function unreadable(archivePath: string, format: ArchiveFormat, error: unknown): Error {
  if (isMarinaError(error)) return error;
  return archiveErrors.create.MARINA_ERR_ARCHIVE_UNREADABLE(
    `cannot read ${format} archive '${archivePath}': ${(error as Error).message}; it is truncated or corrupt, re-create it with model-archiver`,
    { cause: error },
  );
}

async function openZip(archivePath: string) {
  try {
    return await unzipper.Open.file(archivePath);
  } catch (error) {
    throw unreadable(archivePath, 'zip', error);
  }
}

/** A central-directory record as the zip reader returns it (the fields the overlap check reads). */
interface ZipRecord {
  path: string;
  offsetToLocalFileHeader: number;
  compressedSize: number;
}

/** Bytes of a local file header before its name: every entry's data starts at least this far past its header. */
const LOCAL_HEADER_BYTES = 30;

/**
 * Refuses a zip whose central directory points two entries into the same bytes: each entry's
 * local header and compressed data must end before the next entry's header begins. A real
 * archive never overlaps; a crafted one lists one deflate stream many times over, so that every
 * entry passes the ratio check while extraction writes the stream's output once per entry.
 * @throws MARINA_ERR_ARCHIVE_OVERLAPPING_ENTRIES
 */
function assertNoOverlappingEntries(archivePath: string, records: readonly ZipRecord[]): void {
  const sorted = [...records].sort((a, b) => a.offsetToLocalFileHeader - b.offsetToLocalFileHeader);
  for (let i = 1; i < sorted.length; i += 1) {
    const previous = sorted[i - 1]!;
    const current = sorted[i]!;
    const previousEnd = previous.offsetToLocalFileHeader + LOCAL_HEADER_BYTES + previous.compressedSize;
    if (current.offsetToLocalFileHeader < previousEnd) {
      throw archiveErrors.create.MARINA_ERR_ARCHIVE_OVERLAPPING_ENTRIES(
        `archive '${archivePath}': entries '${previous.path}' and '${current.path}' share bytes (the second starts at offset ${current.offsetToLocalFileHeader}, inside the first, which runs to ${previousEnd}); refusing it as a zip bomb that extracts one compressed stream many times. Re-create it with model-archiver`,
        { details: { entries: [previous.path, current.path] } },
      );
    }
  }
}

function zipEntry(file: {
  path: string;
  type: string;
  uncompressedSize: number;
  compressedSize: number;
  externalFileAttributes: number;
}): ArchiveEntry {
  const isSymlink = ((file.externalFileAttributes >>> 16) & S_IFMT) === S_IFLNK;
  const type = isSymlink ? 'symlink' : file.type === 'Directory' ? 'directory' : 'file';
  const reason = isSymlink ? 'is a symbolic link' : unsafeEntryReason(file.path);
  return {
    name: file.path,
    type,
    sizeBytes: type === 'file' ? file.uncompressedSize : 0,
    compressedSizeBytes: file.compressedSize,
    ...(reason ? { unsafeReason: reason } : {}),
  };
}

/**
 * Reads a tar.gz once, handing each entry to `onEntry` (which must consume or resume
 * it; a returned promise is awaited before this resolves). Gunzips itself rather than
 * letting tar do it, so the stream's inflated:compressed ratio is measured on real
 * bytes and a bomb stops after one chunk past the limit.
 */
async function walkTgz(
  archivePath: string,
  budget: ExtractionBudget,
  onEntry: (entry: tar.ReadEntry) => void | Promise<void>,
): Promise<void> {
  // The input is plain tar (we gunzip), so tar's own ratio limit would compare the wrong counts.
  const parser = new tar.Parser({ strict: true, maxDecompressionRatio: Infinity });
  let failure: unknown;
  const fail = (error: unknown): void => {
    if (failure !== undefined) return;
    failure = error;
    // A fresh error: tar decorates what it is given, and ours must reach the caller untouched.
    parser.abort(new Error('extraction stopped'));
  };
  const pending: Promise<void>[] = [];
  parser.on('entry', (entry: tar.ReadEntry) => {
    try {
      const written = onEntry(entry);
      if (written) {
        pending.push(
          written.catch((error: unknown) => {
            fail(error);
            entry.resume();
          }),
        );
      }
    } catch (error) {
      fail(error);
      entry.resume();
    }
  });
  const parsed = new Promise<void>((resolveParsed, rejectParsed) => {
    parser.on('end', () => resolveParsed());
    parser.on('error', rejectParsed);
  });
  parsed.catch(() => undefined);
  let compressedBytes = 0;
  let inflatedBytes = 0;
  try {
    await pipeline(
      createReadStream(archivePath, { highWaterMark: TAR_READ_BYTES }),
      new Transform({
        transform(chunk: Buffer, _encoding, callback) {
          compressedBytes += chunk.length;
          callback(null, chunk);
        },
      }),
      createGunzip(),
      async (inflated: AsyncIterable<Buffer>) => {
        for await (const chunk of inflated) {
          inflatedBytes += chunk.length;
          try {
            budget.checkRatio('the gzip stream', inflatedBytes, compressedBytes, 'written');
          } catch (error) {
            // Recorded first: pipeline reports the streams' AbortError rather than what the last stage threw.
            fail(error);
          }
          if (failure !== undefined) throw failure;
          if (!parser.write(chunk)) await once(parser, 'drain');
        }
      },
    );
    parser.end();
    await parsed;
  } catch (error) {
    fail(error);
  }
  await Promise.allSettled(pending);
  if (failure !== undefined) throw failure;
}

/** Streams one entry to `path`, counting the bytes really written against the budget. */
async function writeEntry(
  source: Readable,
  path: string,
  budget: ExtractionBudget,
  zipEntryInfo?: { name: string; compressedBytes: number },
): Promise<void> {
  let entryBytes = 0;
  const counter = new Transform({
    transform(chunk: Buffer, _encoding, callback) {
      entryBytes += chunk.length;
      try {
        budget.addWritten(chunk.length, zipEntryInfo && { ...zipEntryInfo, entryBytes });
        callback(null, chunk);
      } catch (error) {
        callback(error as Error);
      }
    },
  });
  await pipeline(source, counter, createWriteStream(path));
}

function tarEntry(entry: { path: string; type: string; size: number }): ArchiveEntry {
  const type =
    entry.type === 'File' || entry.type === 'OldFile' || entry.type === 'ContiguousFile'
      ? 'file'
      : entry.type === 'Directory'
        ? 'directory'
        : entry.type === 'SymbolicLink' || entry.type === 'Link'
          ? 'symlink'
          : 'other';
  const reason =
    type === 'symlink'
      ? `is a ${entry.type === 'Link' ? 'hard' : 'symbolic'} link`
      : type === 'other'
        ? `is a ${entry.type} entry`
        : unsafeEntryReason(entry.path);
  return {
    name: entry.path,
    type,
    sizeBytes: type === 'file' ? entry.size : 0,
    ...(reason ? { unsafeReason: reason } : {}),
  };
}

async function listFolder(root: string): Promise<ArchiveEntry[]> {
  const realRoot = await realpath(root);
  const entries: ArchiveEntry[] = [];
  async function walk(dir: string): Promise<void> {
    for (const dirent of await readdir(dir, { withFileTypes: true })) {
      const path = join(dir, dirent.name);
      const name = relative(root, path).split(sep).join('/');
      if (dirent.isSymbolicLink()) {
        let target: string | undefined;
        try {
          target = await realpath(path);
        } catch {
          target = undefined;
        }
        // One message for dangling and outside links, naming no target: errors must not tell what exists outside.
        const reason =
          target !== undefined && isInside(realRoot, target)
            ? undefined
            : 'is a symbolic link that does not resolve inside the folder';
        entries.push({ name, type: 'symlink', sizeBytes: 0, ...(reason ? { unsafeReason: reason } : {}) });
      } else if (dirent.isDirectory()) {
        entries.push({ name, type: 'directory', sizeBytes: 0 });
        await walk(path);
      } else if (dirent.isFile()) {
        entries.push({ name, type: 'file', sizeBytes: (await lstat(path)).size });
      } else {
        entries.push({ name, type: 'other', sizeBytes: 0, unsafeReason: 'is not a regular file or folder' });
      }
    }
  }
  await walk(root);
  return entries;
}

/**
 * Lists an archive's entries without writing anything; unsafe entries carry `unsafeReason`.
 * Checks the limits (defaults: `DEFAULT_EXTRACT_LIMITS`) against the declared sizes,
 * the entry count and, for a tar.gz, the stream's real compression ratio, so the cheap
 * checks refuse most bombs before extraction starts. A folder is not limited.
 * @throws MARINA_ERR_ARCHIVE_NOT_FOUND, MARINA_ERR_ARCHIVE_UNREADABLE,
 *   MARINA_ERR_ARCHIVE_TOO_MANY_ENTRIES, MARINA_ERR_ARCHIVE_TOO_LARGE, MARINA_ERR_ARCHIVE_COMPRESSION_RATIO.
 */
export async function listArchive(
  archivePath: string,
  limits: ExtractLimits = {},
): Promise<{ format: ArchiveFormat; entries: ArchiveEntry[] }> {
  const resolved = resolveExtractLimits(limits);
  const format = await detectArchiveFormat(archivePath);
  if (format === 'folder') return { format, entries: await listFolder(archivePath) };
  const budget = new ExtractionBudget(archivePath, resolved);
  let declaredBytes = 0;
  const entries: ArchiveEntry[] = [];
  const add = (entry: ArchiveEntry): void => {
    entries.push(entry);
    if (entries.length > resolved.maxEntries) throw tooManyEntries(archivePath, entries.length, resolved, true);
    declaredBytes += entry.sizeBytes;
    if (declaredBytes > resolved.maxExtractedBytes) throw tooLarge(archivePath, declaredBytes, resolved, 'declared');
    if (entry.compressedSizeBytes !== undefined)
      budget.checkRatio(`entry '${entry.name}'`, entry.sizeBytes, entry.compressedSizeBytes, 'declared');
  };
  try {
    if (format === 'zip') {
      // The zip reader allocates one record per declared entry: refuse a forged count before it runs.
      const declaredCount = await readZipDeclaredEntryCount(archivePath);
      if (declaredCount !== undefined && declaredCount > resolved.maxEntries)
        throw tooManyEntries(archivePath, declaredCount, resolved);
      const directory = await openZip(archivePath);
      assertNoOverlappingEntries(archivePath, directory.files);
      for (const file of directory.files) add(zipEntry(file));
    } else {
      await walkTgz(archivePath, budget, (entry) => {
        entry.resume();
        add(tarEntry(entry));
      });
    }
  } catch (error) {
    throw unreadable(archivePath, format, error);
  }
  return { format, entries };
}

/**
 * The folder holding MAR-INF (or, without a manifest, the model files) inside an
 * extracted archive: the folder itself, or its single sub-folder when the archive wraps
 * everything in a `<name>/` root, as TorchServe's tgz format does.
 */
export async function findModelRoot(dir: string): Promise<string> {
  const dirents = await readdir(dir, { withFileTypes: true });
  if (dirents.some((d) => d.name === dirname(MANIFEST_PATH))) return dir;
  const only = dirents.length === 1 ? dirents[0] : undefined;
  return only?.isDirectory() ? join(dir, only.name) : dir;
}

export interface ExtractArchiveOptions extends ExtractLimits {
  /** A zip, tgz, or folder. */
  archivePath: string;
  /** Created when missing. Nothing is ever written outside it. */
  destDir: string;
  /** `throw` (default): refuse the archive before writing anything. `skip`: write the safe entries, return the others. */
  onUnsafeEntry?: 'throw' | 'skip';
  /** Entries for which this returns false are listed but not written. Default: write all. */
  filter?: (entry: ArchiveEntry) => boolean;
}

export interface ExtractArchiveResult {
  format: ArchiveFormat;
  /** See `findModelRoot`; for a folder, the folder itself (nothing is copied). */
  modelDir: string;
  /** Entries refused (only with `onUnsafeEntry: 'skip'`). */
  skippedEntries: ArchiveEntry[];
  /** Every entry of the archive, as listed (written or not). */
  entries: ArchiveEntry[];
}

/**
 * Extracts a zip or tgz into `destDir`, streaming, refusing absolute names, `..`
 * segments, links and anything resolving outside `destDir`. A folder is not copied:
 * its own path is returned as `modelDir`.
 *
 * Bounded (see `ExtractLimits`; defaults 16 GiB, 100,000 entries, 200:1 past 1 MiB):
 * declared sizes are checked before writing, and the bytes actually inflated are counted
 * while streaming, since a zip's headers can lie. When a limit is hit, or the archive
 * turns out corrupt midway, extraction stops and everything it created in `destDir` is
 * removed (and `destDir` itself when this call created it).
 * @throws MARINA_ERR_ARCHIVE_NOT_FOUND, MARINA_ERR_ARCHIVE_UNREADABLE,
 *   MARINA_ERR_ARCHIVE_PATH_ESCAPE (with `details.entries`) unless `onUnsafeEntry` is `skip`,
 *   MARINA_ERR_ARCHIVE_TOO_LARGE, MARINA_ERR_ARCHIVE_TOO_MANY_ENTRIES, MARINA_ERR_ARCHIVE_COMPRESSION_RATIO
 *   (with `details.limit`, `details.value`, `details.option`), MARINA_ERR_ARCHIVE_OPTION_INVALID for a bad limit.
 */
export async function extractArchive(options: ExtractArchiveOptions): Promise<ExtractArchiveResult> {
  const { archivePath } = options;
  const limits = resolveExtractLimits(options);
  const { format, entries } = await listArchive(archivePath, limits);
  const unsafe = entries.filter((e) => e.unsafeReason !== undefined);
  if (unsafe.length > 0 && (options.onUnsafeEntry ?? 'throw') === 'throw') {
    throw archiveErrors.create.MARINA_ERR_ARCHIVE_PATH_ESCAPE(
      // The first few only: the message is an answer to a client and a log line, and must never become a listing.
      `archive '${archivePath}' has ${unsafe.length} entr${unsafe.length === 1 ? 'y' : 'ies'} that would escape its folder: ${unsafe
        .slice(0, UNSAFE_ENTRIES_SHOWN)
        .map((e) => `'${e.name.slice(0, 200)}' ${e.unsafeReason}`)
        .join(
          '; ',
        )}${unsafe.length > UNSAFE_ENTRIES_SHOWN ? `; and ${unsafe.length - UNSAFE_ENTRIES_SHOWN} more` : ''}; refusing to extract it`,
      { details: { entries: unsafe.slice(0, UNSAFE_ENTRIES_SHOWN).map((e) => e.name.slice(0, 200)) } },
    );
  }
  if (format === 'folder') return { format, modelDir: resolve(archivePath), skippedEntries: unsafe, entries };

  const destDir = resolve(options.destDir);
  const createdRoot = await mkdir(destDir, { recursive: true });
  const existingNames = createdRoot === undefined ? new Set(await readdir(destDir)) : new Set<string>();
  const budget = new ExtractionBudget(archivePath, limits);
  const isWanted = options.filter ?? (() => true);
  const target = (name: string): string | undefined => {
    if (unsafeEntryReason(name) !== undefined) return undefined;
    const path = resolve(destDir, name);
    return isInside(destDir, path) && path !== destDir ? path : undefined;
  };
  try {
    if (format === 'zip') {
      const { size: archiveBytes } = await stat(archivePath);
      // Every byte written counts against the archive's real size too, not only each entry's declared one.
      budget.setArchiveBytes(archiveBytes);
      const directory = await openZip(archivePath);
      // Checked again here: the file may have changed since it was listed.
      assertNoOverlappingEntries(archivePath, directory.files);
      for (const file of directory.files) {
        const entry = zipEntry(file);
        const path = entry.unsafeReason === undefined && isWanted(entry) ? target(file.path) : undefined;
        if (path === undefined) continue;
        if (entry.type === 'directory') {
          await mkdir(path, { recursive: true });
        } else {
          await mkdir(dirname(path), { recursive: true });
          // The reader never reads past the declared compressed size, and no entry holds more than the file.
          const compressedBytes = Math.min(file.compressedSize > 0 ? file.compressedSize : archiveBytes, archiveBytes);
          await writeEntry(file.stream(), path, budget, { name: file.path, compressedBytes });
        }
      }
    } else {
      let entryCount = 0;
      await walkTgz(archivePath, budget, (readEntry) => {
        // Counted again: the file may have changed since it was listed.
        entryCount += 1;
        if (entryCount > limits.maxEntries) throw tooManyEntries(archivePath, entryCount, limits, true);
        const entry = tarEntry(readEntry);
        const path =
          entry.unsafeReason === undefined && (entry.type === 'file' || entry.type === 'directory') && isWanted(entry)
            ? target(readEntry.path)
            : undefined;
        if (path === undefined || entry.type === 'directory') {
          readEntry.resume();
          return path === undefined ? undefined : mkdir(path, { recursive: true }).then(() => undefined);
        }
        return (async () => {
          await mkdir(dirname(path), { recursive: true });
          await writeEntry(Readable.from(readEntry), path, budget);
        })();
      });
    }
  } catch (error) {
    await removeCreated(destDir, createdRoot, existingNames);
    throw unreadable(archivePath, format, error);
  }
  return { format, modelDir: await findModelRoot(destDir), skippedEntries: unsafe, entries };
}

/** Undoes a failed extraction: the folders mkdir created, or the names that were not in `destDir` before. */
async function removeCreated(
  destDir: string,
  createdRoot: string | undefined,
  existingNames: Set<string>,
): Promise<void> {
  if (createdRoot !== undefined) {
    await rm(createdRoot, { recursive: true, force: true });
    return;
  }
  const names = await readdir(destDir).catch(() => [] as string[]);
  await Promise.all(
    names
      .filter((name) => !existingNames.has(name))
      .map((name) => rm(join(destDir, name), { recursive: true, force: true })),
  );
}

/** sha256 of a file's bytes, hex, streaming. */
export async function sha256File(path: string): Promise<string> {
  const hash = createHash('sha256');
  await pipeline(createReadStream(path), hash);
  return hash.digest('hex');
}

export interface ExtractToCacheOptions extends ExtractLimits {
  archivePath: string;
  /** Created when missing. Holds one folder per distinct archive content. */
  cacheDir: string;
}

export interface ExtractToCacheResult {
  /** Where the model's files are (MAR-INF's parent). A folder archive is used in place. */
  modelDir: string;
  /** sha256 of the archive bytes; for a folder, sha256 of "folder:" + its real path. */
  digest: string;
  /** The archive's manifest, or the one TorchServe would derive (see `normalizeManifest`): name and version always set. */
  manifest: Manifest;
}

/**
 * Extracts an archive once per content: to `<cacheDir>/<sha256>`, through a temporary
 * folder renamed into place, so a crash never leaves a half-extracted entry and a second
 * call (or a concurrent one) reuses the first. A folder is used in place, not copied.
 * The limits of `extractArchive` apply (pass `maxExtractedBytes`, `maxEntries`,
 * `maxCompressionRatio` to change them); a refused archive leaves nothing in `cacheDir`.
 * @throws MARINA_ERR_ARCHIVE_NOT_FOUND, MARINA_ERR_ARCHIVE_UNREADABLE,
 *   MARINA_ERR_ARCHIVE_PATH_ESCAPE, MARINA_ERR_ARCHIVE_MANIFEST_INVALID,
 *   MARINA_ERR_ARCHIVE_TOO_LARGE, MARINA_ERR_ARCHIVE_TOO_MANY_ENTRIES, MARINA_ERR_ARCHIVE_COMPRESSION_RATIO.
 */
export async function extractToCache(options: ExtractToCacheOptions): Promise<ExtractToCacheResult> {
  const { archivePath } = options;
  const limits = resolveExtractLimits(options);
  const format = await detectArchiveFormat(archivePath);
  let modelDir: string;
  let digest: string;
  if (format === 'folder') {
    await extractArchive({ archivePath, destDir: archivePath });
    modelDir = resolve(archivePath);
    digest = createHash('sha256')
      .update(`folder:${await realpath(archivePath)}`)
      .digest('hex');
  } else {
    digest = await sha256File(archivePath);
    const cacheDir = resolve(options.cacheDir);
    const finalDir = join(cacheDir, digest);
    if (!(await isDirectory(finalDir))) {
      await mkdir(cacheDir, { recursive: true });
      const tempDir = join(cacheDir, `.tmp-${digest.slice(0, 16)}-${process.pid}-${randomBytes(4).toString('hex')}`);
      try {
        await extractArchive({ archivePath, destDir: tempDir, ...limits });
        await rename(tempDir, finalDir);
      } catch (error) {
        await rm(tempDir, { recursive: true, force: true });
        const code = (error as NodeJS.ErrnoException).code;
        // Another process extracted the same content first: its copy is as good as ours.
        if (!((code === 'ENOTEMPTY' || code === 'EEXIST') && (await isDirectory(finalDir)))) throw error;
      }
    }
    modelDir = await findModelRoot(finalDir);
  }
  const manifest = normalizeManifest(await readManifest(modelDir), { archivePath });
  return { modelDir, digest, manifest };
}

async function isDirectory(path: string): Promise<boolean> {
  try {
    return (await stat(path)).isDirectory();
  } catch {
    return false;
  }
}
