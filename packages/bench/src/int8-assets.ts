import { mkdir, readFile, readdir, rm, stat, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { extractArchive, readManifest, resolveManifestPath } from '@marina/archive';
import { writeSampleJpeg } from '@marina/model-zoo';
import { runJsonChild } from './child-process-json.ts';
import { benchErrors } from './errors.ts';
import type { BenchAssets } from './model-assets.ts';

/** The int8 side of the int8 experiment: an archive made by `model-archiver --quantize int8`, and its model file. */
export interface Int8Assets {
  /** Archive file name inside the fp32 assets' modelStoreDir (so both servers use one store). */
  archiveFileName: string;
  /** The quantised ONNX file, extracted from the archive (for the int8 ceiling). */
  modelPath: string;
  /** Bytes of the int8 model file. */
  modelBytes: number;
  /** The fp32 archive it was quantised from (the external-data one where there is one). */
  fp32ArchiveFileName: string;
  /** The archive's quantization.json, as written by model-archiver. */
  quantization: Record<string, unknown>;
  /** The model-archiver command line that made it (for the report). */
  command: string;
  /** Generated 640×480 JPEGs it was calibrated on. */
  calibrationImages: number;
}

/** Calibration JPEGs generated for the int8 archive: model-archiver measures agreement on them by 4-fold. */
const INT8_CALIBRATION_IMAGES = 8;

const CACHE_VERSION = 2;

function defaultModelArchiverBin(): string {
  const packageDir = dirname(dirname(fileURLToPath(import.meta.url)));
  return join(packageDir, 'node_modules', '@marina', 'model-archiver', 'bin', 'model-archiver.js');
}

/**
 * Makes (first call) or reuses (later calls) the int8 archive of a bench model the way a user
 * would: generated 640×480 JPEG request bodies in a folder, then `model-archiver --quantize int8
 * --calibration <folder>` on the model's external-data ONNX file (the inline one for models
 * without), written next to the fp32 archives. The quantised model is also extracted for the ceiling.
 *
 * @throws MARINA_ERR_BENCH_CHILD_FAILED when model-archiver fails (its stderr is in the message);
 *   MARINA_ERR_BENCH_DEPENDENCY_MISSING when the archive it wrote has no model.
 */
export async function prepareInt8Assets(
  assets: BenchAssets,
  options: { modelArchiverBin?: string; onStatus?: (message: string) => void } = {},
): Promise<Int8Assets> {
  const assetsDir = dirname(assets.imagePath);
  const dir = join(assetsDir, `int8-v${CACHE_VERSION}`);
  const markerPath = join(dir, 'int8-assets.json');
  const cached = await readFile(markerPath, 'utf8').then(
    (text) => JSON.parse(text) as Int8Assets,
    () => undefined,
  );
  if (
    cached &&
    (await stat(join(assets.modelStoreDir, cached.archiveFileName)).then(
      () => true,
      () => false,
    ))
  )
    return cached;

  await rm(dir, { recursive: true, force: true });
  const calibrationDir = join(dir, 'calibration');
  await mkdir(calibrationDir, { recursive: true });
  for (let i = 0; i < INT8_CALIBRATION_IMAGES; i++) {
    await writeSampleJpeg({
      outputPath: join(calibrationDir, `request-${String(i).padStart(2, '0')}.jpg`),
      width: 640,
      height: 480,
      seed: 101 + i,
    });
  }
  const fp32ModelPath = assets.externalModelPath ?? assets.modelPath;
  const fp32ArchiveFileName = assets.externalModelPath ? assets.externalArchiveFileName! : assets.archiveFileName;
  const modelName = `${assets.modelName}-int8`;
  const indexToName = join(assetsDir, 'index_to_name.json');
  const hasIndex = await stat(indexToName).then(
    () => true,
    () => false,
  );
  const args = [
    '--model-name',
    modelName,
    '--version',
    assets.modelVersion,
    '--serialized-file',
    fp32ModelPath,
    '--handler',
    'image_classifier',
    ...(hasIndex ? ['--extra-files', indexToName] : []),
    '--quantize',
    'int8',
    '--calibration',
    calibrationDir,
    // The bench's ResNets have seeded, untrained weights: near-ties between classes that int8 may flip (ResNet-18: 7 of
    // 8 generated photos agreed on top-1). The default 0.99 is for trained models; this experiment measures speed.
    '--min-agreement',
    '0.75',
    '--export-path',
    assets.modelStoreDir,
  ];
  const bin = options.modelArchiverBin ?? defaultModelArchiverBin();
  options.onStatus?.(
    `quantising ${assets.model}: model-archiver --quantize int8 --calibration ${calibrationDir} (${INT8_CALIBRATION_IMAGES} generated 640×480 JPEGs; once, cached)`,
  );
  const archiveFileName = `${modelName}.mar`;
  // No --force: an archive below model-archiver's accuracy target is refused, and so is the run. An archive left by an
  // interrupted earlier run is removed first instead.
  await rm(join(assets.modelStoreDir, archiveFileName), { force: true });
  await runJsonChild({ scriptPath: bin, args });

  const { modelDir } = await extractArchive({
    archivePath: join(assets.modelStoreDir, archiveFileName),
    destDir: join(dir, 'extracted'),
  });
  const manifest = await readManifest(modelDir);
  const serialized = manifest?.model.serializedFile;
  if (!serialized)
    throw benchErrors.create.MARINA_ERR_BENCH_DEPENDENCY_MISSING(
      `model-archiver wrote ${archiveFileName} without a serializedFile in its manifest; rerun with a fresh --cache-dir`,
    );
  const modelPath = await resolveManifestPath(modelDir, serialized, 'model.serializedFile');
  const entries = await readdir(modelDir);
  const quantization = entries.includes('quantization.json')
    ? (JSON.parse(await readFile(join(modelDir, 'quantization.json'), 'utf8')) as Record<string, unknown>)
    : {};
  const int8: Int8Assets = {
    archiveFileName,
    modelPath,
    modelBytes: (await stat(modelPath)).size,
    fp32ArchiveFileName,
    quantization,
    command: `model-archiver ${args.map((a) => (a.startsWith(dir) || a.startsWith(assetsDir) ? a.replace(assetsDir, '<cache>') : a)).join(' ')}`,
    calibrationImages: INT8_CALIBRATION_IMAGES,
  };
  await writeFile(markerPath, JSON.stringify(int8, null, 2));
  return int8;
}
