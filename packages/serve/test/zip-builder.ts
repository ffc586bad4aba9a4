/**
 * Writes zip files byte by byte, so tests can build archives no honest tool would: central
 * directory records that point several entries at one local header and deflate stream.
 */
import { crc32, deflateRawSync } from 'node:zlib';

export interface RawZipFile {
  name: string;
  data: Buffer;
}

function localHeader(name: Buffer, crc: number, compressedBytes: number, bytes: number): Buffer {
  const header = Buffer.alloc(30);
  header.writeUInt32LE(0x04034b50, 0);
  header.writeUInt16LE(20, 4);
  header.writeUInt16LE(0, 6);
  header.writeUInt16LE(8, 8); // deflate
  header.writeUInt32LE(crc >>> 0, 14);
  header.writeUInt32LE(compressedBytes, 18);
  header.writeUInt32LE(bytes, 22);
  header.writeUInt16LE(name.length, 26);
  header.writeUInt16LE(0, 28);
  return Buffer.concat([header, name]);
}

function centralRecord(name: Buffer, crc: number, compressedBytes: number, bytes: number, localOffset: number): Buffer {
  const record = Buffer.alloc(46);
  record.writeUInt32LE(0x02014b50, 0);
  record.writeUInt16LE((3 << 8) | 20, 4);
  record.writeUInt16LE(20, 6);
  record.writeUInt16LE(0, 8);
  record.writeUInt16LE(8, 10);
  record.writeUInt32LE(crc >>> 0, 16);
  record.writeUInt32LE(compressedBytes, 20);
  record.writeUInt32LE(bytes, 24);
  record.writeUInt16LE(name.length, 28);
  record.writeUInt32LE((0o100644 << 16) >>> 0, 38);
  record.writeUInt32LE(localOffset, 42);
  return Buffer.concat([record, name]);
}

/**
 * A zip holding `files`, each deflated once, plus `aliases`: extra central-directory names that
 * all point at the local header of `aliasOf` (the overlapping-entries bomb). With no aliases the
 * result is an ordinary, valid zip.
 */
export function buildZip(options: { files: RawZipFile[]; aliasOf?: string; aliases?: string[] }): Buffer {
  const parts: Buffer[] = [];
  const central: Buffer[] = [];
  let offset = 0;
  const records = new Map<string, { crc: number; compressedBytes: number; bytes: number; offset: number }>();
  for (const file of options.files) {
    const name = Buffer.from(file.name);
    const compressed = deflateRawSync(file.data);
    const crc = crc32(file.data);
    const local = localHeader(name, crc, compressed.length, file.data.length);
    records.set(file.name, { crc, compressedBytes: compressed.length, bytes: file.data.length, offset });
    central.push(centralRecord(name, crc, compressed.length, file.data.length, offset));
    parts.push(local, compressed);
    offset += local.length + compressed.length;
  }
  const target = options.aliasOf === undefined ? undefined : records.get(options.aliasOf);
  for (const alias of options.aliases ?? []) {
    if (!target) throw new Error(`buildZip: aliasOf '${options.aliasOf}' is not one of the files`);
    central.push(centralRecord(Buffer.from(alias), target.crc, target.compressedBytes, target.bytes, target.offset));
  }
  const directory = Buffer.concat(central);
  const end = Buffer.alloc(22);
  end.writeUInt32LE(0x06054b50, 0);
  end.writeUInt16LE(central.length, 8);
  end.writeUInt16LE(central.length, 10);
  end.writeUInt32LE(directory.length, 12);
  end.writeUInt32LE(offset, 16);
  return Buffer.concat([...parts, directory, end]);
}

/**
 * `bytes` of data that deflate compresses about `ratio`:1 (zeros with one pseudo-random byte in
 * every `ratio`-ish), under the 200:1 per-entry limit, so only the overlap gives a bomb away.
 */
export function compressibleBytes(bytes: number, spacing = 90): Buffer {
  const data = Buffer.alloc(bytes);
  let seed = 12345;
  for (let at = 0; at < bytes; at += spacing) {
    seed = (seed * 1103515245 + 12345) & 0x7fffffff;
    data[at] = seed & 0xff;
  }
  return data;
}
