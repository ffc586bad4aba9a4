import { mkdtemp, readdir, readFile, rm, stat } from 'node:fs/promises';
import { isMarinaError } from '@marina/errors';
import os from 'node:os';
import { basename, join } from 'node:path';
import * as ort from 'onnxruntime-node';
import {
  detectArchiveFormat,
  extractArchive,
  readManifest,
  readModelConfig,
  resolveManifestPath,
} from '@marina/archive';
import {
  preprocessImage,
  resolveImageClassifierOptions,
  resolveImageSegmenterOptions,
  resolveObjectDetectorOptions,
  sessionSignature,
  syntheticFeeds,
  syntheticRequestBody,
  type ImagePreprocessOptions,
  type ModelSignature,
} from '@marina/handlers';
import { benchErrors } from '../errors.ts';
import { getMachineInfo, type MachineInfo } from '../machine-info.ts';
import { summarizeOrtProfile, type OrtProfileSummary, type OrtTraceEvent } from './ort-profile.ts';

export interface ProfileOptions {
  /** An ONNX file, or an archive (.mar zip, .tar.gz, or an archive folder). */
  path: string;
  /** Rows per run (the dynamic batch dimension). Default 1. */
  batchSize?: number;
  /** Sizes of other dynamic dimensions by name (`sequence=128`); default 1. */
  dims?: Record<string, number>;
  /** A sample request body (an image for image_classifier archives). Default: the archive's `warmup.input`, else synthetic. */
  inputPath?: string;
  /** Profiled runs. Default 20. */
  runs?: number;
  /** Unprofiled runs first (first-run allocations). Default 3. */
  warmupRuns?: number;
  /** Intra-op threads. Default: every core (what one worker gets from the server). */
  intraOpNumThreads?: number;
  /** Returns onnxruntime's raw trace (Chrome trace format) in `traceText`. Default false. */
  keepTrace?: boolean;
  onProgress?: (message: string) => void;
}

interface ProfileInput {
  name: string;
  type: string;
  shape: number[];
}

export interface ProfileResult extends OrtProfileSummary {
  /** What was profiled: the file given. */
  source: string;
  /** The ONNX file run (inside the extracted archive for an archive). */
  modelFile: string;
  /** The archive's model name, or the ONNX file's name. */
  modelName: string;
  handler: string | undefined;
  batchSize: number;
  intraOpNumThreads: number;
  graphOptimizationLevel: 'all';
  /** How the inputs were made, in words (`image_classifier preprocessing of sample.jpg`, `synthetic from the signature`). */
  inputsFrom: string;
  inputs: ProfileInput[];
  signature: ModelSignature;
  machine: MachineInfo;
  loadAverage: number;
  startedAt: string;
  /** onnxruntime's raw trace, with `keepTrace`. */
  traceText?: string;
}

async function exists(path: string): Promise<boolean> {
  return stat(path).then(
    () => true,
    () => false,
  );
}

function invalid(message: string): Error {
  return benchErrors.create.MARINA_ERR_BENCH_OPTION_INVALID(message);
}

export interface ResolvedModel {
  modelFile: string;
  modelName: string;
  handler: string | undefined;
  modelYamlConfig: Record<string, unknown>;
  modelDir: string | undefined;
  modelVersion: string | undefined;
  cleanup: () => Promise<void>;
}

/** An ONNX file as it is; an archive extracted (safely, bounded) into a temporary folder: call `cleanup()` when done. */
export async function openModel(path: string): Promise<ResolvedModel> {
  if (!(await exists(path))) throw invalid(`'${path}' does not exist; give an .onnx file or a model archive (.mar)`);
  // Anything that is not a zip, a gzip or a folder is taken for an ONNX file, whatever its name.
  const isArchive = await detectArchiveFormat(path).then(
    () => true,
    (error: unknown) => {
      if (isMarinaError(error) && error.code === 'MARINA_ERR_ARCHIVE_UNREADABLE') return false;
      throw error;
    },
  );
  if (!isArchive) {
    return {
      modelFile: path,
      modelName: basename(path).replace(/\.onnx$/i, ''),
      handler: undefined,
      modelYamlConfig: {},
      modelDir: undefined,
      modelVersion: undefined,
      cleanup: async () => undefined,
    };
  }
  const tempDir = await mkdtemp(join(os.tmpdir(), 'marina-profile-'));
  const cleanup = () => rm(tempDir, { recursive: true, force: true });
  try {
    const { modelDir } = await extractArchive({ archivePath: path, destDir: join(tempDir, 'model') });
    const manifest = await readManifest(modelDir);
    if (!manifest) throw invalid(`'${path}' has no MAR-INF/MANIFEST.json; is it a model archive?`);
    const serialized = manifest.model.serializedFile;
    if (!serialized)
      throw invalid(`the archive's manifest names no serializedFile, so there is no ONNX model to profile`);
    const modelFile = await resolveManifestPath(modelDir, serialized, 'model.serializedFile');
    return {
      modelFile,
      modelName: manifest.model.modelName,
      handler: manifest.model.handler,
      modelYamlConfig: await readModelConfig(modelDir, manifest),
      modelDir,
      modelVersion: manifest.model.modelVersion,
      cleanup,
    };
  } catch (error) {
    await cleanup();
    throw error;
  }
}

/** The archive's warm-up sample (model-config.yaml `warmup.input`), contained in the archive. */
export async function warmupSamplePath(model: ResolvedModel): Promise<string | undefined> {
  const warmup = model.modelYamlConfig.warmup;
  const input = warmup && typeof warmup === 'object' ? (warmup as Record<string, unknown>).input : undefined;
  if (typeof input !== 'string' || model.modelDir === undefined) return undefined;
  return resolveManifestPath(model.modelDir, input, 'warmup.input');
}

/** The image preprocessing options of a built-in image handler, read as the handler reads them; undefined for other handlers. */
function imageOptions(model: ResolvedModel, signature: ModelSignature): ImagePreprocessOptions | undefined {
  const shape = signature.inputs[0]?.shape ?? [];
  if (model.handler === 'image_classifier') return resolveImageClassifierOptions(model.modelYamlConfig, shape);
  if (model.handler === 'image_segmenter') return resolveImageSegmenterOptions(model.modelYamlConfig, shape);
  if (model.handler === 'object_detector')
    return resolveObjectDetectorOptions(
      model.modelYamlConfig,
      shape,
      signature.outputs.map((o) => o.name),
    );
  return undefined;
}

/** Feeds for one run: the handler's own preprocessing of a sample image for the built-in image handlers, else synthetic from the signature. */
async function buildFeeds(
  model: ResolvedModel,
  signature: ModelSignature,
  options: ProfileOptions,
  batchSize: number,
): Promise<{ feeds: Record<string, ort.Tensor>; inputsFrom: string }> {
  const image = imageOptions(model, signature);
  const input = signature.inputs[0];
  if (image && input) {
    const samplePath = options.inputPath ?? (await warmupSamplePath(model));
    const sample = samplePath
      ? { body: await readFile(samplePath) }
      : await syntheticRequestBody('image_classifier', signature);
    const { height: h, width: w, channels } = image;
    const perImage = channels * h * w;
    const pixels = new Float32Array(perImage * batchSize);
    for (let i = 0; i < batchSize; i++)
      await preprocessImage(
        sample!.body,
        { ...image, limitInputPixels: true, isGeometryNeeded: false },
        pixels,
        i * perImage,
      );
    return {
      feeds: { [input.name]: new ort.Tensor('float32', pixels, [batchSize, channels, h, w]) },
      inputsFrom: `${model.handler} preprocessing (${image.resizeMode === 'crop' ? `resize ${image.resize}, crop ${h}x${w}` : `${image.resizeMode} to ${h}x${w}`}) of ${samplePath ? basename(samplePath) : `a synthetic ${Math.round((w * 640) / 224)}x${Math.round((h * 480) / 224)} JPEG of noise`}`,
    };
  }
  if (options.inputPath)
    throw invalid(
      `--input is used only for archives with a built-in image handler (image_classifier, image_segmenter, object_detector); this model${model.handler ? `'s handler is '${model.handler}'` : ' is a bare ONNX file'}, so its inputs are made from the signature (use --dim for dynamic sizes)`,
    );
  return {
    feeds: syntheticFeeds(signature, { batchSize, dims: options.dims }),
    inputsFrom: 'synthetic from the signature (seeded random floats, zero integers)',
  };
}

/**
 * Runs a model under onnxruntime's profiler and sums where the time goes, per node and per
 * operator type. Works on any ONNX model: inputs come from its signature (or, for an
 * image_classifier archive, from the handler's own preprocessing of a sample image). The session
 * is built as the server builds a worker's by default: graph optimisation 'all', spinning on.
 *
 * @throws MARINA_ERR_BENCH_OPTION_INVALID for a missing file, a bad option or an archive without a model;
 *   the archive's own errors (MARINA_ERR_ARCHIVE_*) for a broken archive.
 */
export async function profileModel(options: ProfileOptions): Promise<ProfileResult> {
  const batchSize = options.batchSize ?? 1;
  const runs = options.runs ?? 20;
  const warmupRuns = options.warmupRuns ?? 3;
  const intraOpNumThreads = options.intraOpNumThreads ?? os.availableParallelism();
  for (const [name, value, min] of [
    ['--batch-size', batchSize, 1],
    ['--runs', runs, 1],
    ['--warmup-runs', warmupRuns, 0],
    ['--threads', intraOpNumThreads, 1],
  ] as const) {
    if (!Number.isInteger(value) || value < min)
      throw invalid(`${name} must be a whole number of ${min} or more, got ${value}`);
  }
  const startedAt = new Date().toISOString();
  const model = await openModel(options.path);
  const traceDir = await mkdtemp(join(os.tmpdir(), 'marina-profile-trace-'));
  try {
    const sessionOptions: ort.InferenceSession.SessionOptions = {
      graphOptimizationLevel: 'all',
      intraOpNumThreads,
      interOpNumThreads: 1,
      extra: { session: { 'intra_op.allow_spinning': '1' } },
    };
    // The signature first, from a session without the profiler, so the profile holds only the runs.
    options.onProgress?.(`loading ${model.modelFile}`);
    const probe = await ort.InferenceSession.create(model.modelFile, sessionOptions).catch((error: unknown) => {
      throw benchErrors.create.MARINA_ERR_BENCH_PROFILE_FAILED(
        `onnxruntime cannot load ${model.modelFile}: ${(error as Error).message}`,
        { cause: error },
      );
    });
    const signature = sessionSignature(probe);
    await probe.release();
    const { feeds, inputsFrom } = await buildFeeds(model, signature, options, batchSize);
    const session = await ort.InferenceSession.create(model.modelFile, {
      ...sessionOptions,
      enableProfiling: true,
      profileFilePrefix: join(traceDir, 'ort'),
    });
    try {
      for (let i = 0; i < warmupRuns + runs; i++) {
        options.onProgress?.(`run ${i + 1}/${warmupRuns + runs}${i < warmupRuns ? ' (warm-up)' : ''}`);
        await session.run(feeds).catch((error: unknown) => {
          const shapes = Object.entries(feeds)
            .map(([name, t]) => `${name} ${t.type}[${t.dims.join(',')}]`)
            .join(', ');
          throw benchErrors.create.MARINA_ERR_BENCH_PROFILE_FAILED(
            `the model failed to run on ${shapes}: ${(error as Error).message}; give the sizes of dynamic dimensions with --dim name=N`,
            { cause: error },
          );
        });
      }
    } finally {
      session.endProfiling();
      await session.release();
    }
    const traceFile = (await readdir(traceDir)).find((f) => f.endsWith('.json'));
    if (!traceFile)
      throw benchErrors.create.MARINA_ERR_BENCH_PROFILE_FAILED(`onnxruntime wrote no profile into ${traceDir}`);
    const traceText = await readFile(join(traceDir, traceFile), 'utf8');
    const summary = summarizeOrtProfile(JSON.parse(traceText) as OrtTraceEvent[], { skipRuns: warmupRuns });
    return {
      ...summary,
      source: options.path,
      modelFile: model.modelDir ? basename(model.modelFile) : model.modelFile,
      modelName: model.modelName,
      handler: model.handler,
      batchSize,
      intraOpNumThreads,
      graphOptimizationLevel: 'all',
      inputsFrom,
      inputs: Object.entries(feeds).map(([name, t]) => ({ name, type: t.type, shape: [...t.dims] })),
      signature,
      machine: getMachineInfo(),
      loadAverage: Number((await readFile('/proc/loadavg', 'utf8').catch(() => 'NaN')).split(' ')[0]),
      startedAt,
      ...(options.keepTrace ? { traceText } : {}),
    };
  } finally {
    await rm(traceDir, { recursive: true, force: true });
    await model.cleanup();
  }
}
