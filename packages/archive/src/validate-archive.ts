import { readQuantizationSummary, type QuantizationSummary } from './quantization-record.ts';
import { mkdtemp, readFile, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { extname, join, posix, relative, resolve, sep } from 'node:path';
import { closestName, isMarinaError } from '@marina/errors';
import { builtinHandlerNames, getBuiltinHandler, type ModelSignature, type TensorSignature } from '@marina/handlers';
import type { ArchiveErrorCode } from './errors.ts';
import { probeHandler } from './handler-probe.ts';
import { MANIFEST_PATH, modelIdentityProblem, type Manifest } from './manifest.ts';
import { parseModelConfig } from './model-config.ts';
import { resolveExtractLimits, type ExtractLimits } from './extract-limits.ts';
import {
  detectArchiveFormat,
  extractArchive,
  listArchive,
  type ArchiveEntry,
  type ArchiveFormat,
} from './open-archive.ts';
import { MANIFEST_FILE_FIELDS, resolveManifestPath } from './safe-path.ts';
import { defaultOrtTelemetryOff } from './ort-telemetry.ts';
import { describeSchemaErrors, validateManifestSchema } from './schemas.ts';

/** One thing wrong with an archive. `code` is stable (see docs/reference/errors.md); `message` says what and what to do. */
export interface ValidationProblem {
  code: ArchiveErrorCode;
  severity: 'error' | 'warning';
  message: string;
  /** The archive entry concerned, when there is one. */
  file?: string;
}

/** What `validateArchive` found. `isValid` is true when no problem has severity 'error'. */
export interface ValidationReport {
  isValid: boolean;
  archivePath: string;
  /** 'unknown' when the path is missing or is no archive. */
  format: ArchiveFormat | 'unknown';
  manifest?: Manifest;
  problems: ValidationProblem[];
  /** The ONNX model's inputs and outputs, when it was loaded. */
  model?: ModelSignature;
  /** From quantization.json, when the archive was written by model-archiver --quantize. */
  quantization?: QuantizationSummary;
}

/**
 * The extraction limits (`ExtractLimits`) apply to the archive being validated: a zip
 * bomb is reported as MARINA_ERR_ARCHIVE_TOO_LARGE, _TOO_MANY_ENTRIES or
 * _COMPRESSION_RATIO, from its declared sizes or from the bytes inflated while extracting.
 */
export interface ValidateArchiveOptions extends ExtractLimits {
  /** Load the ONNX model in onnxruntime-node and check it against the handler. Default true. */
  isModelLoadChecked?: boolean;
  /** Batch size to check the model against. Default: model-config.yaml's batchSize, else 1. */
  batchSize?: number;
  /** Time a custom handler module may take to import. Default 10000. */
  handlerImportTimeoutMs?: number;
}

const HANDLER_EXTENSIONS = ['.mjs', '.js', '.cjs'];
const INDEX_TO_NAME = 'index_to_name.json';
/** Built-in handlers that label their answers from index_to_name.json. */
const LABELLED_HANDLERS = ['image_classifier', 'object_detector'];
const SMALL_FILE_BYTES = 1_000_000;
// What handler-import-hooks.mjs resolves bare imports to: @marina/handlers' own dependencies.
const BARE_IMPORTS_AVAILABLE = 'sharp and onnxruntime-node';

/**
 * Without a model load the checks read only the manifest, configs, JSON and handler
 * code, so the (possibly huge) weights need not be extracted: their presence is known
 * from the entry list.
 */
function isNeededWithoutModelLoad(entry: ArchiveEntry): boolean {
  return entry.sizeBytes < SMALL_FILE_BYTES || /\.(json|ya?ml|mjs|cjs|js)$/i.test(entry.name);
}

async function isFile(path: string): Promise<boolean> {
  try {
    return (await stat(path)).isFile();
  } catch {
    return false;
  }
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** The number of classes index_to_name.json names, or a sentence saying why it is invalid. */
function countClassNames(text: string): number | string {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    return `is not valid JSON (${(error as Error).message})`;
  }
  if (!isRecord(value))
    return `must be a JSON object such as {"0": "tench", "1": "goldfish"}, got ${Array.isArray(value) ? 'a list' : typeof value}`;
  const keys = Object.keys(value);
  if (keys.length === 0) return 'is empty; it needs one name per output class';
  const badKey = keys.find((k) => !/^(0|[1-9]\d*)$/.test(k));
  if (badKey !== undefined) return `has the key '${badKey}', which is not a class index ("0", "1", ...)`;
  const badValue = keys.find((k) => {
    const v = value[k];
    return !(typeof v === 'string' || (Array.isArray(v) && v.length > 0 && typeof v[v.length - 1] === 'string'));
  });
  if (badValue !== undefined)
    return `maps '${badValue}' to ${JSON.stringify(value[badValue])}; each value must be a name or a list whose last element is the name`;
  return keys.length;
}

function toSignature(
  metadata: readonly { name: string; isTensor: boolean; type?: string; shape?: ReadonlyArray<number | string> }[],
): TensorSignature[] {
  return metadata.map((m) =>
    m.isTensor
      ? { name: m.name, type: m.type ?? 'unknown', shape: [...(m.shape ?? [])] }
      : { name: m.name, type: 'non-tensor', shape: [] },
  );
}

async function loadSignature(modelPath: string): Promise<ModelSignature> {
  // Imported here so the cheap checks (run after every archiving) never load the native runtime.
  defaultOrtTelemetryOff();
  const { InferenceSession } = await import('onnxruntime-node');
  const session = await InferenceSession.create(modelPath, {
    intraOpNumThreads: 1,
    graphOptimizationLevel: 'disabled',
  });
  try {
    return { inputs: toSignature(session.inputMetadata), outputs: toSignature(session.outputMetadata) };
  } finally {
    await session.release();
  }
}

/**
 * Tells whether an archive (zip/.mar, tar.gz or folder) will serve, listing every
 * problem found rather than stopping at the first: the container opens and has no entry
 * escaping its folder; the manifest matches schemas/manifest.schema.json; every file it
 * names is present; the handler resolves (built-in, or a module in the archive exporting
 * the handler contract, imported in a worker thread); model-config.yaml matches its
 * schema; index_to_name.json is well formed (and present, a warning, for image_classifier and
 * object_detector); and, unless `isModelLoadChecked` is false, the ONNX model loads and its
 * inputs/outputs fit the handler and its model-config.yaml `handler:` knobs. A fixed batch
 * dimension below the batch size is a warning, as serve logs it (`fixedBatchWarning`).
 * Never throws for a bad archive: every defect is a problem in the report.
 */
export async function validateArchive(path: string, options: ValidateArchiveOptions = {}): Promise<ValidationReport> {
  const archivePath = resolve(path);
  const report: ValidationReport = { isValid: false, archivePath, format: 'unknown', problems: [] };
  const check = createCheck(report);
  const isModelLoadChecked = options.isModelLoadChecked ?? true;
  const cleanup: { tempDir?: string } = {};
  try {
    const opened = await openForValidation({ check, options, isModelLoadChecked, cleanup });
    if (!opened) return finish(report);
    const model = await checkManifest(check, opened.modelDir);
    if (!model) return finish(report);
    const present = await checkManifestFiles(check, opened, model);
    const handlerName = typeof model.handler === 'string' ? model.handler : undefined;
    const builtin = handlerName === undefined ? undefined : getBuiltinHandler(handlerName);
    if (handlerName === undefined) {
      check.add(
        'MARINA_ERR_HANDLER_NOT_FOUND',
        `the manifest names no handler (model.handler); re-archive with --handler ${builtinHandlerNames.join(', ')} or a .js module`,
      );
    } else if (!builtin) {
      await checkCustomHandler(handlerName, {
        modelDir: opened.modelDir,
        inside: opened.inside,
        add: check.add,
        timeoutMs: options.handlerImportTimeoutMs,
      });
    }
    const config = await readConfig(check, model, present.get('configFile'));
    const configBatch = typeof config.batchSize === 'number' && config.batchSize > 0 ? config.batchSize : undefined;
    const classCount = await checkIndexToName(check, opened.modelDir, builtin);
    if (builtin && model.serializedFile === undefined) {
      check.add(
        'MARINA_ERR_ARCHIVE_NO_MODEL',
        `handler '${builtin.name}' runs an ONNX model but the manifest has no serializedFile; archive with --serialized-file model.onnx`,
      );
    }
    const modelPath = present.get('serializedFile');
    if (isModelLoadChecked && modelPath !== undefined)
      await checkModel(check, {
        model,
        modelPath,
        builtin,
        config,
        batchSize: options.batchSize ?? configBatch ?? 1,
        classCount,
      });
    return finish(report);
  } finally {
    if (cleanup.tempDir !== undefined) await rm(cleanup.tempDir, { recursive: true, force: true });
  }
}

/** Adds problems to the report. */
interface Check {
  report: ValidationReport;
  add(code: ArchiveErrorCode, message: string, extra?: { file?: string; severity?: 'error' | 'warning' }): void;
  /** A thrown error as a problem: its own code when it is a MarinaError, else MARINA_ERR_ARCHIVE_UNREADABLE. */
  addThrown(error: unknown): void;
}

function createCheck(report: ValidationReport): Check {
  const add: Check['add'] = (code, message, extra = {}) => {
    report.problems.push({
      code,
      severity: extra.severity ?? 'error',
      message,
      ...(extra.file === undefined ? {} : { file: extra.file }),
    });
  };
  return {
    report,
    add,
    addThrown(error) {
      if (isMarinaError(error))
        add(
          error.code as ArchiveErrorCode,
          error.message,
          typeof error.details?.file === 'string' ? { file: error.details.file } : {},
        );
      else add('MARINA_ERR_ARCHIVE_UNREADABLE', `cannot read '${report.archivePath}': ${(error as Error).message}`);
    },
  };
}

/** The archive's files, on disk: a folder as it is, a file extracted into a temporary folder. */
interface OpenedForValidation {
  modelDir: string;
  /** Whether the archive holds `path` (a path under modelDir). */
  hasFile(path: string): Promise<boolean>;
  /** A manifest-named file's path, or undefined (with a problem added) when it escapes. */
  inside(name: string, field: string): Promise<string | undefined>;
}

/**
 * Detects the format and extracts the archive (only what the checks need when the model is not
 * loaded); entries that would land outside its folder are problems. Undefined (with a problem)
 * when it cannot be read. The temporary folder is put in `cleanup` as soon as it exists.
 */
async function openForValidation(options: {
  check: Check;
  options: ValidateArchiveOptions;
  isModelLoadChecked: boolean;
  cleanup: { tempDir?: string };
}): Promise<OpenedForValidation | undefined> {
  const { check } = options;
  const { report } = check;
  const archivePath = report.archivePath;
  let modelDir: string;
  let unsafe: ArchiveEntry[];
  // Names of the archive's files relative to modelDir; undefined for a folder (checked on disk).
  let archiveFiles: Set<string> | undefined;
  try {
    report.format = await detectArchiveFormat(archivePath);
    if (report.format === 'folder') {
      unsafe = (await listArchive(archivePath)).entries.filter((e) => e.unsafeReason !== undefined);
      modelDir = archivePath;
    } else {
      const tempDir = await mkdtemp(join(tmpdir(), 'marina-validate-'));
      options.cleanup.tempDir = tempDir;
      const extracted = await extractArchive({
        archivePath,
        destDir: tempDir,
        onUnsafeEntry: 'skip',
        ...resolveExtractLimits(options.options),
        ...(options.isModelLoadChecked ? {} : { filter: isNeededWithoutModelLoad }),
      });
      unsafe = extracted.skippedEntries;
      modelDir = extracted.modelDir;
      const prefix = relative(tempDir, modelDir).split(sep).join('/');
      archiveFiles = new Set(
        extracted.entries
          .filter((e) => e.type === 'file' && e.unsafeReason === undefined)
          .map((e) => posix.normalize(e.name))
          .map((name) =>
            prefix === '' ? name : name.startsWith(`${prefix}/`) ? name.slice(prefix.length + 1) : `../${name}`,
          ),
      );
    }
  } catch (error) {
    check.addThrown(error);
    return undefined;
  }
  for (const entry of unsafe) {
    check.add(
      'MARINA_ERR_ARCHIVE_PATH_ESCAPE',
      `entry '${entry.name}' ${entry.unsafeReason}; it would land outside the archive folder, so it is refused (re-create the archive with model-archiver)`,
      { file: entry.name },
    );
  }
  return {
    modelDir,
    hasFile: async (path) =>
      archiveFiles ? archiveFiles.has(relative(modelDir, path).split(sep).join('/')) : isFile(path),
    inside: async (name, field) => {
      try {
        return await resolveManifestPath(modelDir, name, field);
      } catch (error) {
        check.addThrown(error);
        return undefined;
      }
    },
  };
}

/**
 * Reads the manifest and checks it against its schema, the model's name and version, and the
 * archiver's fields. Returns its `model` object, or undefined when there is none to go on with.
 */
async function checkManifest(check: Check, modelDir: string): Promise<Record<string, unknown> | undefined> {
  const raw = await readManifest(check, modelDir);
  if (raw === undefined) return undefined;
  if (!validateManifestSchema(raw)) {
    for (const sentence of describeSchemaErrors(validateManifestSchema.errors, 'manifest')) {
      check.add(
        'MARINA_ERR_ARCHIVE_MANIFEST_INVALID',
        `${MANIFEST_PATH} does not match the manifest schema: ${sentence}`,
        {
          file: MANIFEST_PATH,
        },
      );
    }
  }
  if (!isRecord(raw) || !isRecord(raw.model)) return undefined;
  check.report.manifest = raw as Manifest;
  const quantization = await readQuantizationSummary(modelDir);
  if (quantization) check.report.quantization = quantization;
  const model = raw.model;
  for (const [what, field] of [
    ['name', 'modelName'],
    ['version', 'modelVersion'],
  ] as const) {
    const value = model[field];
    const problem = typeof value === 'string' && value !== '' ? modelIdentityProblem(value, what) : undefined;
    if (problem !== undefined)
      check.add(
        'MARINA_ERR_ARCHIVE_MODEL_NAME_INVALID',
        `${MANIFEST_PATH} model.${field} ${JSON.stringify(value)} ${problem}; the server refuses to register it`,
        { file: MANIFEST_PATH },
      );
  }
  const missingMeta = (['archiverVersion', 'createdOn'] as const).filter((k) => raw[k] === undefined);
  if (missingMeta.length > 0) {
    check.add(
      'MARINA_ERR_ARCHIVE_MANIFEST_INCOMPLETE',
      `${MANIFEST_PATH} has no ${missingMeta.join(' and ')}; it will serve, but re-archiving with model-archiver records them`,
      { file: MANIFEST_PATH, severity: 'warning' },
    );
  }
  return model;
}

/** The manifest's JSON, or undefined (with a problem) when it is missing or not JSON. */
async function readManifest(check: Check, modelDir: string): Promise<unknown> {
  let manifestText: string;
  try {
    manifestText = await readFile(join(modelDir, MANIFEST_PATH), 'utf8');
  } catch {
    check.add(
      'MARINA_ERR_ARCHIVE_MANIFEST_MISSING',
      `the archive has no ${MANIFEST_PATH}; re-create it with model-archiver, which writes one`,
      { file: MANIFEST_PATH },
    );
    return undefined;
  }
  try {
    return JSON.parse(manifestText);
  } catch (error) {
    check.add(
      'MARINA_ERR_ARCHIVE_MANIFEST_INVALID',
      `${MANIFEST_PATH} is not valid JSON (${(error as Error).message}); re-create the archive with model-archiver`,
      { file: MANIFEST_PATH },
    );
    return undefined;
  }
}

/** Every file the manifest names must be in the archive: field → its path, for those present. */
async function checkManifestFiles(
  check: Check,
  opened: OpenedForValidation,
  model: Record<string, unknown>,
): Promise<Map<string, string>> {
  const present = new Map<string, string>();
  for (const field of MANIFEST_FILE_FIELDS) {
    const name = model[field];
    if (typeof name !== 'string' || name === '') continue;
    const path = await opened.inside(name, `model.${field}`);
    if (path === undefined) continue;
    if (await opened.hasFile(path)) present.set(field, path);
    else
      check.add(
        'MARINA_ERR_ARCHIVE_FILE_MISSING',
        `the manifest names ${field} '${name}' but the archive has no such file; add it or fix the manifest`,
        { file: name },
      );
  }
  return present;
}

/** model-config.yaml, parsed and checked against its schema; {} when absent or invalid. */
async function readConfig(
  check: Check,
  model: Record<string, unknown>,
  configPath: string | undefined,
): Promise<Record<string, unknown>> {
  if (configPath === undefined) return {};
  try {
    return parseModelConfig(await readFile(configPath, 'utf8'), String(model.configFile));
  } catch (error) {
    const sentences =
      isMarinaError(error) && Array.isArray(error.details?.errors)
        ? (error.details.errors as string[])
        : [(error as Error).message];
    for (const sentence of sentences)
      check.add('MARINA_ERR_MODEL_CONFIG_INVALID', `${String(model.configFile)}: ${sentence}`, {
        file: String(model.configFile),
      });
    return {};
  }
}

/**
 * index_to_name.json must be well formed; a labelled built-in handler without one answers with
 * indices (a warning). Returns its class count when it is well formed.
 */
async function checkIndexToName(
  check: Check,
  modelDir: string,
  builtin: ReturnType<typeof getBuiltinHandler>,
): Promise<number | undefined> {
  let classCount: number | undefined;
  const indexPath = join(modelDir, INDEX_TO_NAME);
  if (await isFile(indexPath)) {
    const counted = countClassNames(await readFile(indexPath, 'utf8'));
    if (typeof counted === 'number') classCount = counted;
    else check.add('MARINA_ERR_INDEX_TO_NAME_INVALID', `${INDEX_TO_NAME} ${counted}`, { file: INDEX_TO_NAME });
  }
  if (builtin && LABELLED_HANDLERS.includes(builtin.name) && !(await isFile(indexPath))) {
    check.add(
      'MARINA_ERR_INDEX_TO_NAME_MISSING',
      `handler ${builtin.name} answers with class indices ("0", "1", ...) because the archive has no ${INDEX_TO_NAME}; add one with --extra-files ${INDEX_TO_NAME} (a JSON object {"0": "tench", ...}) to answer with names`,
      { file: INDEX_TO_NAME, severity: 'warning' },
    );
  }
  return classCount;
}

/** Loads the ONNX model in onnxruntime-node and checks its signature against the built-in handler. */
async function checkModel(
  check: Check,
  options: {
    model: Record<string, unknown>;
    modelPath: string;
    builtin: ReturnType<typeof getBuiltinHandler>;
    config: Record<string, unknown>;
    batchSize: number;
    classCount: number | undefined;
  },
): Promise<void> {
  const { model, modelPath, builtin, classCount } = options;
  const modelName = String(model.serializedFile);
  try {
    check.report.model = await loadSignature(modelPath);
  } catch (error) {
    check.add(
      'MARINA_ERR_MODEL_LOAD_FAILED',
      `onnxruntime-node cannot load '${modelName}': ${(error as Error).message.split('\n')[0]!.replaceAll(modelPath, modelName)}; ${extname(modelName) === '.onnx' ? 're-export the model to ONNX' : 'Marina serves ONNX models: export the model to .onnx'}`,
      { file: modelName },
    );
  }
  if (!check.report.model || !builtin) return;
  // One rule with serve: a fixed batch dimension below batchSize is a warning (fixedBatchWarning), never a refusal.
  for (const problem of builtin.checkSignature(check.report.model, {
    batchSize: options.batchSize,
    modelYamlConfig: options.config,
    ...(classCount === undefined ? {} : { classCount }),
  })) {
    const file =
      problem.code === 'MARINA_ERR_INDEX_TO_NAME_MISMATCH'
        ? INDEX_TO_NAME
        : problem.code === 'MARINA_ERR_MODEL_CONFIG_INVALID'
          ? String(model.configFile ?? 'model-config.yaml')
          : modelName;
    check.add(problem.code as ArchiveErrorCode, problem.message, { file, severity: problem.severity ?? 'error' });
  }
}

async function checkCustomHandler(
  handlerName: string,
  context: {
    modelDir: string;
    inside: (name: string, field: string) => Promise<string | undefined>;
    add: (code: ArchiveErrorCode, message: string, extra?: { file?: string }) => void;
    timeoutMs: number | undefined;
  },
): Promise<void> {
  const suffix = /^(.+?):([A-Za-z_$][\w$]*)$/.exec(handlerName);
  const moduleName = suffix ? suffix[1]! : handlerName;
  const functionName = suffix ? suffix[2] : undefined;
  if (extname(moduleName) === '.py') {
    context.add(
      'MARINA_ERR_HANDLER_NOT_FOUND',
      `handler '${handlerName}' is a Python module; Marina runs JavaScript handlers: re-archive with a built-in handler (${builtinHandlerNames.join(', ')}) or a .js/.mjs module`,
      { file: moduleName },
    );
    return;
  }
  const base = await context.inside(moduleName, 'model.handler');
  if (base === undefined) return;
  const candidates = HANDLER_EXTENSIONS.includes(extname(base))
    ? [base]
    : [base, ...HANDLER_EXTENSIONS.map((ext) => `${base}${ext}`)];
  let modulePath: string | undefined;
  for (const candidate of candidates) {
    if (HANDLER_EXTENSIONS.includes(extname(candidate)) && (await isFile(candidate))) {
      modulePath = candidate;
      break;
    }
  }
  if (modulePath === undefined) {
    const closest = /[\\/.:]/.test(handlerName) ? undefined : closestName(handlerName, builtinHandlerNames);
    context.add(
      'MARINA_ERR_HANDLER_NOT_FOUND',
      `handler '${handlerName}' is not a built-in handler (${closest ? `did you mean '${closest}'? The built-in handlers are ` : ''}${builtinHandlerNames.join(', ')}) and the archive has no module ${moduleName}${extname(moduleName) === '' ? '(.mjs|.js|.cjs)' : ''}; add the module or re-archive with a built-in handler`,
      { file: moduleName },
    );
    return;
  }
  const result = await probeHandler({
    modulePath,
    ...(functionName === undefined ? {} : { functionName }),
    ...(context.timeoutMs === undefined ? {} : { timeoutMs: context.timeoutMs }),
  });
  const file = modulePath.slice(context.modelDir.length + 1);
  if (result.status === 'import-failed') {
    const hint = /Cannot find (package|module)/.test(result.message)
      ? `; a handler can import Node's built-ins, files in the archive, ${BARE_IMPORTS_AVAILABLE}, and packages the archive ships in its own node_modules folder`
      : '';
    context.add(
      'MARINA_ERR_HANDLER_IMPORT_FAILED',
      `handler module '${file}' cannot be imported: ${result.message}${hint}; run it with node to see the full error`,
      { file },
    );
  } else if (result.status === 'contract') {
    context.add(
      'MARINA_ERR_HANDLER_CONTRACT',
      `handler module '${file}' does not export the handler contract: ${result.message}. Export handle(data, context), or inference() with optional initialize/preprocess/postprocess, as named exports, a default object, a default class or a default zero-argument factory`,
      { file },
    );
  }
}

function finish(report: ValidationReport): ValidationReport {
  report.isValid = !report.problems.some((p) => p.severity === 'error');
  return report;
}
