import { open } from 'node:fs/promises';
import { archiveErrors } from './errors.ts';

/**
 * Bounds on what extracting one archive may cost, so a zip bomb (a few KB that inflate
 * to many GB, or millions of entries) is refused instead of filling the disk. Every
 * limit is checked twice: on the sizes the archive declares, before anything is written,
 * and on the bytes actually inflated while streaming, because declared sizes can lie.
 */
export interface ExtractLimits {
  /** Most bytes all files together may inflate to. Default 16 GiB. */
  maxExtractedBytes?: number;
  /** Most entries (files, folders, links) the archive may hold. Default 100,000. */
  maxEntries?: number;
  /**
   * Highest inflated:compressed ratio allowed: per entry for a zip, over the whole
   * stream for a tar.gz (gzip compresses all entries together). Default 200; real model
   * weights compress about 1.1:1, deflate's own maximum is about 1030:1.
   */
  maxCompressionRatio?: number;
  /** The ratio is only checked once an entry (zip) or the stream (tar.gz) passes this many inflated bytes. Default 1 MiB. */
  compressionRatioMinBytes?: number;
}

/** The defaults `extractArchive`, `extractToCache`, `listArchive` and `validateArchive` apply. */
export const DEFAULT_EXTRACT_LIMITS: Readonly<Required<ExtractLimits>> = Object.freeze({
  maxExtractedBytes: 16 * 1024 ** 3,
  maxEntries: 100_000,
  maxCompressionRatio: 200,
  compressionRatioMinBytes: 1024 ** 2,
});

const LIMIT_KEYS = ['maxExtractedBytes', 'maxEntries', 'maxCompressionRatio', 'compressionRatioMinBytes'] as const;

/**
 * Fills in defaults. `Infinity` switches a limit off.
 * @throws MARINA_ERR_ARCHIVE_OPTION_INVALID when a limit is not a positive number (0 is allowed for compressionRatioMinBytes).
 */
export function resolveExtractLimits(limits: ExtractLimits = {}): Required<ExtractLimits> {
  const resolved = { ...DEFAULT_EXTRACT_LIMITS };
  for (const key of LIMIT_KEYS) {
    const value = limits[key];
    if (value === undefined) continue;
    const isAllowed =
      typeof value === 'number' &&
      !Number.isNaN(value) &&
      (key === 'compressionRatioMinBytes' ? value >= 0 : value > 0);
    if (!isAllowed) {
      throw archiveErrors.create.MARINA_ERR_ARCHIVE_OPTION_INVALID(
        `extraction limit ${key} must be a positive number (or Infinity to switch it off), got ${String(value)}`,
        { details: { option: key, value } },
      );
    }
    resolved[key] = value;
  }
  return resolved;
}

/** Byte counts for messages: exact bytes plus a readable unit. */
function formatBytes(bytes: number): string {
  if (!Number.isFinite(bytes)) return String(bytes);
  const units = ['bytes', 'KiB', 'MiB', 'GiB', 'TiB'];
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return unit === 0 ? `${bytes} bytes` : `${bytes} bytes (${value.toFixed(1)} ${units[unit]})`;
}

const ADVICE = 'refusing it as a possible zip bomb; if the archive is genuine, raise the limit';

export function tooManyEntries(
  archivePath: string,
  count: number,
  limits: Required<ExtractLimits>,
  isAtLeast = false,
): Error {
  return archiveErrors.create.MARINA_ERR_ARCHIVE_TOO_MANY_ENTRIES(
    `archive '${archivePath}' has ${isAtLeast ? 'more than ' : ''}${count} entries, over the limit of ${limits.maxEntries} (maxEntries); ${ADVICE} (maxEntries) or pack fewer, larger files`,
    { details: { limit: limits.maxEntries, value: count, option: 'maxEntries' } },
  );
}

export function tooLarge(
  archivePath: string,
  bytes: number,
  limits: Required<ExtractLimits>,
  how: 'declared' | 'written',
): Error {
  const said = how === 'declared' ? 'its entries declare' : 'extraction had inflated';
  return archiveErrors.create.MARINA_ERR_ARCHIVE_TOO_LARGE(
    `archive '${archivePath}' inflates to more than the limit of ${formatBytes(limits.maxExtractedBytes)} (maxExtractedBytes): ${said} ${formatBytes(bytes)}${how === 'written' ? ' when it was stopped' : ''}; ${ADVICE} (maxExtractedBytes) and check the disk has room`,
    { details: { limit: limits.maxExtractedBytes, value: bytes, option: 'maxExtractedBytes', how } },
  );
}

function compressionRatio(
  archivePath: string,
  where: string,
  inflatedBytes: number,
  compressedBytes: number,
  limits: Required<ExtractLimits>,
  how: 'declared' | 'written',
): Error {
  const ratio = inflatedBytes / Math.max(1, compressedBytes);
  return archiveErrors.create.MARINA_ERR_ARCHIVE_COMPRESSION_RATIO(
    `archive '${archivePath}': ${where} ${how === 'declared' ? 'declares' : 'inflated to'} ${formatBytes(inflatedBytes)} from ${formatBytes(compressedBytes)}, a ratio of ${ratio.toFixed(1)}:1, over the limit of ${limits.maxCompressionRatio}:1 (maxCompressionRatio); ${ADVICE} (maxCompressionRatio). Model weights barely compress, so such a ratio means padding or a bomb`,
    {
      details: {
        limit: limits.maxCompressionRatio,
        value: ratio,
        option: 'maxCompressionRatio',
        inflatedBytes,
        compressedBytes,
        how,
      },
    },
  );
}

/**
 * Counts inflated bytes across one extraction and throws the limit's error as soon as
 * one is passed, so at most one chunk (about 64 KiB) lands past a limit.
 */
export class ExtractionBudget {
  readonly limits: Required<ExtractLimits>;
  readonly archivePath: string;
  private totalBytes = 0;
  private archiveBytes: number | undefined;

  constructor(archivePath: string, limits: Required<ExtractLimits>) {
    this.archivePath = archivePath;
    this.limits = limits;
  }

  /**
   * The archive file's real size: from then on the total written is also held to
   * maxCompressionRatio times it, so entries that lie about their compressed size (or share one
   * compressed stream) cannot together write more than the file could honestly hold.
   */
  setArchiveBytes(bytes: number): void {
    this.archiveBytes = bytes;
  }

  /** Bytes written so far, all entries together. */
  get writtenBytes(): number {
    return this.totalBytes;
  }

  /**
   * Adds `chunkBytes` to the total; for a zip entry, also checks the entry's ratio
   * (`entryBytes` written so far from at most `compressedBytes`).
   * @throws MARINA_ERR_ARCHIVE_TOO_LARGE, MARINA_ERR_ARCHIVE_COMPRESSION_RATIO.
   */
  addWritten(chunkBytes: number, entry?: { name: string; entryBytes: number; compressedBytes: number }): void {
    this.totalBytes += chunkBytes;
    if (this.totalBytes > this.limits.maxExtractedBytes)
      throw tooLarge(this.archivePath, this.totalBytes, this.limits, 'written');
    if (entry) this.checkRatio(`entry '${entry.name}'`, entry.entryBytes, entry.compressedBytes, 'written');
    if (this.archiveBytes !== undefined)
      this.checkRatio('the archive as a whole', this.totalBytes, this.archiveBytes, 'written');
  }

  /** @throws MARINA_ERR_ARCHIVE_COMPRESSION_RATIO when `inflatedBytes` passed the minimum and the ratio limit. */
  checkRatio(where: string, inflatedBytes: number, compressedBytes: number, how: 'declared' | 'written'): void {
    const { maxCompressionRatio, compressionRatioMinBytes } = this.limits;
    if (
      inflatedBytes > compressionRatioMinBytes &&
      inflatedBytes > maxCompressionRatio * Math.max(1, compressedBytes)
    ) {
      throw compressionRatio(this.archivePath, where, inflatedBytes, compressedBytes, this.limits, how);
    }
  }
}

const EOCD_SIGNATURE = 0x06054b50;
const ZIP64_LOCATOR_SIGNATURE = 0x07064b50;
const ZIP64_EOCD_SIGNATURE = 0x06064b50;
const EOCD_BYTES = 22;
const MAX_COMMENT_BYTES = 0xffff;

/**
 * The entry count a zip's end-of-central-directory record declares (zip64 too), read
 * from the file's tail without parsing the directory: the zip reader allocates per
 * declared record, so a forged count must be refused before it runs. Undefined when
 * no record is found (the zip reader then reports the archive unreadable).
 */
export async function readZipDeclaredEntryCount(zipPath: string): Promise<number | undefined> {
  const handle = await open(zipPath, 'r');
  try {
    const { size } = await handle.stat();
    const tailBytes = Math.min(size, EOCD_BYTES + MAX_COMMENT_BYTES);
    const tail = Buffer.alloc(tailBytes);
    await handle.read(tail, 0, tailBytes, size - tailBytes);
    for (let at = tailBytes - EOCD_BYTES; at >= 0; at -= 1) {
      if (tail.readUInt32LE(at) !== EOCD_SIGNATURE) continue;
      const count = tail.readUInt16LE(at + 10);
      const isZip64 = count === 0xffff || tail.readUInt32LE(at + 16) === 0xffffffff;
      if (!isZip64) return count;
      const locatorAt = at - 20;
      if (locatorAt < 0 || tail.readUInt32LE(locatorAt) !== ZIP64_LOCATOR_SIGNATURE) return count;
      const recordOffset = Number(tail.readBigUInt64LE(locatorAt + 8));
      const record = Buffer.alloc(56);
      const { bytesRead } = await handle.read(record, 0, 56, recordOffset);
      if (bytesRead < 56 || record.readUInt32LE(0) !== ZIP64_EOCD_SIGNATURE) return count;
      return Number(record.readBigUInt64LE(32));
    }
    return undefined;
  } finally {
    await handle.close();
  }
}
