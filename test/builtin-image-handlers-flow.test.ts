/**
 * A user serves three kinds of pretrained-shaped models without writing code: a text-line
 * classifier that ends in Softmax and needs letterbox padding, a one-channel segmenter that
 * answers PNG masks, and a detector with boxes/scores/labels outputs. Each is archived with the
 * model-archiver CLI (which loads and checks it), served with `serve --start`, and asked over
 * HTTP on 127.0.0.1; the answers are compared with onnxruntime-node run directly.
 */
import { mkdirSync, readdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import * as ort from 'onnxruntime-node';
import sharp from 'sharp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { preprocessImage, resolveImageClassifierOptions } from '@marina/handlers';
import { writeHeadClassifier, writeTinyDetector, writeTinySegmenter } from '@marina/model-zoo';
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
let server: BackgroundServe | undefined;

const TEXTLINE_CONFIG =
  'handler:\n  resize_mode: letterbox\n  pad_position: top-left\n  size: [32, 128]\n  pad_value: 127.5\n  mean: [0.5, 0.5, 0.5]\n  std: [0.5, 0.5, 0.5]\n  topk: 2\n';

async function archive(args: string[]): Promise<{ code: number | null; output: string }> {
  const run = await runCli(bins.modelArchiver, ['-v', '1.0', '--export-path', 'model_store', ...args], {
    cwd: workDir,
  });
  return { code: run.code, output: run.stdout + run.stderr };
}

/** A wide image: a dark text-like band on white. */
async function textLine(): Promise<Buffer> {
  const width = 200;
  const height = 40;
  const pixels = Buffer.alloc(width * height * 3, 255);
  for (let y = 15; y < 25; y++)
    for (let x = 10; x < 190; x += 3) pixels.fill(20, (y * width + x) * 3, (y * width + x) * 3 + 3);
  return sharp(pixels, { raw: { width, height, channels: 3 } })
    .png()
    .toBuffer();
}

beforeAll(async () => {
  workDir = makeTempDir('builtin-handlers');
  for (const sub of ['textline', 'seg', 'det']) mkdirSync(path.join(workDir, sub));
  await writeHeadClassifier({
    outputPath: path.join(workDir, 'textline/textline.onnx'),
    head: 'softmax',
    numClasses: 2,
    isSizeDynamic: true,
    seed: 3,
  });
  writeFileSync(path.join(workDir, 'textline/model-config.yaml'), TEXTLINE_CONFIG);
  writeFileSync(path.join(workDir, 'textline/index_to_name.json'), JSON.stringify({ 0: '0', 1: '180' }));
  await writeTinySegmenter({ outputPath: path.join(workDir, 'seg/seg.onnx'), classes: 1, head: 'sigmoid' });
  writeFileSync(
    path.join(workDir, 'seg/model-config.yaml'),
    'handler:\n  resize_mode: stretch\n  size: [16, 16]\n  response: png\n',
  );
  await writeTinyDetector({ outputPath: path.join(workDir, 'det/det.onnx'), layout: 'separate' });
  writeFileSync(path.join(workDir, 'det/model-config.yaml'), 'handler:\n  nms: true\n');
  writeFileSync(
    path.join(workDir, 'det/index_to_name.json'),
    JSON.stringify({ 0: 'background', 1: 'person', 2: 'car', 3: 'dog' }),
  );

  for (const [name, handler] of [
    ['textline', 'image_classifier'],
    ['seg', 'image_segmenter'],
    ['det', 'object_detector'],
  ] as const) {
    const extra = name === 'seg' ? [] : ['--extra-files', `${name}/index_to_name.json`];
    const run = await archive([
      '--model-name',
      name,
      '--serialized-file',
      `${name}/${name}.onnx`,
      '--handler',
      handler,
      '-c',
      `${name}/model-config.yaml`,
      ...extra,
    ]);
    expect(run.output).not.toMatch(/MARINA_ERR/);
    expect(run.code, run.output).toBe(0);
  }
  // The archiver refuses a segmenter under image_classifier and writes nothing.
  const wrong = await archive([
    '--model-name',
    'wrong',
    '--serialized-file',
    'seg/seg.onnx',
    '--handler',
    'image_classifier',
  ]);
  expect(wrong.code).toBe(2);
  expect(wrong.output).toContain('MARINA_ERR_HANDLER_SIGNATURE_MISMATCH');
  expect(readdirSync(path.join(workDir, 'model_store')).sort()).toEqual(['det.mar', 'seg.mar', 'textline.mar']);

  server = await startServeInBackground(workDir);
  expect(server.started.code, server.started.stderr + server.started.stdout).toBe(0);
  inferencePort = server.inferencePort;
}, 180_000);

afterAll(() => stopServeAndRemove(server, workDir));

async function predict(model: string, body: Buffer, headers: Record<string, string> = {}): Promise<Response> {
  return fetch(`http://127.0.0.1:${inferencePort}/predictions/${model}`, {
    method: 'POST',
    headers: { 'content-type': 'application/octet-stream', ...headers },
    body: new Uint8Array(body),
  });
}

describe('built-in image handlers configured only with model-config.yaml', () => {
  it('the text-line classifier pads instead of refusing, and returns the Softmax output unchanged', async () => {
    const image = await textLine();
    const response = await predict('textline', image);
    expect(response.status).toBe(200);
    const answer = (await response.json()) as Record<string, number>;
    const options = resolveImageClassifierOptions(
      {
        handler: {
          resize_mode: 'letterbox',
          pad_position: 'top-left',
          size: [32, 128],
          pad_value: 127.5,
          mean: [0.5, 0.5, 0.5],
          std: [0.5, 0.5, 0.5],
        },
      },
      ['n', 3, 'h', 'w'],
    );
    const pixels = new Float32Array(3 * 32 * 128);
    await preprocessImage(image, { ...options, limitInputPixels: true }, pixels, 0);
    const session = await ort.InferenceSession.create(path.join(workDir, 'textline/textline.onnx'), {
      intraOpNumThreads: 1,
    });
    const probs = Array.from(
      (await session.run({ input: new ort.Tensor('float32', pixels, [1, 3, 32, 128]) })).output!.data as Float32Array,
    );
    await session.release();
    expect(Object.keys(answer).sort()).toEqual(['0', '180']);
    expect(answer['0']).toBeCloseTo(probs[0]!, 6);
    expect(answer['180']).toBeCloseTo(probs[1]!, 6);
  });

  it('the segmenter answers a PNG mask at the image size', async () => {
    const image = await textLine();
    const response = await predict('seg', image);
    expect(response.status).toBe(200);
    expect(response.headers.get('content-type')).toContain('image/png');
    const png = Buffer.from(await response.arrayBuffer());
    expect(await sharp(png).metadata()).toMatchObject({ width: 200, height: 40, channels: 1 });
  });

  it("the detector answers TorchServe's [{label: box, score}] with labels from index_to_name.json", async () => {
    const pixels = Buffer.alloc(64 * 64 * 3);
    for (let p = 0; p < 64 * 64; p++) pixels[p * 3] = 255;
    const red = await sharp(pixels, { raw: { width: 64, height: 64, channels: 3 } })
      .png()
      .toBuffer();
    const response = await predict('det', red);
    expect(response.status).toBe(200);
    // A 64×64 image fills the 64×64 input: box 0 as the model put it, scored sigmoid(4); box 1 is suppressed by NMS.
    const answer = (await response.json()) as Array<Record<string, unknown>>;
    expect(answer).toHaveLength(1);
    expect(answer[0]!.person).toEqual([8, 8, 40, 40]);
    expect(answer[0]!.score).toBeCloseTo(1 / (1 + Math.exp(-4)), 5);
  });
});
