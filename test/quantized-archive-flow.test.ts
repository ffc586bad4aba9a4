/**
 * A user quantises model-zoo ResNet-18 with one model-archiver command and a folder of the
 * images they send, serves the int8 archive next to the fp32 one with `serve --start`, and
 * compares the two over HTTP on 127.0.0.1; `validate` and the describe API show the precision
 * and the agreement measured at archive time.
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import sharp from 'sharp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { writeResnet } from '@marina/model-zoo';
import {
  bins,
  makeTempDir,
  runCli,
  startServeInBackground,
  stopServeAndRemove,
  type BackgroundServe,
} from './helpers.ts';

let workDir: string;
let inferencePort: number;
let managementPort: number;
let server: BackgroundServe | undefined;
let quantizeOutput: string;

/** A seeded picture of coloured shapes on a coloured background (varied enough to calibrate on). */
async function shapesJpeg(seed: number, width = 320, height = 240): Promise<Buffer> {
  let s = seed * 7919 + 17;
  const r = (): number => {
    s = (s * 1103515245 + 12345) % 2147483648;
    return s / 2147483648;
  };
  const colour = (): string => `rgb(${Math.floor(r() * 256)},${Math.floor(r() * 256)},${Math.floor(r() * 256)})`;
  const shapes = Array.from({ length: 12 }, () =>
    r() < 0.5
      ? `<circle cx="${Math.floor(r() * width)}" cy="${Math.floor(r() * height)}" r="${10 + Math.floor(r() * 60)}" fill="${colour()}"/>`
      : `<rect x="${Math.floor(r() * width)}" y="${Math.floor(r() * height)}" width="${10 + Math.floor(r() * 120)}" height="${10 + Math.floor(r() * 90)}" fill="${colour()}"/>`,
  ).join('');
  const svg = `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}"><rect width="${width}" height="${height}" fill="${colour()}"/>${shapes}</svg>`;
  return sharp(Buffer.from(svg)).jpeg({ quality: 90 }).toBuffer();
}

async function archive(args: string[]): Promise<{ code: number | null; output: string; stderr: string }> {
  const run = await runCli(bins.modelArchiver, ['-v', '1.0', '--export-path', 'model_store', ...args], {
    cwd: workDir,
  });
  return { code: run.code, output: run.stdout + run.stderr, stderr: run.stderr };
}

beforeAll(async () => {
  workDir = makeTempDir('quantize');
  mkdirSync(path.join(workDir, 'requests'));
  mkdirSync(path.join(workDir, 'unseen'));
  await writeResnet({ depth: 18, outputPath: path.join(workDir, 'resnet-18.onnx') });
  for (let i = 0; i < 8; i++) writeFileSync(path.join(workDir, 'requests', `req-${i}.jpg`), await shapesJpeg(i));
  for (let i = 0; i < 4; i++)
    writeFileSync(path.join(workDir, 'unseen', `img-${i}.jpg`), await shapesJpeg(100 + i, 640, 480));

  const fp32 = await archive([
    '--model-name',
    'resnet-18',
    '--serialized-file',
    'resnet-18.onnx',
    '--handler',
    'image_classifier',
  ]);
  expect(fp32.code, fp32.output).toBe(0);
  const int8 = await archive([
    '--model-name',
    'resnet-18-int8',
    '--serialized-file',
    'resnet-18.onnx',
    '--handler',
    'image_classifier',
    '--quantize',
    'int8',
    '--calibration',
    'requests',
    // A seeded, untrained ResNet-18 has near-ties between classes that int8 may flip; the default 0.99 is for real models.
    '--min-agreement',
    '0.75',
  ]);
  expect(int8.code, int8.output).toBe(0);
  quantizeOutput = int8.stderr;

  server = await startServeInBackground(workDir, ['default_workers_per_model=1']);
  expect(server.started.code, server.started.stderr + server.started.stdout).toBe(0);
  ({ inferencePort, managementPort } = server);
}, 300_000);

afterAll(() => stopServeAndRemove(server, workDir));

async function classify(model: string, body: Buffer): Promise<Record<string, number>> {
  const response = await fetch(`http://127.0.0.1:${inferencePort}/predictions/${model}`, {
    method: 'POST',
    headers: { 'content-type': 'image/jpeg' },
    body: new Uint8Array(body),
  });
  expect(response.status).toBe(200);
  return (await response.json()) as Record<string, number>;
}

describe('an int8 archive from model-archiver --quantize int8', () => {
  it('prints the measured agreement and writes quantization.json into the archive', async () => {
    expect(quantizeOutput).toMatch(
      /accuracy by 4-fold over 8 samples \(each evaluated once, calibrated on the other 6\+\): top-1 agreement [0-9.]+ \(target 0\.75\) met/,
    );
    const validate = await runCli(bins.modelArchiver, ['validate', '--json', 'model_store/resnet-18-int8.mar'], {
      cwd: workDir,
    });
    expect(validate.code, validate.stderr).toBe(0);
    const report = JSON.parse(validate.stdout) as {
      quantization?: {
        precision: string;
        method: string;
        metric: string;
        agreement: number;
        isTargetMet: boolean;
        calibrationSamples: number;
        evalSamples: number;
      };
    };
    expect(report.quantization).toMatchObject({
      precision: 'int8',
      method: 'auto',
      metric: 'top1',
      isTargetMet: true,
      calibrationSamples: 6,
      evalSamples: 8,
    });
    expect(report.quantization!.agreement).toBeGreaterThanOrEqual(0.75);
    const text = await runCli(bins.modelArchiver, ['validate', 'model_store/resnet-18-int8.mar'], { cwd: workDir });
    expect(text.stdout).toMatch(/precision int8 \(auto calibration on 6 samples; top1 agreement/);
    // The int8 archive is smaller: int8 weights instead of float32.
    const sizes = ['resnet-18.mar', 'resnet-18-int8.mar'].map(
      (f) => readFileSync(path.join(workDir, 'model_store', f)).length,
    );
    expect(sizes[1]!).toBeLessThan(sizes[0]! / 3);
  }, 120_000);

  it('serves answers that agree with the fp32 archive on images it was not calibrated on', async () => {
    let sameTop1 = 0;
    for (let i = 0; i < 4; i++) {
      const body = readFileSync(path.join(workDir, 'unseen', `img-${i}.jpg`));
      const [fp32, int8] = [await classify('resnet-18', body), await classify('resnet-18-int8', body)];
      // Class indices are JSON keys, which JavaScript orders numerically: rank by probability.
      const top = (answer: Record<string, number>): string => Object.entries(answer).sort((a, b) => b[1] - a[1])[0]![0];
      if (top(fp32) === top(int8)) sameTop1++;
      // The fp32 answer's class is always among int8's five.
      expect(Object.keys(int8)).toContain(top(fp32));
    }
    // A seeded, untrained ResNet-18 has near-ties between classes, which int8 may flip; most must agree.
    expect(sameTop1).toBeGreaterThanOrEqual(3);
  }, 60_000);

  it('describe shows the precision and the agreement', async () => {
    const [int8 = [], fp32 = []] = await Promise.all(
      ['resnet-18-int8', 'resnet-18'].map(
        async (m) =>
          (await (await fetch(`http://127.0.0.1:${managementPort}/models/${m}`)).json()) as Array<
            Record<string, unknown>
          >,
      ),
    );
    expect(int8[0]).toMatchObject({
      precision: 'int8',
      quantization: { precision: 'int8', method: 'auto', metric: 'top1', isTargetMet: true },
    });
    expect(fp32[0]).toMatchObject({ precision: 'fp32' });
    expect(fp32[0]!.quantization).toBeUndefined();
  }, 60_000);
});
