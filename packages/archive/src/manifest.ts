import { readFile } from 'node:fs/promises';
import { basename, join } from 'node:path';
import { archiveErrors } from './errors.ts';
import { describeSchemaErrors, validateManifestSchema } from './schemas.ts';
import { ARCHIVER_VERSION } from './version.ts';

/** Where every archive keeps its manifest, relative to the archive root. */
export const MANIFEST_PATH = 'MAR-INF/MANIFEST.json';

/** TorchServe's model name rule (torch-model-archiver 0.12). */
export const MODEL_NAME_PATTERN = /^[A-Za-z0-9][A-Za-z0-9_\-.]*$/;

/** Longest model name or version Marina accepts (names become file and URL path segments). */
export const MODEL_NAME_MAX_LENGTH = 128;

/** Model versions: TorchServe leaves them free-form; Marina keeps them to one safe path segment (`1.0`, `2.1-rc1`, `3+cpu`). */
export const MODEL_VERSION_PATTERN = /^[A-Za-z0-9][A-Za-z0-9_\-.+]*$/;

/**
 * Why `value` is not a usable model name (or version), or undefined when it is: the archiver's rule
 * (`MODEL_NAME_PATTERN`; no `/`, `\`, control characters, leading `.` or `_`, so no
 * `__proto__`), no `..`, and at most `MODEL_NAME_MAX_LENGTH` characters.
 */
export function modelIdentityProblem(value: string, what: 'name' | 'version'): string | undefined {
  const pattern = what === 'name' ? MODEL_NAME_PATTERN : MODEL_VERSION_PATTERN;
  if (value.length > MODEL_NAME_MAX_LENGTH)
    return `is ${value.length} characters long, over the limit of ${MODEL_NAME_MAX_LENGTH}`;
  if (!pattern.test(value)) return `has characters outside the rule ${pattern.source}`;
  if (value.includes('..')) return "contains '..'";
  return undefined;
}

/**
 * Checks a model's name and version against `modelIdentityProblem`, wherever they came from
 * (register parameter, manifest, archive file name), before they become map keys, snapshot keys,
 * URL segments or folder names.
 * @throws MARINA_ERR_ARCHIVE_MODEL_NAME_INVALID (400) naming the offending value.
 */
export function assertModelIdentity(modelName: string, modelVersion: string): void {
  for (const [what, value] of [
    ['name', modelName],
    ['version', modelVersion],
  ] as const) {
    const problem = modelIdentityProblem(value, what);
    if (problem !== undefined) {
      throw archiveErrors.create.MARINA_ERR_ARCHIVE_MODEL_NAME_INVALID(
        `model ${what} ${JSON.stringify(value.length > 200 ? `${value.slice(0, 200)}…` : value)} ${problem}; use letters, digits, '-', '_' and '.' (${what === 'name' ? "e.g. 'resnet-152'" : "e.g. '1.0'"}), starting with a letter or digit`,
        { details: { [what === 'name' ? 'modelName' : 'modelVersion']: value } },
      );
    }
  }
}

/**
 * Runtimes accepted in `runtime`. TorchServe's three, plus Marina's `node`. Marina runs
 * every archive with JavaScript handlers whatever this says; the default stays `python`
 * so that TorchServe can read archives Marina writes ('node' archives it refuses).
 */
export const RUNTIMES = ['python', 'python3', 'LSP', 'node'] as const;
export type Runtime = (typeof RUNTIMES)[number];

/** The `model` object of MAR-INF/MANIFEST.json, TorchServe's field names. */
export interface ManifestModel {
  modelName: string;
  serializedFile?: string;
  handler?: string;
  modelFile?: string;
  modelVersion: string;
  requirementsFile?: string;
  configFile?: string;
  description?: string;
  envelope?: string;
  extensions?: string;
  /** Old MMS and other unknown keys are kept as read. */
  [key: string]: unknown;
}

/** MAR-INF/MANIFEST.json as torch-model-archiver writes it. Unknown keys are kept. */
export interface Manifest {
  createdOn?: string;
  runtime?: string;
  description?: string;
  model: ManifestModel;
  archiverVersion?: string;
  [key: string]: unknown;
}

function pad2(n: number): string {
  return String(n).padStart(2, '0');
}

/** `%d/%m/%Y %H:%M:%S` in local time, no zone: TorchServe's `createdOn`. */
export function formatCreatedOn(date: Date): string {
  return `${pad2(date.getDate())}/${pad2(date.getMonth() + 1)}/${date.getFullYear()} ${pad2(date.getHours())}:${pad2(date.getMinutes())}:${pad2(date.getSeconds())}`;
}

export interface CreateManifestOptions {
  modelName: string;
  modelVersion: string;
  /** Built-in name or module file name (basename, with any `:fn` suffix). */
  handler: string;
  serializedFile?: string;
  modelFile?: string;
  requirementsFile?: string;
  configFile?: string;
  /** Default `python`, like TorchServe. */
  runtime?: Runtime;
  /** Default now. */
  createdOn?: Date;
}

/**
 * Builds a manifest with TorchServe's key order (createdOn, runtime, model{modelName,
 * serializedFile, handler, modelFile, modelVersion, requirementsFile, configFile},
 * archiverVersion); unset optional keys are left out, as `json.dumps` of TorchServe's
 * objects does.
 */
export function createManifest(options: CreateManifestOptions): Manifest {
  const model: ManifestModel = { modelName: options.modelName } as ManifestModel;
  if (options.serializedFile !== undefined) model.serializedFile = options.serializedFile;
  model.handler = options.handler;
  if (options.modelFile !== undefined) model.modelFile = options.modelFile;
  model.modelVersion = options.modelVersion;
  if (options.requirementsFile !== undefined) model.requirementsFile = options.requirementsFile;
  if (options.configFile !== undefined) model.configFile = options.configFile;
  return {
    createdOn: formatCreatedOn(options.createdOn ?? new Date()),
    runtime: options.runtime ?? 'python',
    model,
    archiverVersion: ARCHIVER_VERSION,
  };
}

/** The manifest as TorchServe writes it: `json.dumps(indent=2)`. */
export function serializeManifest(manifest: Manifest): string {
  return JSON.stringify(manifest, null, 2);
}

/**
 * Parses and schema-checks a manifest's text.
 * @throws MARINA_ERR_ARCHIVE_MANIFEST_INVALID with every schema error in the message and in `details.errors`.
 */
export function parseManifest(text: string, source = MANIFEST_PATH): Manifest {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw archiveErrors.create.MARINA_ERR_ARCHIVE_MANIFEST_INVALID(
      `${source} is not valid JSON (${(error as Error).message}); re-create the archive with model-archiver`,
      { cause: error },
    );
  }
  if (!validateManifestSchema(value)) {
    const errors = describeSchemaErrors(validateManifestSchema.errors, 'manifest');
    throw archiveErrors.create.MARINA_ERR_ARCHIVE_MANIFEST_INVALID(
      `${source} does not match the manifest schema: ${errors.join('; ')}`,
      { details: { errors } },
    );
  }
  return value as Manifest;
}

/**
 * Reads `<modelDir>/MAR-INF/MANIFEST.json`. Returns undefined when the archive has no
 * manifest (TorchServe then derives one: see `normalizeManifest`).
 * @throws MARINA_ERR_ARCHIVE_MANIFEST_INVALID when it is not JSON or fails the schema.
 */
export async function readManifest(modelDir: string): Promise<Manifest | undefined> {
  let text: string;
  try {
    text = await readFile(join(modelDir, MANIFEST_PATH), 'utf8');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw error;
  }
  return parseManifest(text);
}

/**
 * TorchServe's model name for an archive loaded without one: the file name without
 * `.mar`/`.model`/`.tar.gz`, every non-word character (and a leading `_`) turned into `_`.
 */
export function modelNameFromArchivePath(archivePath: string): string {
  const stem = basename(archivePath.replace(/[\\/]+$/, '')).replace(/(\.mar|\.model|\.tar\.gz|\.tgz)$/i, '');
  return stem.replace(/\W/g, '_');
}

export interface NormalizeManifestOptions {
  /** Path of the archive or folder, used to derive a name. */
  archivePath: string;
  /** A name given by the caller (register request, `name=` in load_models); wins over the manifest's. */
  modelName?: string;
  /** A handler given by the caller; wins over the manifest's. */
  handler?: string;
}

/**
 * Fills the defaults TorchServe's server fills before validating
 * (`ModelManager.createModelArchive`): name from the caller, else the manifest, else the
 * file name; version "1.0"; handler from the caller, else the manifest. Works on a
 * missing manifest (a folder without MAR-INF). Never throws; returns a new object.
 */
export function normalizeManifest(
  manifest: Partial<Manifest> | undefined,
  options: NormalizeManifestOptions,
): Manifest {
  const model: Partial<ManifestModel> = { ...(manifest?.model ?? {}) };
  const modelName =
    options.modelName ??
    (typeof model.modelName === 'string' && model.modelName !== ''
      ? model.modelName
      : modelNameFromArchivePath(options.archivePath));
  const modelVersion = typeof model.modelVersion === 'string' && model.modelVersion !== '' ? model.modelVersion : '1.0';
  const handler = options.handler ?? model.handler;
  return {
    runtime: 'python',
    ...(manifest ?? {}),
    model: { ...model, modelName, modelVersion, ...(handler === undefined ? {} : { handler }) },
  };
}
