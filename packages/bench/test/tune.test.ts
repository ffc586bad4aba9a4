import { spawn } from 'node:child_process';
import { copyFile, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os, { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { packArchive } from '@marina/archive';
import { writeResnet, writeSampleJpeg, writeTinyClassifier } from '@marina/model-zoo';
import { tuneArchive, type TuneResult } from '../src/tune/tune-archive.ts';
import { workerThreadPairs } from '../src/tune/tune-plan.ts';

const BENCH_BIN = fileURLToPath(new URL('../bin/marina-bench.js', import.meta.url));
const SERVE_BIN = fileURLToPath(new URL('../../serve/bin/serve.js', import.meta.url));

/** Structure of a tune result; never its numbers (the machine is shared). */
function expectWellFormed(result: TuneResult, modelName: string): void {
  const cores = os.availableParallelism();
  expect(result.cores).toBe(cores);
  expect(result.measured.length).toBeGreaterThan(0);
  for (const m of result.measured) {
    expect(m.workers * m.threads, `${m.workers} x ${m.threads} on ${cores} cores`).toBeLessThanOrEqual(cores);
    expect(m.requests).toBeGreaterThan(0);
    expect(m.errors).toBe(0);
    expect(m.p99Ms).toBeGreaterThanOrEqual(m.p50Ms);
    if (m.batchSize === 1) expect(m.maxBatchDelay).toBe(0);
  }
  const { configLines, ...best } = result.recommendation;
  expect(best).toEqual(result.measured[0]);
  expect(configLines[0]).toBe(`load_models=${modelName}=${modelName}.mar`);
  expect(JSON.parse(configLines[1]!.slice('models='.length))).toEqual({
    [modelName]: {
      '1.0': {
        minWorkers: best.workers,
        maxWorkers: best.workers,
        batchSize: best.batchSize,
        ...(best.batchSize > 1 ? { maxBatchDelay: best.maxBatchDelay } : {}),
        intraOpNumThreads: best.threads,
      },
    },
  });
  for (const s of result.skipped) expect(s.reason.length).toBeGreaterThan(0);
  // The curve was measured, or its absence is explained.
  if (result.curve.length === 0) expect(result.skipped.some((s) => s.config.startsWith('curve of'))).toBe(true);
  for (const p of result.curve) expect(p.requests + p.errors).toBeGreaterThan(0);
}

/**
 * Starts `serve --foreground` with a config.properties made of the recommended lines as printed,
 * plus addresses and the model store, and checks the model answers and runs with that configuration.
 */
async function expectRecommendationServes(
  result: TuneResult,
  options: { dir: string; store: string; body: Buffer; contentType: string },
): Promise<void> {
  const cwd = join(options.dir, `serve-${result.modelName}`);
  await mkdir(join(cwd, 'tmp'), { recursive: true });
  const config = join(cwd, 'config.properties');
  await writeFile(
    config,
    `${[
      'inference_address=http://127.0.0.1:0',
      'management_address=http://127.0.0.1:0',
      'grpc_inference_port=0',
      'grpc_management_port=0',
      'enable_metrics_api=false',
      'disable_token_authorization=true',
      `model_store=${options.store}`,
      ...result.recommendation.configLines,
    ].join('\n')}\n`,
  );
  const child = spawn(process.execPath, [SERVE_BIN, '--foreground', '--ncs', '--ts-config', config], {
    cwd,
    env: { ...process.env, TMPDIR: join(cwd, 'tmp'), MARINA_NO_REEXEC: '1' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout.on('data', (d: Buffer) => (output += d.toString()));
  child.stderr.on('data', (d: Buffer) => (output += d.toString()));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  try {
    await new Promise<void>((resolve, reject) => {
      child.stdout.on('data', () => (output.includes('Marina is ready.') ? resolve() : undefined));
      void exited.then(() => reject(new Error(`serve exited before ready:\n${output}`)));
    });
    expect(output).toContain(`Model loaded: ${result.modelName} (version 1.0)`);
    const url = /Inference API bound to (\S+)/.exec(output)![1]!;
    const managementUrl = /Management API bound to (\S+)/.exec(output)![1]!;
    const answers = await Promise.all(
      Array.from({ length: 4 }, () =>
        fetch(`${url}/predictions/${result.modelName}`, {
          method: 'POST',
          body: new Uint8Array(options.body),
          headers: { 'content-type': options.contentType },
        }),
      ),
    );
    for (const answer of answers) expect(answer.status, await answer.clone().text()).toBe(200);
    const [description] = (await (await fetch(`${managementUrl}/models/${result.modelName}`)).json()) as Array<{
      minWorkers: number;
      batchSize: number;
      maxBatchDelay: number;
      workers: Array<{ intraOpNumThreads: number }>;
    }>;
    const r = result.recommendation;
    expect(description).toMatchObject({ minWorkers: r.workers, batchSize: r.batchSize });
    if (r.batchSize > 1) expect(description!.maxBatchDelay).toBe(r.maxBatchDelay);
    expect(description!.workers).toHaveLength(r.workers);
    for (const w of description!.workers) expect(w.intraOpNumThreads).toBe(r.threads);
  } finally {
    child.kill('SIGTERM');
    await exited;
  }
}

describe('workerThreadPairs', () => {
  it('never plans more threads than cores', () => {
    expect(workerThreadPairs(2)).toEqual([
      { workers: 1, threads: 2 },
      { workers: 2, threads: 1 },
    ]);
    expect(workerThreadPairs(6)).toEqual([
      { workers: 1, threads: 6 },
      { workers: 2, threads: 3 },
      { workers: 4, threads: 1 },
      { workers: 6, threads: 1 },
    ]);
    for (const cores of [1, 3, 8, 16])
      for (const p of workerThreadPairs(cores)) expect(p.workers * p.threads).toBeLessThanOrEqual(cores);
  });
});

describe('marina-bench tune', { timeout: 300_000 }, () => {
  let dir: string;
  let store: string;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'marina-tune-test-'));
    store = join(dir, 'store');
  });

  afterAll(async () => {
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('tunes the tiny image classifier within a CI budget, and the recommendation serves as printed', async () => {
    const { modelPath } = await writeTinyClassifier({
      outputPath: join(dir, 'tiny.onnx'),
      inputSize: 32,
      numClasses: 10,
    });
    await packArchive({
      modelName: 'tiny',
      modelVersion: '1.0',
      handler: 'image_classifier',
      serializedFile: modelPath,
      extraFiles: [],
      exportPath: store,
      archiveFormat: 'default',
      isForced: true,
    });
    const messages: string[] = [];
    const result = await tuneArchive({
      archivePath: join(store, 'tiny.mar'),
      budgetS: 25,
      maxBatchSize: 4,
      onProgress: (m) => messages.push(m),
    });
    expectWellFormed(result, 'tiny');
    expect(result.input.from).toBe('synthetic from the signature (image_classifier)');
    expect(messages.some((m) => m.startsWith('measuring '))).toBe(true);
    const image = join(dir, 'tiny.jpg');
    await writeSampleJpeg({ outputPath: image, width: 64, height: 48 });
    await expectRecommendationServes(result, { dir, store, body: await readFile(image), contentType: 'image/jpeg' });
  });

  it('tunes a ResNet-18 archive through the CLI (--json) with a sample image, and the recommendation serves as printed', async () => {
    const resnet = await writeResnet({ depth: 18, outputPath: join(dir, 'resnet-18.onnx') });
    await packArchive({
      modelName: 'resnet-18',
      modelVersion: '1.0',
      handler: 'image_classifier',
      serializedFile: resnet.modelPath,
      extraFiles: [],
      exportPath: store,
      archiveFormat: 'default',
      isForced: true,
    });
    const image = join(dir, 'kitten.jpg');
    await writeSampleJpeg({ outputPath: image, width: 320, height: 240 });
    const child = spawn(
      process.execPath,
      [
        BENCH_BIN,
        'tune',
        join(store, 'resnet-18.mar'),
        '--budget-s',
        '40',
        '--max-batch-size',
        '4',
        '--input',
        image,
        '--json',
      ],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
    expect(code, stderr).toBe(0);
    const result = JSON.parse(stdout) as TuneResult;
    expectWellFormed(result, 'resnet-18');
    expect(result.input).toMatchObject({ from: 'kitten.jpg', contentType: 'image/jpeg' });
    await expectRecommendationServes(result, { dir, store, body: await readFile(image), contentType: 'image/jpeg' });
  });

  it('refuses a bare ONNX file and a custom handler without --input', async () => {
    await expect(tuneArchive({ archivePath: join(dir, 'tiny.onnx'), budgetS: 5 })).rejects.toMatchObject({
      code: 'MARINA_ERR_BENCH_OPTION_INVALID',
    });
    const custom = join(store, 'custom');
    await mkdir(join(custom, 'MAR-INF'), { recursive: true });
    await writeFile(join(custom, 'handler.mjs'), 'export function handle(data) { return data.map(() => 1); }\n');
    await copyFile(join(dir, 'tiny.onnx'), join(custom, 'model.onnx'));
    await writeFile(
      join(custom, 'MAR-INF', 'MANIFEST.json'),
      JSON.stringify({
        runtime: 'python',
        model: { modelName: 'custom', modelVersion: '1.0', handler: 'handler.mjs', serializedFile: 'model.onnx' },
      }),
    );
    const error = await tuneArchive({ archivePath: custom, budgetS: 5 }).catch((e: unknown) => e);
    expect(error).toMatchObject({ code: 'MARINA_ERR_BENCH_OPTION_INVALID' });
    expect((error as Error).message).toContain('--input');
  });
});
