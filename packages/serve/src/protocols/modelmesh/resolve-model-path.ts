/**
 * What a ModelMesh `loadModel` names in `modelPath`, resolved to something the registry registers:
 * a `.mar` / `.tar.gz` archive, an extracted archive folder (MAR-INF/MANIFEST.json), a bare
 * `.onnx` (wrapped in a one-file archive folder for the tensor handler), or a folder holding
 * exactly one of those (the layout ModelMesh's storage helper leaves in `/models/<modelId>/`).
 *
 * The path is confined as a register `url` is: it must lie inside the model store once every
 * symbolic link is resolved, or its `file://` URL must match `allowed_urls`. Error messages quote
 * the given path (bounded), never what it resolved to nor what a folder holds.
 */
import { createHash } from 'node:crypto';
import { copyFile, link, lstat, mkdir, open, readdir, realpath, rename, rm, stat, writeFile } from 'node:fs/promises';
import { isAbsolute, join, relative, resolve, sep } from 'node:path';
import { pathToFileURL } from 'node:url';
import { createManifest, MANIFEST_PATH, resolveInside, serializeManifest } from '@marina/archive';
import { createServeError } from '../../errors.ts';
import { downloadErrors } from '../../model-download/download-errors.ts';
import { isUrlAllowed } from '../../model-download/resolve-model-url.ts';

/** A folder with more entries than this is not a model folder; it is not listed further. */
const MAX_FOLDER_ENTRIES = 1000;
/** The file the wrapped bare model is linked (or copied) to, as model-archiver names a serialized file. */
const WRAPPED_MODEL_FILE = 'model.onnx';

export interface ResolvedModelPath {
  /** What to register: an archive file or a folder. */
  archivePath: string;
  /** `wrapped-onnx`: a folder this module made around a bare .onnx, to delete when the model goes. */
  kind: 'archive' | 'folder' | 'wrapped-onnx';
  /** Bytes of the model on disk (archive file, or the .onnx), for predictModelSize. */
  diskBytes: number;
}

export interface ResolveModelPathOptions {
  modelPath: string;
  /** The ModelMesh modelId: the model's name; the wrapped folder carries it in its manifest. */
  modelId: string;
  modelStore: string | undefined;
  allowedUrls: readonly string[];
  /** Where bare .onnx files are wrapped (under the extraction cache, in a dot-folder the cache never evicts). */
  wrapDir: string;
  /** false: only look (predictModelSize); nothing is written. Default true. */
  isWrapping?: boolean;
}

function quoted(path: string): string {
  return JSON.stringify(path.length > 200 ? `${path.slice(0, 200)}…` : path);
}

function isInside(root: string, path: string): boolean {
  const rel = relative(root, path);
  return rel === '' || (!rel.startsWith(`..${sep}`) && rel !== '..' && !isAbsolute(rel));
}

function invalid(modelPath: string, why: string) {
  return createServeError.MARINA_ERR_MODEL_PATH_INVALID(
    `modelPath ${quoted(modelPath)} ${why}; give a .mar or .tar.gz archive, an extracted archive folder (MAR-INF/MANIFEST.json), a bare .onnx file, or a folder holding exactly one of those`,
  );
}

async function realpathOrNotFound(path: string, modelPath: string): Promise<string> {
  try {
    return await realpath(path);
  } catch (error) {
    throw downloadErrors.create.MARINA_ERR_MODEL_FILE_NOT_FOUND(
      `Model not found at: ${quoted(modelPath)} (modelPath names nothing this server can read)`,
      { cause: error },
    );
  }
}

/**
 * The model store, or allowed_urls for the file's `file://` URL: the same two rules as a register url.
 * @throws MARINA_ERR_URL_NOT_ALLOWED
 */
async function assertConfined(real: string, options: ResolveModelPathOptions): Promise<void> {
  const store = options.modelStore ? await realpath(options.modelStore).catch(() => undefined) : undefined;
  if (store !== undefined && isInside(store, real)) return;
  if (isUrlAllowed(pathToFileURL(real).href, options.allowedUrls)) return;
  throw downloadErrors.create.MARINA_ERR_URL_NOT_ALLOWED(
    `modelPath ${quoted(options.modelPath)} is outside the model store and matches no allowed_urls pattern; point ModelMesh's model folder (the runtime's /models) at model_store, or add a file:// pattern to allowed_urls`,
  );
}

async function hasManifest(folder: string): Promise<boolean> {
  return (await stat(join(folder, MANIFEST_PATH)).catch(() => undefined))?.isFile() === true;
}

/** zip (.mar) or gzip (.tar.gz) by its first bytes, as the archive reader decides. */
async function isArchiveFile(path: string): Promise<boolean> {
  const handle = await open(path, 'r');
  try {
    const head = Buffer.alloc(4);
    await handle.read(head, 0, 4, 0);
    return (head[0] === 0x50 && head[1] === 0x4b) || (head[0] === 0x1f && head[1] === 0x8b);
  } finally {
    await handle.close();
  }
}

const ARCHIVE_NAME = /\.(mar|model|tar\.gz|tgz)$/i;
const ONNX_NAME = /\.onnx$/i;

/**
 * Resolves and confines `modelPath` (see the module comment). A relative path is taken inside the
 * model store (ModelMesh passes the storage path as is when its storage helper is off).
 * @throws MARINA_ERR_MODEL_FILE_NOT_FOUND, MARINA_ERR_URL_NOT_ALLOWED, MARINA_ERR_URL_RELATIVE_PATH, MARINA_ERR_MODEL_PATH_INVALID
 */
export async function resolveModelPath(options: ResolveModelPathOptions): Promise<ResolvedModelPath> {
  const { modelPath } = options;
  if (modelPath.trim() === '') throw invalid(modelPath, 'is empty');
  if (modelPath.includes('\u0000')) throw invalid(modelPath, 'contains a NUL character');
  let given: string;
  if (isAbsolute(modelPath)) given = resolve(modelPath);
  else {
    if (!options.modelStore)
      throw downloadErrors.create.MARINA_ERR_MODEL_STORE_NOT_CONFIGURED(
        `modelPath ${quoted(modelPath)} is relative, and relative paths are read in the model store, which is not set; set model_store`,
      );
    try {
      given = resolveInside(options.modelStore, modelPath, 'modelPath');
    } catch (error) {
      throw downloadErrors.create.MARINA_ERR_URL_RELATIVE_PATH(
        `modelPath ${quoted(modelPath)} leaves the model store`,
        { cause: error },
      );
    }
  }
  let real = await realpathOrNotFound(given, modelPath);
  await assertConfined(real, options);
  let stats = await stat(real);
  if (stats.isDirectory()) {
    if (await hasManifest(real)) return { archivePath: real, kind: 'folder', diskBytes: 0 };
    // ModelMesh's storage helper pulls a model into /models/<modelId>/: one archive or one .onnx inside.
    const names: string[] = [];
    for (const entry of await readdir(real)) {
      if (entry.startsWith('.')) continue;
      names.push(entry);
      if (names.length > MAX_FOLDER_ENTRIES)
        throw invalid(modelPath, `is a folder with more than ${MAX_FOLDER_ENTRIES} entries`);
    }
    const candidates = names.filter((name) => ARCHIVE_NAME.test(name) || ONNX_NAME.test(name));
    if (candidates.length !== 1)
      throw invalid(
        modelPath,
        candidates.length === 0
          ? 'is a folder without MAR-INF/MANIFEST.json, an archive or an .onnx file'
          : `is a folder holding ${candidates.length} archives or .onnx files, not one`,
      );
    real = await realpathOrNotFound(join(real, candidates[0]!), modelPath);
    await assertConfined(real, options);
    stats = await stat(real);
    if (!stats.isFile()) throw invalid(modelPath, 'holds an archive or .onnx name that is not a file');
  }
  if (!stats.isFile()) throw invalid(modelPath, 'is neither a file nor a folder');
  if (ONNX_NAME.test(real)) {
    if (options.isWrapping === false) return { archivePath: real, kind: 'wrapped-onnx', diskBytes: stats.size };
    return { archivePath: await wrapOnnx(real, options), kind: 'wrapped-onnx', diskBytes: stats.size };
  }
  if (!(await isArchiveFile(real)))
    throw invalid(modelPath, 'is a file that is neither a zip (.mar) nor a gzip (.tar.gz) archive nor an .onnx');
  return { archivePath: real, kind: 'archive', diskBytes: stats.size };
}

/**
 * A one-model archive folder around a bare .onnx: MAR-INF/MANIFEST.json (name = modelId, version
 * 1.0, handler `tensor`) and the model hard-linked (copied across file systems) as model.onnx.
 * Written in a temporary folder and renamed, so a reader never sees half of it.
 */
async function wrapOnnx(onnxPath: string, options: ResolveModelPathOptions): Promise<string> {
  const key = createHash('sha256').update(`${options.modelId}\u0000${onnxPath}`).digest('hex').slice(0, 32);
  const folder = join(options.wrapDir, key);
  await rm(folder, { recursive: true, force: true });
  await mkdir(options.wrapDir, { recursive: true });
  const temp = join(options.wrapDir, `.tmp-${key}-${process.pid}-${Date.now()}`);
  try {
    await mkdir(join(temp, 'MAR-INF'), { recursive: true });
    const manifest = createManifest({
      modelName: options.modelId,
      modelVersion: '1.0',
      handler: 'tensor',
      serializedFile: WRAPPED_MODEL_FILE,
    });
    await writeFile(join(temp, MANIFEST_PATH), serializeManifest(manifest));
    try {
      await link(onnxPath, join(temp, WRAPPED_MODEL_FILE));
    } catch {
      await copyFile(onnxPath, join(temp, WRAPPED_MODEL_FILE));
    }
    await rename(temp, folder);
  } catch (error) {
    await rm(temp, { recursive: true, force: true });
    throw error;
  }
  return folder;
}

/** Deletes the folder `wrapOnnx` made for a bare .onnx (after a failed register or an unload); nothing for other kinds. */
export async function removeWrapped(resolved: ResolvedModelPath): Promise<void> {
  if (resolved.kind !== 'wrapped-onnx') return;
  if ((await lstat(resolved.archivePath).catch(() => undefined))?.isDirectory())
    await rm(resolved.archivePath, { recursive: true, force: true });
}
