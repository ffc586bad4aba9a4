/**
 * Models whose weights are external data (`model.onnx` + `model.onnx.data`, packed with
 * `--extra-files`), and the `onnxruntime` section of model-config.yaml, through a real server.
 */
import { existsSync } from 'node:fs';
import { mkdtemp, readdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { packArchive, parseModelConfig } from '@marina/archive';
import { GraphBuilder, writeOnnxModel } from '@marina/model-zoo';
import {
  allowSpinningDefaultFrom,
  createSessionOptions,
  forceSpinningStopDefaultFrom,
  optimizedModelCacheDir,
  readOrtModelSettings,
} from '../src/backend/ort-session.ts';
import { call, createWorkspace, opsConfig, startOps, type OpsServer, type Workspace } from './ops-harness.ts';

/** Packs `output = input·2 + 1` ([N,4]) with its weights in model.onnx.data, added with extraFiles. */
async function packExternalDataModel(
  store: string,
  modelName: string,
  modelConfigYaml?: string,
): Promise<{ dataBytes: number }> {
  const work = await mkdtemp(join(tmpdir(), 'marina-ort-external-'));
  try {
    const g = new GraphBuilder('affine_external');
    // Wide enough (4 KiB each) that any writer keeps them outside the model file.
    const two = g.constant('two', [1024], 2);
    const one = g.constant('one', [1024], 1);
    g.node('Add', [g.node('Mul', ['input', two]), one], { output: 'output' });
    const onnx = join(work, 'model.onnx');
    const written = await writeOnnxModel({
      outputPath: onnx,
      isExternalData: true,
      graph: g.build([{ name: 'input', dims: ['batch_size', 1024] }], [{ name: 'output', dims: ['batch_size', 1024] }]),
    });
    let configFile: string | undefined;
    if (modelConfigYaml !== undefined) {
      configFile = join(work, 'model-config.yaml');
      await writeFile(configFile, modelConfigYaml);
    }
    const result = await packArchive({
      modelName,
      modelVersion: '1.0',
      handler: 'tensor',
      serializedFile: onnx,
      extraFiles: [written.dataPath!],
      ...(configFile ? { configFile } : {}),
      exportPath: join(work, 'out'),
    });
    await rename(result.outputPath, join(store, `${modelName}.mar`));
    return { dataBytes: written.bytes };
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}

const row = Array.from({ length: 1024 }, (_, i) => i % 7);
const expected = row.map((x) => 2 * x + 1);

async function copiesOf(extractionDir: string): Promise<string[]> {
  const cacheDir = optimizedModelCacheDir();
  if (!existsSync(cacheDir)) return [];
  const found: string[] = [];
  for (const entry of await readdir(cacheDir)) {
    try {
      const { source } = JSON.parse(await readFile(join(cacheDir, entry, 'source.json'), 'utf8')) as { source: string };
      if (source.startsWith(extractionDir)) found.push(join(cacheDir, entry));
    } catch {
      // another copy, or one being written
    }
  }
  return found;
}

describe('external-data weights through the real server', { timeout: 60_000 }, () => {
  let workspace: Workspace;
  let ops: OpsServer;
  let extractionDir: string;
  beforeAll(async () => {
    workspace = await createWorkspace('marina-ort-external-');
    await packExternalDataModel(workspace.store, 'affine-external');
    await packExternalDataModel(
      workspace.store,
      'affine-shared',
      'minWorkers: 2\nonnxruntime:\n  graphOptimizationLevel: extended\n  cacheOptimizedModel: true\n  enableCpuMemArena: false\n',
    );
    // Three workers in all: give them a core each, within the thread budget.
    const config = opsConfig(workspace, { load_models: 'affine-external.mar,affine-shared.mar' }, { cpuCount: 4 });
    extractionDir = config.extractionCacheDir;
    ops = await startOps(config);
  });
  afterAll(async () => {
    await ops?.close();
    for (const copy of extractionDir ? await copiesOf(extractionDir) : [])
      await rm(copy, { recursive: true, force: true });
    await workspace?.cleanup();
  });

  it('serves an archive packed with --extra-files model.onnx.data (onnxruntime finds the data beside the extracted model)', async () => {
    const answer = await call(ops.api, 'POST', '/predictions/affine-external', {
      body: { inputs: { input: { shape: [1, 1024], data: row } } },
    });
    expect(answer.status).toBe(200);
    expect(JSON.stringify(answer.json)).toContain(JSON.stringify(expected.slice(0, 8)).slice(1, -1));
  });

  it('with onnxruntime.cacheOptimizedModel, both workers answer correctly from one cached optimised copy with external weights', async () => {
    const answers = await Promise.all(
      [0, 1, 2, 3].map(() =>
        call(ops.api, 'POST', '/predictions/affine-shared', {
          body: { inputs: { input: { shape: [1, 1024], data: row } } },
        }),
      ),
    );
    for (const answer of answers) {
      expect(answer.status).toBe(200);
      expect(JSON.stringify(answer.json)).toContain(JSON.stringify(expected.slice(0, 8)).slice(1, -1));
    }
    const copies = await copiesOf(extractionDir);
    expect(copies).toHaveLength(1);
    expect((await readdir(copies[0]!)).sort()).toEqual(['model.onnx', 'model.onnx.data', 'source.json']);
  });

  it('loads small models directly by default: no optimised copy for the 8 KiB model', async () => {
    const copies = await copiesOf(extractionDir);
    const sources = await Promise.all(
      copies.map(
        async (copy) => (JSON.parse(await readFile(join(copy, 'source.json'), 'utf8')) as { source: string }).source,
      ),
    );
    expect(sources.some((source) => source.includes('affine-external'))).toBe(false);
  });
});

describe('the onnxruntime section of model-config.yaml', () => {
  it('sets the graph optimisation level and memory options of the session; defaults stay fastest', () => {
    const threading = { intraOpNumThreads: 1 };
    expect(createSessionOptions(threading).graphOptimizationLevel).toBe('all');
    const settings = readOrtModelSettings(
      parseModelConfig(
        'onnxruntime:\n  graphOptimizationLevel: extended\n  enableCpuMemArena: false\n  enableMemPattern: false\n',
      ),
    );
    expect(settings).toEqual({ graphOptimizationLevel: 'extended', enableCpuMemArena: false, enableMemPattern: false });
    expect(createSessionOptions(threading, settings)).toMatchObject({
      graphOptimizationLevel: 'extended',
      enableCpuMemArena: false,
      enableMemPattern: false,
      intraOpNumThreads: 1,
    });
  });

  it('lets intra-op threads spin by default (a machine that serves only Marina) unless the model opts out with allowSpinning: false', () => {
    const threading = { intraOpNumThreads: 2 };
    expect(createSessionOptions(threading).extra).toEqual({
      session: { 'intra_op.allow_spinning': '1', force_spinning_stop: '1' },
    });
    const settings = readOrtModelSettings(parseModelConfig('onnxruntime:\n  allowSpinning: false\n'));
    expect(settings).toEqual({ allowSpinning: false });
    expect(createSessionOptions(threading, settings).extra).toEqual({ session: { 'intra_op.allow_spinning': '0' } });
  });

  it('takes the server-wide spinning default from MARINA_ORT_ALLOW_SPINNING; a model that sets allowSpinning keeps its own', () => {
    expect(allowSpinningDefaultFrom({ MARINA_ORT_ALLOW_SPINNING: '1' })).toBe(true);
    expect(allowSpinningDefaultFrom({ MARINA_ORT_ALLOW_SPINNING: '0' })).toBe(false);
    expect(allowSpinningDefaultFrom({ MARINA_ORT_ALLOW_SPINNING: 'yes' })).toBeUndefined();
    expect(allowSpinningDefaultFrom({})).toBeUndefined();
    const on = { intraOpNumThreads: 2, allowSpinning: true };
    const off = { intraOpNumThreads: 2, allowSpinning: false };
    expect(createSessionOptions(on).extra).toEqual({
      session: { 'intra_op.allow_spinning': '1', force_spinning_stop: '1' },
    });
    expect(createSessionOptions(off).extra).toEqual({ session: { 'intra_op.allow_spinning': '0' } });
    expect(
      createSessionOptions(on, readOrtModelSettings(parseModelConfig('onnxruntime:\n  allowSpinning: false\n'))).extra,
    ).toEqual({ session: { 'intra_op.allow_spinning': '0' } });
    expect(
      createSessionOptions(off, readOrtModelSettings(parseModelConfig('onnxruntime:\n  allowSpinning: true\n'))).extra,
    ).toEqual({ session: { 'intra_op.allow_spinning': '1', force_spinning_stop: '1' } });
  });

  it("stops spinning when a run returns by default; MARINA_ORT_FORCE_SPINNING_STOP=0 or forceSpinningStop: false keeps onnxruntime's spin after the run", () => {
    expect(forceSpinningStopDefaultFrom({ MARINA_ORT_FORCE_SPINNING_STOP: '0' })).toBe(false);
    expect(forceSpinningStopDefaultFrom({ MARINA_ORT_FORCE_SPINNING_STOP: '1' })).toBe(true);
    expect(forceSpinningStopDefaultFrom({ MARINA_ORT_FORCE_SPINNING_STOP: 'no' })).toBeUndefined();
    const keepSpinning = { intraOpNumThreads: 2, forceSpinningStop: false };
    expect(createSessionOptions(keepSpinning).extra).toEqual({
      session: { 'intra_op.allow_spinning': '1', force_spinning_stop: '0' },
    });
    const settings = readOrtModelSettings(parseModelConfig('onnxruntime:\n  forceSpinningStop: true\n'));
    expect(settings).toEqual({ forceSpinningStop: true });
    expect(createSessionOptions(keepSpinning, settings).extra).toEqual({
      session: { 'intra_op.allow_spinning': '1', force_spinning_stop: '1' },
    });
    // Without spinning there is nothing to stop.
    expect(
      createSessionOptions({ intraOpNumThreads: 2, allowSpinning: false, forceSpinningStop: false }).extra,
    ).toEqual({ session: { 'intra_op.allow_spinning': '0' } });
    expect(() => parseModelConfig('onnxruntime:\n  forceSpinningStop: sometimes\n')).toThrow(
      expect.objectContaining({
        code: 'MARINA_ERR_MODEL_CONFIG_INVALID',
        message: expect.stringContaining('forceSpinningStop'),
      }),
    );
  });

  it('rejects an unknown level or key with MARINA_ERR_MODEL_CONFIG_INVALID, naming it', () => {
    expect(() => parseModelConfig('onnxruntime:\n  graphOptimizationLevel: fastest\n')).toThrow(
      expect.objectContaining({
        code: 'MARINA_ERR_MODEL_CONFIG_INVALID',
        message: expect.stringContaining('graphOptimizationLevel'),
      }),
    );
    expect(() => parseModelConfig('onnxruntime:\n  graphOptimisationLevel: all\n')).toThrow(
      expect.objectContaining({
        code: 'MARINA_ERR_MODEL_CONFIG_INVALID',
        message: expect.stringContaining('onnxruntime'),
      }),
    );
  });
});
