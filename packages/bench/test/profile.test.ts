import { spawn } from 'node:child_process';
import { mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { packArchive } from '@marina/archive';
import { writeResnet, writeSlowModel, writeTinyClassifier } from '@marina/model-zoo';
import { profileModel, type ProfileResult } from '../src/profile/profile-model.ts';
import { summarizeOrtProfile, type OrtTraceEvent } from '../src/profile/ort-profile.ts';
import { formatProfile, renderProfileSvg } from '../src/profile/render-profile.ts';

const BENCH_BIN = fileURLToPath(new URL('../bin/marina-bench.js', import.meta.url));

/** Structure every profile must have; never its timings (the machine is shared). */
function expectWellFormed(result: ProfileResult, runs: number): void {
  expect(result.runs).toBe(runs);
  expect(result.byNode.length).toBeGreaterThan(0);
  expect(result.byOpType.length).toBeGreaterThan(0);
  const nodeShares = result.byNode.reduce((sum, n) => sum + n.share, 0);
  const typeShares = result.byOpType.reduce((sum, t) => sum + t.share, 0);
  expect(nodeShares).toBeCloseTo(1, 6);
  expect(typeShares).toBeCloseTo(1, 6);
  expect(result.byOpType.reduce((sum, t) => sum + t.nodes, 0)).toBe(result.byNode.length);
  for (let i = 1; i < result.byNode.length; i++)
    expect(result.byNode[i]!.ms).toBeLessThanOrEqual(result.byNode[i - 1]!.ms);
  for (let i = 1; i < result.byOpType.length; i++)
    expect(result.byOpType[i]!.ms).toBeLessThanOrEqual(result.byOpType[i - 1]!.ms);
}

describe('summarizeOrtProfile', () => {
  it('leaves out warm-up runs, sums per node and per operator type, and gives shares of the node time', () => {
    const node = (name: string, op: string, ts: number, dur: number): OrtTraceEvent => ({
      cat: 'Node',
      name: `${name}_kernel_time`,
      ts,
      dur,
      args: { op_name: op, provider: 'CPUExecutionProvider', output_type_shape: [{ float: [1, 8] }] },
    });
    const run = (ts: number, dur: number): OrtTraceEvent => ({ cat: 'Session', name: 'model_run', ts, dur });
    const events: OrtTraceEvent[] = [
      run(0, 1000),
      node('a', 'Conv', 10, 900), // warm-up, left out
      run(2000, 100),
      node('a', 'Conv', 2010, 60),
      node('b', 'Relu', 2070, 20),
      node('c', 'Conv', 2090, 10),
      run(3000, 100),
      node('a', 'Conv', 3010, 40),
      node('b', 'Relu', 3060, 20),
      node('c', 'Conv', 3080, 10),
    ];
    const summary = summarizeOrtProfile(events, { skipRuns: 1 });
    expect(summary.runs).toBe(2);
    expect(summary.runMs).toBeCloseTo(0.1);
    expect(summary.nodeMs).toBeCloseTo(0.08);
    expect(summary.byNode.map((n) => [n.node, n.opType, n.provider, n.outputShapes])).toEqual([
      ['a', 'Conv', 'CPU', '[1,8]'],
      ['b', 'Relu', 'CPU', '[1,8]'],
      ['c', 'Conv', 'CPU', '[1,8]'],
    ]);
    expect(summary.byNode[0]!.ms).toBeCloseTo(0.05);
    expect(summary.byNode[0]!.share).toBeCloseTo(100 / 160);
    expect(summary.byOpType).toEqual([
      { opType: 'Conv', nodes: 2, ms: expect.closeTo(0.06, 6), share: expect.closeTo(120 / 160, 6) },
      { opType: 'Relu', nodes: 1, ms: expect.closeTo(0.02, 6), share: expect.closeTo(40 / 160, 6) },
    ]);
  });
});

describe('marina-bench profile', { timeout: 180_000 }, () => {
  let dir: string;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'marina-profile-test-'));
  });

  afterAll(async () => {
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('profiles a bare ONNX file at a batch size, with inputs from its signature', async () => {
    const { modelPath } = await writeTinyClassifier({
      outputPath: join(dir, 'tiny.onnx'),
      inputSize: 32,
      numClasses: 10,
    });
    const result = await profileModel({ path: modelPath, batchSize: 3, runs: 4, warmupRuns: 1, intraOpNumThreads: 1 });
    expectWellFormed(result, 4);
    expect(result.inputs).toEqual([{ name: 'input', type: 'float32', shape: [3, 3, 32, 32] }]);
    expect(result.inputsFrom).toMatch(/synthetic from the signature/);
    expect(result.byOpType.map((t) => t.opType)).toContain('Conv');
    expect(result.handler).toBeUndefined();
    const text = formatProfile(result, { top: 2 });
    expect(text).toContain('operator type');
    expect(text).toContain('top 2 nodes');
    const svg = renderProfileSvg(result);
    expect(svg.startsWith('<svg')).toBe(true);
    expect(svg.trimEnd().endsWith('</svg>')).toBe(true);
    for (const t of result.byOpType) expect(svg).toContain(`${t.opType} ×${t.nodes}`);
  });

  it('profiles a model with control flow (a Loop) that Marina did not write for image serving', async () => {
    const { modelPath } = await writeSlowModel({ outputPath: join(dir, 'slow.onnx'), layers: 3, width: 16 });
    const result = await profileModel({ path: modelPath, runs: 2, warmupRuns: 1, intraOpNumThreads: 1 });
    expectWellFormed(result, 2);
    expect(result.byOpType.map((t) => t.opType)).toContain('Loop');
  });

  it('profiles a ResNet-18 archive through the CLI, with the image_classifier preprocessing of a sample, and writes chart, JSON and trace', async () => {
    const resnet = await writeResnet({ depth: 18, outputPath: join(dir, 'resnet-18.onnx') });
    const store = join(dir, 'store');
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
    const out = join(dir, 'out');
    const child = spawn(
      process.execPath,
      [
        BENCH_BIN,
        'profile',
        join(store, 'resnet-18.mar'),
        '--batch-size',
        '2',
        '--runs',
        '2',
        '--warmup-runs',
        '1',
        '--top',
        '5',
        '--json',
        '--out',
        out,
      ],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
    expect(code, stderr).toBe(0);
    const result = JSON.parse(stdout) as ProfileResult & {
      files: { chartPath: string; jsonPath: string; tracePath: string };
    };
    expectWellFormed(result, 2);
    expect(result.modelName).toBe('resnet-18');
    expect(result.handler).toBe('image_classifier');
    expect(result.inputsFrom).toMatch(/^image_classifier preprocessing \(resize 256, crop 224x224\)/);
    expect(result.inputs).toEqual([{ name: 'input', type: 'float32', shape: [2, 3, 224, 224] }]);
    expect(result.byOpType[0]!.opType).toBe('Conv');
    expect(result.files.chartPath).toBe(join(out, 'chart.svg'));
    const svg = await readFile(result.files.chartPath, 'utf8');
    expect(svg).toContain('Where the time goes: resnet-18, batch 2');
    expect(JSON.parse(await readFile(result.files.jsonPath, 'utf8'))).toMatchObject({
      modelName: 'resnet-18',
      runs: 2,
    });
    expect(Array.isArray(JSON.parse(await readFile(result.files.tracePath, 'utf8')))).toBe(true);
  });

  it('refuses a file that is not there, with MARINA_ERR_BENCH_OPTION_INVALID', async () => {
    await expect(profileModel({ path: join(dir, 'missing.onnx') })).rejects.toMatchObject({
      code: 'MARINA_ERR_BENCH_OPTION_INVALID',
    });
    await expect(profileModel({ path: join(dir, 'tiny.onnx'), batchSize: 0 })).rejects.toMatchObject({
      code: 'MARINA_ERR_BENCH_OPTION_INVALID',
    });
  });

  it('reports a file onnxruntime cannot load with MARINA_ERR_BENCH_PROFILE_FAILED', async () => {
    const junk = join(dir, 'junk.onnx');
    await writeFile(junk, 'not a model');
    expect((await stat(junk)).size).toBeGreaterThan(0);
    await expect(profileModel({ path: junk })).rejects.toMatchObject({ code: 'MARINA_ERR_BENCH_PROFILE_FAILED' });
  });
});
