import { access, mkdir, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { createError } from './errors.ts';
import { loadImagenetClassNames, writeIndexToName } from './imagenet-class-names.ts';
import { readModelMetadata, type WriteModelResult } from './onnx-model-writer.ts';
import { writeResnet } from './resnet.ts';
import { writeSampleJpeg } from './sample-image.ts';
import { writeMixedTypesModel, writeTinyClassifier, writeTinyTensorModel } from './tiny-models.ts';
import { writeHeadClassifier, writeTinyDetector, writeTinySegmenter } from './handler-models.ts';
import { pathOption, seedOption } from './validate-options.ts';

/** Models `generateModels` (and `marina-models generate`) can write, each to `<outDir>/<name>.onnx`. */
export const GENERATABLE_MODELS = [
  'resnet-18',
  'resnet-50',
  'resnet-152',
  'tiny',
  'tiny-tensor',
  'mixed-types',
  'softmax-classifier',
  'tiny-segmenter',
  'tiny-detector',
] as const;
export type GeneratableModel = (typeof GENERATABLE_MODELS)[number];
/** What `generateModels` writes when no list is given. */
export const DEFAULT_MODELS: readonly GeneratableModel[] = ['resnet-18', 'resnet-50', 'resnet-152', 'tiny'];

export interface GenerateModelsOptions {
  outDir: string;
  /** Default `DEFAULT_MODELS`. */
  models?: readonly string[];
  /** Default 42. */
  seed?: number;
  /** Write ResNet weights to `<name>.onnx.data` (page-aligned). Default false. */
  isExternalData?: boolean;
  /** Rewrite files even when an identical one exists, and overwrite files marina-models did not write. Default false. */
  isForced?: boolean;
  onProgress?: (event: GeneratedFile) => void;
}

export interface GeneratedFile {
  /** Model name, or 'index_to_name' / 'sample-image'. */
  name: string;
  path: string;
  dataPath?: string;
  status: 'written' | 'skipped';
  /** Bytes on disk (model plus data file). */
  bytes: number;
  parameterCount?: number;
  durationMs: number;
}

const SAMPLE_IMAGE = 'kitten.jpg';
const INDEX_TO_NAME = 'index_to_name.json';

async function exists(path: string): Promise<boolean> {
  return access(path).then(
    () => true,
    () => false,
  );
}

async function fileBytes(path: string): Promise<number> {
  return (await stat(path)).size;
}

function parseModels(models: readonly string[] | undefined): GeneratableModel[] {
  const names = models ?? DEFAULT_MODELS;
  for (const name of names) {
    if (!(GENERATABLE_MODELS as readonly string[]).includes(name)) {
      throw createError.MARINA_ERR_MODEL_ZOO_UNKNOWN_MODEL(
        `unknown model '${name}'; choose from ${GENERATABLE_MODELS.join(', ')}`,
        { details: { model: name, available: [...GENERATABLE_MODELS] } },
      );
    }
  }
  return [...new Set(names)] as GeneratableModel[];
}

function writeModel(
  name: GeneratableModel,
  outputPath: string,
  seed: number,
  isExternalData: boolean,
): Promise<WriteModelResult> {
  switch (name) {
    case 'resnet-18':
      return writeResnet({ depth: 18, outputPath, seed, isExternalData });
    case 'resnet-50':
      return writeResnet({ depth: 50, outputPath, seed, isExternalData });
    case 'resnet-152':
      return writeResnet({ depth: 152, outputPath, seed, isExternalData });
    case 'tiny':
      // ImageNet-shaped, so it pairs with index_to_name.json and the image handlers' 224 crop.
      return writeTinyClassifier({ outputPath, inputSize: 224, numClasses: 1000, seed });
    case 'tiny-tensor':
      return writeTinyTensorModel({ outputPath });
    case 'mixed-types':
      // One input and output of each tensor kind the protocols carry (docs/guides/protocols.md serves it as `mixed`).
      return writeMixedTypesModel({ outputPath });
    case 'softmax-classifier':
      // Ends in Softmax: image_classifier must return its output as it is.
      return writeHeadClassifier({ outputPath, head: 'softmax', inputSize: 224, numClasses: 1000, seed });
    case 'tiny-segmenter':
      return writeTinySegmenter({ outputPath, classes: 3 });
    case 'tiny-detector':
      return writeTinyDetector({ outputPath, layout: 'separate' });
  }
}

/**
 * Decides whether an existing model file can stay: it must carry marina's metadata for the
 * same model, seed and data layout (and its data file must exist). A file without marina
 * metadata is someone else's and is only overwritten with `isForced`.
 */
async function isUpToDate(
  name: GeneratableModel,
  modelPath: string,
  seed: number,
  isExternalData: boolean,
): Promise<boolean> {
  const metadata = await readModelMetadata(modelPath);
  const model = metadata['marina.model'];
  if (model === undefined) {
    throw createError.MARINA_ERR_MODEL_ZOO_OUTPUT_EXISTS(
      `'${modelPath}' exists and was not written by marina-models; pass --force to overwrite it or choose another --out directory`,
      { details: { path: modelPath } },
    );
  }
  const expectedModel =
    { tiny: 'tiny-classifier', 'tiny-segmenter': 'tiny-segmenter-3', 'tiny-detector': 'tiny-detector-separate' }[
      name as string
    ] ?? name;
  if (model !== expectedModel) return false;
  if (name === 'tiny-tensor' || name === 'mixed-types' || name === 'tiny-segmenter' || name === 'tiny-detector')
    return true;
  if (metadata['marina.seed'] !== String(seed)) return false;
  if (name.startsWith('resnet-')) {
    if (metadata['marina.external_data'] !== String(isExternalData)) return false;
    if (isExternalData && !(await exists(`${modelPath}.data`))) return false;
  }
  return true;
}

/**
 * Writes the requested models into `outDir` (created if missing) as `<name>.onnx` (plus
 * `<name>.onnx.data` with external data), then `index_to_name.json` and a sample
 * `kitten.jpg`. A model already written by marina-models with the same seed and layout is
 * skipped unless `isForced`; its seed is read from the model's own metadata.
 *
 * @throws MARINA_ERR_MODEL_ZOO_UNKNOWN_MODEL, MARINA_ERR_MODEL_ZOO_INVALID_OPTION,
 *   MARINA_ERR_MODEL_ZOO_OUTPUT_EXISTS, MARINA_ERR_MODEL_ZOO_WRITE_FAILED.
 */
export async function generateModels(options: GenerateModelsOptions): Promise<GeneratedFile[]> {
  const outDir = pathOption('outDir', options.outDir);
  const seed = seedOption(options.seed, 42);
  const models = parseModels(options.models);
  const isExternalData = options.isExternalData ?? false;
  const isForced = options.isForced ?? false;
  try {
    await mkdir(outDir, { recursive: true });
  } catch (error) {
    throw createError.MARINA_ERR_MODEL_ZOO_WRITE_FAILED(
      `could not create output directory '${outDir}': ${(error as Error).message}`,
      {
        cause: error,
      },
    );
  }
  const results: GeneratedFile[] = [];
  const report = (file: GeneratedFile): void => {
    results.push(file);
    options.onProgress?.(file);
  };

  for (const name of models) {
    const started = performance.now();
    const modelPath = join(outDir, `${name}.onnx`);
    const dataPath = `${modelPath}.data`;
    if (!isForced && (await exists(modelPath)) && (await isUpToDate(name, modelPath, seed, isExternalData))) {
      const hasData = await exists(dataPath);
      report({
        name,
        path: modelPath,
        ...(hasData ? { dataPath } : {}),
        status: 'skipped',
        bytes: (await fileBytes(modelPath)) + (hasData ? await fileBytes(dataPath) : 0),
        durationMs: performance.now() - started,
      });
      continue;
    }
    const result = await writeModel(name, modelPath, seed, isExternalData);
    report({
      name,
      path: result.modelPath,
      ...(result.dataPath ? { dataPath: result.dataPath } : {}),
      status: 'written',
      bytes: result.bytes,
      parameterCount: result.parameterCount,
      durationMs: performance.now() - started,
    });
  }

  for (const [name, fileName, write] of [
    ['index_to_name', INDEX_TO_NAME, async (path: string) => writeIndexToName(path, await loadImagenetClassNames())],
    ['sample-image', SAMPLE_IMAGE, (path: string) => writeSampleJpeg({ outputPath: path })],
  ] as const) {
    const started = performance.now();
    const path = join(outDir, fileName);
    // Both files are deterministic, so an existing one is already right.
    const status = !isForced && (await exists(path)) ? 'skipped' : 'written';
    if (status === 'written') await write(path);
    report({ name, path, status, bytes: await fileBytes(path), durationMs: performance.now() - started });
  }
  return results;
}
