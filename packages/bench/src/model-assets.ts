import { mkdir, readFile, stat, writeFile, rm } from 'node:fs/promises';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { packArchive } from '@marina/archive';
import {
  loadImagenetClassNames,
  writeIndexToName,
  writeResnet,
  writeSampleJpeg,
  writeTinyClassifier,
  writeTinyTensorModel,
} from '@marina/model-zoo';

/** Models the bench knows; ResNets come from @marina/model-zoo with seeded random weights. */
export const benchModelNames = ['resnet-152', 'resnet-50', 'resnet-18', 'tiny'] as const;
export type BenchModelName = (typeof benchModelNames)[number];

/** Everything one model's experiments need, generated once and cached on disk. */
export interface BenchAssets {
  model: BenchModelName;
  /** Name the server registers the model under (the archive's modelName). */
  modelName: string;
  modelVersion: string;
  /** ONNX file with the weights inline. */
  modelPath: string;
  /** ONNX file whose weights live in a page-aligned `<file>.data` beside it (memory-mappable); undefined for the tiny model. */
  externalModelPath: string | undefined;
  /** Bytes of weights + graph on disk. */
  modelBytes: number;
  /** The JPEG sent to the server and classified by jobs. */
  imagePath: string;
  /** Folder holding the archives (the server's model_store). */
  modelStoreDir: string;
  /** Archive with inline weights, relative to modelStoreDir. */
  archiveFileName: string;
  /** Archive carrying the external-data model, relative to modelStoreDir; undefined for the tiny model. */
  externalArchiveFileName: string | undefined;
}

/** Where generated models and archives are cached: $MARINA_CACHE_DIR, else ~/.cache/marina/bench. */
export function defaultCacheDir(): string {
  return process.env.MARINA_CACHE_DIR ?? join(homedir(), '.cache', 'marina', 'bench');
}

/** Bumped when the cached layout changes, so old caches are rebuilt rather than misread. */
const CACHE_LAYOUT_VERSION = 1;

async function exists(path: string): Promise<boolean> {
  return stat(path).then(
    () => true,
    () => false,
  );
}

async function packModel(options: {
  modelName: string;
  version: string;
  modelPath: string;
  dataPath?: string;
  extraFiles: string[];
  exportPath: string;
}): Promise<string> {
  await packArchive({
    modelName: options.modelName,
    modelVersion: options.version,
    handler: 'image_classifier',
    serializedFile: options.modelPath,
    extraFiles: [...(options.dataPath ? [options.dataPath] : []), ...options.extraFiles],
    exportPath: options.exportPath,
    archiveFormat: 'default',
    isForced: true,
  });
  return `${options.modelName}.mar`;
}

/**
 * Generates (first call) or reuses (later calls) a model, its sample JPEG and its archives
 * under `cacheDir/<model>/`. ResNet-152 takes a minute or so to write the first time.
 *
 * @throws the model zoo's and archive's own typed errors when generating or packing fails.
 */
export async function prepareAssets(options: {
  model: BenchModelName;
  cacheDir?: string;
  onStatus?: (message: string) => void;
}): Promise<BenchAssets> {
  const dir = join(options.cacheDir ?? defaultCacheDir(), `${options.model}-v${CACHE_LAYOUT_VERSION}`);
  const markerPath = join(dir, 'assets.json');
  if (await exists(markerPath)) {
    const cached = JSON.parse(await readFile(markerPath, 'utf8')) as BenchAssets;
    if (await exists(join(cached.modelStoreDir, cached.archiveFileName))) return cached;
  }
  options.onStatus?.(`generating ${options.model} in ${dir} (once; cached for later runs)`);
  await rm(dir, { recursive: true, force: true });
  const inlineDir = join(dir, 'inline');
  const externalDir = join(dir, 'external');
  const storeDir = join(dir, 'model-store');
  await Promise.all([inlineDir, externalDir, storeDir].map((d) => mkdir(d, { recursive: true })));

  const isTiny = options.model === 'tiny';
  const imagePath = join(dir, 'sample.jpg');
  // The tiny model exists to measure the server's own overhead, so its image is small too.
  await writeSampleJpeg({ outputPath: imagePath, width: isTiny ? 64 : 640, height: isTiny ? 48 : 480 });
  const modelName = options.model;
  const modelVersion = '1.0';
  const extraFiles: string[] = [];
  if (!isTiny) {
    const indexPath = join(dir, 'index_to_name.json');
    await writeIndexToName(indexPath, await loadImagenetClassNames());
    extraFiles.push(indexPath);
  }

  let modelPath: string;
  let modelBytes: number;
  let externalModelPath: string | undefined;
  let externalArchiveFileName: string | undefined;
  let archiveFileName: string;
  if (isTiny) {
    const written = await writeTinyClassifier({
      outputPath: join(inlineDir, 'model.onnx'),
      inputSize: 32,
      numClasses: 10,
    });
    modelPath = written.modelPath;
    modelBytes = written.bytes;
    archiveFileName = await packModel({
      modelName,
      version: modelVersion,
      modelPath,
      extraFiles,
      exportPath: storeDir,
    });
  } else {
    const depth = Number(options.model.split('-')[1]) as 18 | 50 | 152;
    const inline = await writeResnet({ depth, outputPath: join(inlineDir, 'model.onnx') });
    const external = await writeResnet({ depth, outputPath: join(externalDir, 'model.onnx'), isExternalData: true });
    modelPath = inline.modelPath;
    modelBytes = inline.bytes;
    externalModelPath = external.modelPath;
    archiveFileName = await packModel({
      modelName,
      version: modelVersion,
      modelPath,
      extraFiles,
      exportPath: storeDir,
    });
    const externalName = `${modelName}-external`;
    externalArchiveFileName = await packModel({
      modelName: externalName,
      version: modelVersion,
      modelPath: external.modelPath,
      dataPath: external.dataPath,
      extraFiles,
      exportPath: storeDir,
    });
  }
  const assets: BenchAssets = {
    model: options.model,
    modelName,
    modelVersion,
    modelPath,
    externalModelPath,
    modelBytes,
    imagePath,
    modelStoreDir: storeDir,
    archiveFileName,
    externalArchiveFileName,
  };
  await writeFile(markerPath, JSON.stringify(assets, null, 2));
  return assets;
}

/** The overhead experiment's model: `2x + 1` on a [N, 4] float tensor, served by the `tensor` handler. */
export interface TensorAssets {
  modelName: string;
  modelVersion: string;
  modelPath: string;
  modelStoreDir: string;
  archiveFileName: string;
  /** A one-row JSON request the tensor handler takes, ~30 bytes. */
  body: Buffer;
  contentType: string;
}

/**
 * Generates (once) the tensor model whose own run time is a few microseconds, so a server's
 * latency and throughput on it are the server's own overhead: HTTP, queueing, the worker hand-off
 * and JSON in and out.
 */
export async function prepareTensorAssets(options: { cacheDir?: string } = {}): Promise<TensorAssets> {
  const dir = join(options.cacheDir ?? defaultCacheDir(), `tiny-tensor-v${CACHE_LAYOUT_VERSION}`);
  const storeDir = join(dir, 'model-store');
  const modelPath = join(dir, 'model.onnx');
  const assets: TensorAssets = {
    modelName: 'tiny-tensor',
    modelVersion: '1.0',
    modelPath,
    modelStoreDir: storeDir,
    archiveFileName: 'tiny-tensor.mar',
    body: Buffer.from(JSON.stringify({ data: [[1, 2, 3, 4]] })),
    contentType: 'application/json',
  };
  if (await exists(join(storeDir, assets.archiveFileName))) return assets;
  await mkdir(storeDir, { recursive: true });
  await writeTinyTensorModel({ outputPath: modelPath });
  await packArchive({
    modelName: assets.modelName,
    modelVersion: assets.modelVersion,
    handler: 'tensor',
    serializedFile: modelPath,
    extraFiles: [],
    exportPath: storeDir,
    archiveFormat: 'default',
    isForced: true,
  });
  return assets;
}
