/**
 * Builders for archives with planted defects, shared by the archive and model-archiver
 * tests (exported as `@marina/archive/testing`). They write real files; nothing is mocked.
 */
import { mkdtemp, readdir, readFile, rm, stat, writeFile, mkdir } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, relative, sep } from 'node:path';
import { crc32, deflateRawSync } from 'node:zlib';

/** A fresh folder under the OS temp dir; call the returned `cleanup` in afterEach. */
export async function makeTempDir(
  prefix = 'marina-archive-test-',
): Promise<{ dir: string; cleanup: () => Promise<void> }> {
  const dir = await mkdtemp(join(tmpdir(), prefix));
  return { dir, cleanup: () => rm(dir, { recursive: true, force: true }) };
}

export interface RawZipEntry {
  /** Stored byte for byte: no normalisation, so '../x' or '/etc/x' stay as given. */
  name: string;
  data: Buffer | string;
  /** Unix mode including the file type bits, e.g. 0o120777 for a symbolic link. Default 0o100644. */
  unixMode?: number;
  /** 'deflate' compresses `data` (zip method 8), as real archivers do. Default 'store'. */
  compression?: 'store' | 'deflate';
  /** Written into both headers instead of the real uncompressed size: a header that lies. */
  declaredUncompressedBytes?: number;
}

/**
 * Writes a zip (STORED entries unless `compression: 'deflate'`) byte by byte. Zip
 * libraries normalise entry names and never write lying sizes, so this is the way to
 * plant names such as `../escape.txt` or a header that understates what an entry inflates to.
 */
export async function writeRawZip(path: string, entries: RawZipEntry[]): Promise<void> {
  const locals: Buffer[] = [];
  const centrals: Buffer[] = [];
  let offset = 0;
  for (const entry of entries) {
    const name = Buffer.from(entry.name, 'utf8');
    const raw = typeof entry.data === 'string' ? Buffer.from(entry.data, 'utf8') : entry.data;
    const crc = crc32(raw);
    const isDeflated = entry.compression === 'deflate';
    const data = isDeflated ? deflateRawSync(raw) : raw;
    const method = isDeflated ? 8 : 0;
    const uncompressedBytes = entry.declaredUncompressedBytes ?? raw.length;
    const local = Buffer.alloc(30);
    local.writeUInt32LE(0x04034b50, 0);
    local.writeUInt16LE(20, 4);
    local.writeUInt16LE(0x0800, 6); // UTF-8 names
    local.writeUInt16LE(method, 8);
    local.writeUInt32LE(0, 10); // time + date
    local.writeUInt32LE(crc, 14);
    local.writeUInt32LE(data.length, 18);
    local.writeUInt32LE(uncompressedBytes, 22);
    local.writeUInt16LE(name.length, 26);
    local.writeUInt16LE(0, 28);
    locals.push(local, name, data);
    const central = Buffer.alloc(46);
    central.writeUInt32LE(0x02014b50, 0);
    central.writeUInt16LE((3 << 8) | 20, 4); // made by Unix, so the external attributes carry a mode
    central.writeUInt16LE(20, 6);
    central.writeUInt16LE(0x0800, 8);
    central.writeUInt16LE(method, 10);
    central.writeUInt32LE(0, 12);
    central.writeUInt32LE(crc, 16);
    central.writeUInt32LE(data.length, 20);
    central.writeUInt32LE(uncompressedBytes, 24);
    central.writeUInt16LE(name.length, 28);
    central.writeUInt16LE(0, 30);
    central.writeUInt16LE(0, 32);
    central.writeUInt16LE(0, 34);
    central.writeUInt16LE(0, 36);
    central.writeUInt32LE(((entry.unixMode ?? 0o100644) << 16) >>> 0, 38);
    central.writeUInt32LE(offset, 42);
    centrals.push(central, name);
    offset += local.length + name.length + data.length;
  }
  const centralSize = centrals.reduce((sum, b) => sum + b.length, 0);
  const end = Buffer.alloc(22);
  end.writeUInt32LE(0x06054b50, 0);
  end.writeUInt16LE(entries.length, 8);
  end.writeUInt16LE(entries.length, 10);
  end.writeUInt32LE(centralSize, 12);
  end.writeUInt32LE(offset, 16);
  await mkdir(dirname(path), { recursive: true });
  await writeFile(path, Buffer.concat([...locals, ...centrals, end]));
}

/** Zips a folder's files (names relative to it) with `writeRawZip`. */
export async function zipFolder(folder: string, zipPath: string, extra: RawZipEntry[] = []): Promise<void> {
  const entries: RawZipEntry[] = [];
  async function walk(dir: string): Promise<void> {
    for (const dirent of await readdir(dir, { withFileTypes: true })) {
      const path = join(dir, dirent.name);
      if (dirent.isDirectory()) await walk(path);
      else entries.push({ name: relative(folder, path).split(sep).join('/'), data: await readFile(path) });
    }
  }
  await walk(folder);
  await writeRawZip(zipPath, [...entries, ...extra]);
}

/** Writes files under `dir`: keys are '/'-separated relative names. */
export async function writeFiles(dir: string, files: Record<string, string | Buffer>): Promise<void> {
  for (const [name, content] of Object.entries(files)) {
    const path = join(dir, ...name.split('/'));
    await mkdir(dirname(path), { recursive: true });
    await writeFile(path, content);
  }
}

/** A TorchServe-style manifest text; `model` keys override the defaults (image_classifier, model.onnx). */
export function manifestText(model: Record<string, unknown> = {}, top: Record<string, unknown> = {}): string {
  return JSON.stringify(
    {
      createdOn: '17/03/2025 11:20:57',
      runtime: 'python',
      model: {
        modelName: 'tiny',
        serializedFile: 'model.onnx',
        handler: 'image_classifier',
        modelVersion: '1.0',
        ...model,
      },
      archiverVersion: '0.12.0',
      ...top,
    },
    null,
    2,
  );
}

/** Cuts a file to its first `keepBytes` bytes (a truncated download). */
export async function truncateFile(path: string, keepBytes: number): Promise<void> {
  const bytes = await readFile(path);
  await writeFile(path, bytes.subarray(0, Math.min(keepBytes, (await stat(path)).size)));
}
