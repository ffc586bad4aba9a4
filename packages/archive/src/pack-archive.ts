import { randomBytes } from 'node:crypto';
import { createReadStream, createWriteStream, type ReadStream, type Stats } from 'node:fs';
import { lstat, mkdir, readdir, rename, rm, stat, writeFile } from 'node:fs/promises';
import { basename, dirname, extname, join, resolve } from 'node:path';
import { once } from 'node:events';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import archiver from 'archiver';
import { glob } from 'tinyglobby';
import { isMarinaError } from '@marina/errors';
import { closestName } from '@marina/errors';
import { builtinHandlerNames, getBuiltinHandler } from '@marina/handlers';
import { archiveErrors } from './errors.ts';
import {
  createManifest,
  MANIFEST_PATH,
  MODEL_NAME_PATTERN,
  modelIdentityProblem,
  RUNTIMES,
  serializeManifest,
  type Manifest,
  type Runtime,
} from './manifest.ts';

/** torch-model-archiver's `--archive-format` values. */
export const ARCHIVE_FORMATS = ['default', 'zip-store', 'tgz', 'no-archive'] as const;
export type ArchiveFormatOption = (typeof ARCHIVE_FORMATS)[number];

/** torch-model-archiver's flags, TorchServe's meaning. Relative paths resolve against `cwd`. */
export interface PackOptions {
  /** `--model-name`: the output's base name; TorchServe's rule `^[A-Za-z0-9][A-Za-z0-9_\-.]*$`. */
  modelName: string;
  /** `-v/--version`: free-form, written to `model.modelVersion`. */
  modelVersion: string;
  /** `--handler`: a built-in name (`image_classifier`, `image_segmenter`, `object_detector`, `tensor`) or a path to a .js/.mjs/.cjs module, optionally `:fn`. */
  handler: string;
  /** `--serialized-file`: the ONNX model; stored by basename. */
  serializedFile?: string;
  /** `--model-file`: stored by basename (kept for TorchServe compatibility; Marina does not use it). */
  modelFile?: string;
  /** `--extra-files`: files, folders (their contents, recursively) and globs (`*`, `?`, `[..]`). */
  extraFiles?: string[];
  /** `-r/--requirements-file`. */
  requirementsFile?: string;
  /** `-c/--config-file`: the model-config.yaml. */
  configFile?: string;
  /** `--runtime`, default `python` (see RUNTIMES). */
  runtime?: Runtime;
  /** `--export-path`, default `cwd`; created when missing. */
  exportPath?: string;
  /** `--archive-format`, default `default` (zip, deflate). */
  archiveFormat?: ArchiveFormatOption;
  /** `-f/--force`: overwrite an existing output. Default false. */
  isForced?: boolean;
  /** Folder relative paths resolve against. Default `process.cwd()`. */
  cwd?: string;
  /**
   * Called with the finished output under its temporary name, before it replaces `outputPath`;
   * throwing abandons it (nothing is left behind) and `packArchive` rethrows the error. The
   * CLI validates the archive here, so a refused archive is never written.
   */
  verify?: (tempOutputPath: string) => Promise<void>;
}

export interface PackProgress {
  /** Input bytes read so far. */
  bytesDone: number;
  /** Input bytes to read in all (every file that goes in). */
  bytesTotal: number;
}

export interface PackResult {
  /** The .mar, .tar.gz or folder written. */
  outputPath: string;
  /** Size of the output (for no-archive: of the files in it). */
  bytes: number;
  manifest: Manifest;
  /** Things the user should hear about that did not stop archiving (a glob that matched nothing). */
  warnings: string[];
}

interface PlannedEntry {
  /** '/'-separated name in the archive root. */
  name: string;
  source: string;
  stats: Stats;
}

const GLOB_MAGIC = /[*?[]/;
const SKIPPED_FOLDERS = new Set(['__pycache__', '__MACOSX']);
const PYTHON_BUILTINS = ['text_classifier', 'dali_image_classifier', 'vllm_handler', 'trt_llm_handler'];
const HANDLER_EXTENSIONS = ['.mjs', '.js', '.cjs'];

/** The output path `packArchive` writes for these options (does not touch the disk). */
export function archiveOutputPath(options: {
  modelName: string;
  exportPath: string;
  archiveFormat?: ArchiveFormatOption;
}): string {
  const format = options.archiveFormat ?? 'default';
  const fileName =
    format === 'tgz'
      ? `${options.modelName}.tar.gz`
      : format === 'no-archive'
        ? options.modelName
        : `${options.modelName}.mar`;
  return join(options.exportPath, fileName);
}

async function statOrUndefined(path: string): Promise<Stats | undefined> {
  try {
    return await stat(path);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT' || (error as NodeJS.ErrnoException).code === 'ENOTDIR')
      return undefined;
    throw error;
  }
}

async function requireFile(flag: string, path: string, cwd: string): Promise<PlannedEntry> {
  const source = resolve(cwd, path);
  const stats = await statOrUndefined(source);
  if (stats === undefined)
    throw archiveErrors.create.MARINA_ERR_ARCHIVE_INPUT_MISSING(
      `${flag}: File does not exist: ${source}; check the path`,
      { details: { file: source } },
    );
  if (!stats.isFile())
    throw archiveErrors.create.MARINA_ERR_ARCHIVE_INPUT_MISSING(
      `${flag}: ${source} is not a file; give the path of a file`,
      { details: { file: source } },
    );
  return { name: basename(source), source, stats };
}

/** A folder's files, names relative to it, skipping __pycache__, __MACOSX and dot-folders as TorchServe does. */
async function folderEntries(root: string, prefix = ''): Promise<PlannedEntry[]> {
  const entries: PlannedEntry[] = [];
  for (const dirent of (await readdir(root, { withFileTypes: true })).sort((a, b) => a.name.localeCompare(b.name))) {
    const source = join(root, dirent.name);
    const stats = await stat(source);
    if (stats.isDirectory()) {
      if (SKIPPED_FOLDERS.has(dirent.name) || dirent.name.startsWith('.')) continue;
      entries.push(...(await folderEntries(source, `${prefix}${dirent.name}/`)));
    } else if (stats.isFile()) {
      entries.push({ name: `${prefix}${dirent.name}`, source, stats });
    }
  }
  return entries;
}

async function extraFileEntries(items: readonly string[], cwd: string, warnings: string[]): Promise<PlannedEntry[]> {
  const entries: PlannedEntry[] = [];
  for (const item of items.map((i) => i.trim()).filter((i) => i !== '')) {
    let sources: string[];
    if (GLOB_MAGIC.test(item)) {
      const matches = await glob(item, {
        cwd,
        absolute: true,
        onlyFiles: false,
        expandDirectories: false,
        braceExpansion: false,
        extglob: false,
        dot: false,
      });
      if (matches.length === 0) warnings.push(`--extra-files: the pattern '${item}' matched no files`);
      sources = matches.map((m) => resolve(m)).sort();
    } else {
      sources = [resolve(cwd, item)];
    }
    for (const source of sources) {
      const stats = await statOrUndefined(source);
      if (stats === undefined)
        throw archiveErrors.create.MARINA_ERR_ARCHIVE_INPUT_MISSING(
          `--extra-files: File does not exist: ${source}; check the path`,
          { details: { file: source } },
        );
      if (stats.isDirectory()) entries.push(...(await folderEntries(source)));
      else entries.push({ name: basename(source), source, stats });
    }
  }
  return entries;
}

function handlerNotFound(handler: string, why: string): Error {
  return archiveErrors.create.MARINA_ERR_HANDLER_NOT_FOUND(
    `--handler '${handler}' ${why}; use a built-in handler (${builtinHandlerNames.join(', ')}) or the path of a JavaScript module (.mjs, .js or .cjs), optionally followed by :functionName`,
    { details: { handler } },
  );
}

/**
 * Resolves `--handler`: a built-in name stays as is; a module path is found (trying
 * .mjs/.js/.cjs when it has no extension) and copied; the manifest gets its file name
 * plus any `:fn` suffix.
 */
async function resolveHandler(
  handler: string,
  cwd: string,
): Promise<{ manifestHandler: string; entry?: PlannedEntry }> {
  if (getBuiltinHandler(handler)) return { manifestHandler: handler };
  const suffix = /^(.+?):([A-Za-z_$][\w$]*)$/.exec(handler);
  // 'C:\\handler' is a Windows drive, not a function suffix.
  const isFunctionSuffix = suffix !== null && !/^[A-Za-z]$/.test(suffix[1]!);
  const modulePath = isFunctionSuffix ? suffix[1]! : handler;
  const functionName = isFunctionSuffix ? suffix[2] : undefined;
  if (PYTHON_BUILTINS.includes(handler))
    throw handlerNotFound(handler, "is one of TorchServe's Python handlers, which Marina does not run");
  if (extname(modulePath) === '.py')
    throw handlerNotFound(handler, 'is a Python module; Marina runs JavaScript handlers');
  const base = resolve(cwd, modulePath);
  const candidates = HANDLER_EXTENSIONS.includes(extname(base))
    ? [base]
    : [base, ...HANDLER_EXTENSIONS.map((ext) => `${base}${ext}`)];
  for (const candidate of candidates) {
    const stats = await statOrUndefined(candidate);
    if (stats?.isFile() && HANDLER_EXTENSIONS.includes(extname(candidate))) {
      const name = basename(candidate);
      return {
        manifestHandler: functionName === undefined ? name : `${name}:${functionName}`,
        entry: { name, source: candidate, stats },
      };
    }
  }
  const closest = isFunctionSuffix || /[\\/.]/.test(handler) ? undefined : closestName(handler, builtinHandlerNames);
  if (closest)
    throw handlerNotFound(
      handler,
      `is not a built-in handler (did you mean '${closest}'?) and no module was found at ${candidates.join(' or ')}`,
    );
  throw handlerNotFound(handler, `is not a built-in handler and no module was found at ${candidates.join(' or ')}`);
}

function checkConflicts(entries: PlannedEntry[]): PlannedEntry[] {
  const byName = new Map<string, PlannedEntry>();
  for (const entry of entries) {
    if (entry.name === 'MAR-INF' || entry.name.startsWith('MAR-INF/')) {
      throw archiveErrors.create.MARINA_ERR_ARCHIVE_ENTRY_CONFLICT(
        `'${entry.source}' would be stored as '${entry.name}', inside the reserved MAR-INF folder; rename it`,
        { details: { file: entry.source } },
      );
    }
    const seen = byName.get(entry.name);
    if (seen && seen.source !== entry.source) {
      throw archiveErrors.create.MARINA_ERR_ARCHIVE_ENTRY_CONFLICT(
        `'${seen.source}' and '${entry.source}' would both be stored as '${entry.name}' (the archive is flat); rename one of them`,
        { details: { file: entry.name } },
      );
    }
    if (!seen) byName.set(entry.name, entry);
  }
  return [...byName.values()];
}

/** A file read stream opened only when first read, so a thousand entries hold one descriptor at a time; counts bytes. */
function lazyCountingStream(path: string, onBytes: (bytes: number) => void): Readable {
  let inner: ReadStream | undefined;
  const stream: Readable = new Readable({
    read() {
      if (inner) {
        inner.resume();
        return;
      }
      inner = createReadStream(path, { highWaterMark: 1024 * 1024 });
      inner.on('data', (chunk) => {
        onBytes(chunk.length);
        if (!stream.push(chunk)) inner!.pause();
      });
      inner.on('end', () => stream.push(null));
      inner.on('error', (error) => stream.destroy(error));
    },
    destroy(error, callback) {
      inner?.destroy();
      callback(error);
    },
  });
  return stream;
}

async function writeContainer(options: {
  format: Exclude<ArchiveFormatOption, 'no-archive'>;
  tempPath: string;
  rootPrefix: string;
  entries: PlannedEntry[];
  manifestText: string;
  onBytes: (bytes: number) => void;
}): Promise<void> {
  const archive =
    options.format === 'tgz'
      ? archiver('tar', { gzip: true, gzipOptions: { level: 6 } })
      : archiver('zip', options.format === 'zip-store' ? { store: true } : { zlib: { level: 6 } });
  const output = createWriteStream(options.tempPath, { flags: 'wx' });
  let fail: (error: unknown) => void = () => {};
  const failure = new Promise<never>((_, reject) => {
    fail = reject;
  });
  failure.catch(() => {});
  output.on('error', fail);
  archive.on('error', fail);
  // archiver reports unreadable inputs as warnings; an archive missing a file is a failure here.
  archive.on('warning', fail);
  const closed = new Promise<void>((resolveClosed) => output.on('close', resolveClosed));
  archive.pipe(output);
  try {
    // One entry at a time: archiver pipes every appended stream at once, which would open
    // every file together and lose a source's read error; waiting for 'entry' avoids both.
    const add = async (source: Readable | string, name: string, stats?: Stats): Promise<void> => {
      const added = once(archive, 'entry');
      if (typeof source !== 'string') source.once('error', fail);
      archive.append(source, stats ? { name, stats, date: stats.mtime, mode: stats.mode & 0o777 } : { name });
      await Promise.race([added, failure]);
    };
    await add(options.manifestText, `${options.rootPrefix}${MANIFEST_PATH}`);
    for (const entry of options.entries) {
      await add(lazyCountingStream(entry.source, options.onBytes), `${options.rootPrefix}${entry.name}`, entry.stats);
    }
    await Promise.race([Promise.all([archive.finalize(), closed]), failure]);
  } catch (error) {
    archive.abort();
    output.destroy();
    await closed;
    throw error;
  }
}

async function writeFolder(options: {
  tempPath: string;
  entries: PlannedEntry[];
  manifestText: string;
  onBytes: (bytes: number) => void;
}): Promise<void> {
  await mkdir(join(options.tempPath, dirname(MANIFEST_PATH)), { recursive: true });
  await writeFile(join(options.tempPath, MANIFEST_PATH), options.manifestText);
  for (const entry of options.entries) {
    const target = join(options.tempPath, ...entry.name.split('/'));
    await mkdir(dirname(target), { recursive: true });
    await pipeline(
      lazyCountingStream(entry.source, options.onBytes),
      createWriteStream(target, { flags: 'wx', mode: entry.stats.mode & 0o777 }),
    );
  }
}

/**
 * Packs a model archive the way torch-model-archiver does: a flat layout with
 * MAR-INF/MANIFEST.json, as a zip (deflate or store), a tar.gz under a `<name>/` root,
 * or a plain folder. Streams every file (memory stays bounded whatever the model size),
 * writes to a temporary name in the export folder and renames on success; on any error
 * nothing is left behind. Built-in handlers are not copied; a handler module is.
 *
 * @param options.onProgress called as input bytes are read (often; throttle any drawing).
 * @throws MARINA_ERR_ARCHIVE_MODEL_NAME_INVALID, MARINA_ERR_ARCHIVE_OPTION_INVALID,
 *   MARINA_ERR_HANDLER_NOT_FOUND, MARINA_ERR_ARCHIVE_INPUT_MISSING,
 *   MARINA_ERR_ARCHIVE_ENTRY_CONFLICT, MARINA_ERR_ARCHIVE_EXPORT_PATH_NOT_DIR,
 *   MARINA_ERR_ARCHIVE_OUTPUT_EXISTS, MARINA_ERR_ARCHIVE_WRITE_FAILED.
 */
export async function packArchive(
  options: PackOptions & { onProgress?: (progress: PackProgress) => void },
): Promise<PackResult> {
  const cwd = resolve(options.cwd ?? process.cwd());
  const format = options.archiveFormat ?? 'default';
  const runtime = options.runtime ?? 'python';
  const nameProblem = modelIdentityProblem(options.modelName, 'name');
  if (nameProblem !== undefined) {
    throw archiveErrors.create.MARINA_ERR_ARCHIVE_MODEL_NAME_INVALID(
      `Model name '${options.modelName}' ${nameProblem === `has characters outside the rule ${MODEL_NAME_PATTERN.source}` ? 'contains special characters. The allowed regular expression filter for model name is: ^[A-Za-z0-9][A-Za-z0-9_\\-.]*$' : nameProblem} (e.g. 'resnet-152')`,
      { details: { modelName: options.modelName } },
    );
  }
  if (!ARCHIVE_FORMATS.includes(format)) {
    throw archiveErrors.create.MARINA_ERR_ARCHIVE_OPTION_INVALID(
      `--archive-format '${String(format)}' is not one of ${ARCHIVE_FORMATS.join(', ')}`,
      { details: { archiveFormat: format } },
    );
  }
  if (!RUNTIMES.includes(runtime)) {
    throw archiveErrors.create.MARINA_ERR_ARCHIVE_OPTION_INVALID(
      `--runtime '${String(runtime)}' is not one of ${RUNTIMES.join(', ')}`,
      { details: { runtime } },
    );
  }
  if (options.modelVersion.trim() === '') {
    throw archiveErrors.create.MARINA_ERR_ARCHIVE_OPTION_INVALID(
      '-v/--version is empty; give a model version such as 1.0',
    );
  }

  const exportPath = resolve(cwd, options.exportPath ?? '.');
  const exportStats = await statOrUndefined(exportPath);
  if (exportStats && !exportStats.isDirectory()) {
    throw archiveErrors.create.MARINA_ERR_ARCHIVE_EXPORT_PATH_NOT_DIR(
      `Given export-path ${exportPath} is not a directory. Point to a valid export-path directory.`,
      { details: { exportPath } },
    );
  }
  const outputPath = archiveOutputPath({ modelName: options.modelName, exportPath, archiveFormat: format });
  const existing = await lstat(outputPath).catch(() => undefined);
  if (existing && !options.isForced) {
    throw archiveErrors.create.MARINA_ERR_ARCHIVE_OUTPUT_EXISTS(
      `${outputPath} already exists.\nPlease specify --force/-f option to overwrite the model archive output file.\nSee -h/--help for more details.`,
      { details: { outputPath } },
    );
  }

  const handler = await resolveHandler(options.handler, cwd);
  const planned: PlannedEntry[] = [];
  if (handler.entry) planned.push(handler.entry);
  const serialized =
    options.serializedFile === undefined
      ? undefined
      : await requireFile('--serialized-file', options.serializedFile, cwd);
  const modelFile =
    options.modelFile === undefined ? undefined : await requireFile('--model-file', options.modelFile, cwd);
  const requirements =
    options.requirementsFile === undefined
      ? undefined
      : await requireFile('--requirements-file', options.requirementsFile, cwd);
  const config =
    options.configFile === undefined ? undefined : await requireFile('--config-file', options.configFile, cwd);
  for (const entry of [serialized, modelFile, requirements, config]) if (entry) planned.push(entry);
  const warnings: string[] = [];
  planned.push(...(await extraFileEntries(options.extraFiles ?? [], cwd, warnings)));
  const entries = checkConflicts(planned);

  const manifest = createManifest({
    modelName: options.modelName,
    modelVersion: options.modelVersion,
    handler: handler.manifestHandler,
    ...(serialized ? { serializedFile: serialized.name } : {}),
    ...(modelFile ? { modelFile: modelFile.name } : {}),
    ...(requirements ? { requirementsFile: requirements.name } : {}),
    ...(config ? { configFile: config.name } : {}),
    runtime,
  });
  const manifestText = serializeManifest(manifest);

  const bytesTotal = entries.reduce((sum, e) => sum + e.stats.size, 0);
  let bytesDone = 0;
  const onBytes = (bytes: number): void => {
    bytesDone += bytes;
    options.onProgress?.({ bytesDone, bytesTotal });
  };
  options.onProgress?.({ bytesDone, bytesTotal });

  await mkdir(exportPath, { recursive: true });
  const tempPath = join(exportPath, `.${basename(outputPath)}.tmp-${process.pid}-${randomBytes(4).toString('hex')}`);
  try {
    if (format === 'no-archive') await writeFolder({ tempPath, entries, manifestText, onBytes });
    else
      await writeContainer({
        format,
        tempPath,
        rootPrefix: format === 'tgz' ? `${options.modelName}/` : '',
        entries,
        manifestText,
        onBytes,
      });
  } catch (error) {
    await rm(tempPath, { recursive: true, force: true });
    if (isMarinaError(error)) throw error;
    throw archiveErrors.create.MARINA_ERR_ARCHIVE_WRITE_FAILED(
      `writing ${outputPath} failed: ${(error as Error).message}; nothing was written`,
      { cause: error, details: { outputPath } },
    );
  }
  try {
    await options.verify?.(tempPath);
  } catch (error) {
    await rm(tempPath, { recursive: true, force: true });
    throw error;
  }
  try {
    await replace(tempPath, outputPath);
  } catch (error) {
    await rm(tempPath, { recursive: true, force: true });
    if (isMarinaError(error)) throw error;
    throw archiveErrors.create.MARINA_ERR_ARCHIVE_WRITE_FAILED(
      `writing ${outputPath} failed: ${(error as Error).message}; nothing was written`,
      { cause: error, details: { outputPath } },
    );
  }
  const bytes = format === 'no-archive' ? bytesTotal + Buffer.byteLength(manifestText) : (await stat(outputPath)).size;
  return { outputPath, bytes, manifest, warnings };
}

/** Moves a finished temp output over `target`; an existing folder is moved aside first, then removed. */
async function replace(tempPath: string, target: string): Promise<void> {
  const existing = await lstat(target).catch(() => undefined);
  if (!existing?.isDirectory()) {
    await rename(tempPath, target);
    return;
  }
  const aside = `${target}.old-${process.pid}-${randomBytes(4).toString('hex')}`;
  await rename(target, aside);
  await rename(tempPath, target);
  await rm(aside, { recursive: true, force: true });
}
