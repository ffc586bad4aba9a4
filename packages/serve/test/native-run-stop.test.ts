/**
 * A worker stopped while onnxruntime runs (real sessions, real worker threads): worker.terminate()
 * cannot interrupt the native run, and when that run returned into the terminated thread,
 * onnxruntime-node threw a C++ exception nothing caught and the whole process aborted ("terminate
 * called after throwing an instance of 'Napi::Error'"). Now the thread is asked to exit and ends
 * once its run returns (workers/native-calls.ts). A crash here ends the test process itself.
 */
import { Worker as NodeWorker } from 'node:worker_threads';
import { writeSlowModel, writeTinyTensorModel } from '@marina/model-zoo';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp, type MarinaApp } from '../src/index.ts';
import { endThreadSafely, hasNativeCall, newNativeCallGauge } from '../src/workers/native-calls.ts';
import { bootstrapUrl } from '../src/workers/worker.ts';
import { tempDir, testConfig, writeModelFolder } from './helpers.ts';

const WIDTH = 512;

describe('a worker stopped while onnxruntime runs', () => {
  let dir: Awaited<ReturnType<typeof tempDir>>;
  let app: MarinaApp;

  beforeAll(async () => {
    dir = await tempDir('marina-native-stop-');
    // About 0.04 ms a layer at width 512: a run of one to a few seconds, long past the grace.
    await writeModelFolder({
      dir: `${dir.path}/slow`,
      modelName: 'slow',
      handler: 'tensor',
      modelConfigYaml: 'minWorkers: 1\nbatchSize: 1\n',
      writeModel: (path) => writeSlowModel({ outputPath: path, layers: 40_000, width: WIDTH }),
    });
    await writeModelFolder({
      dir: `${dir.path}/tiny`,
      modelName: 'tiny',
      handler: 'tensor',
      writeModel: (path) => writeTinyTensorModel({ outputPath: path }),
    });
    app = await buildApp(testConfig({ residency: { unloadGraceSeconds: 0.05 } }, dir.path));
    for (const name of ['slow', 'tiny']) await app.registry.register({ url: name, archivePath: `${dir.path}/${name}` });
  });

  afterAll(async () => {
    await app?.close();
    await dir?.cleanup();
  });

  it('answers its batch 503, ends the thread once the run returns, and the server goes on serving', async () => {
    const worker = app.registry.getVersion('slow').pool.workers[0]!;
    const reply = app.inference.inject({
      method: 'POST',
      url: '/predictions/slow',
      payload: { inputs: { input: { shape: [1, WIDTH], data: Array.from({ length: WIDTH }, (_, i) => (i % 7) / 7) } } },
    });
    // The run is in onnxruntime: a state of the thread, read from the memory it shares.
    while (!worker.isInNativeCall) await new Promise((resolve) => setImmediate(resolve));
    await app.registry.unload('slow');
    const answer = await reply;
    expect(answer.statusCode).toBe(503);
    expect(answer.json().marinaCode).toBe('MARINA_ERR_MODEL_UNLOADING');
    // The thread ends by itself once the run returns, and the process is still here.
    await worker.exited;
    expect(worker.isInNativeCall).toBe(false);
    const tiny = await app.inference.inject({
      method: 'POST',
      url: '/predictions/tiny',
      payload: { inputs: { input: { shape: [1, 4], data: [1, 2, 3, 4] } } },
    });
    expect(tiny.statusCode).toBe(200);
  });
});

/**
 * Terminated while onnxruntime-node registers itself (its library loaded, its addon being set up),
 * a thread aborted the process the same way: a probe that terminated threads 0–30 ms into that
 * import aborted once in 400, and a spare thread ended while it imported brought down a bench
 * run's server. The import counts in the thread's gauge; stopped meanwhile, the thread exits by
 * itself once the import is done (exit code 0), never terminated (exit code 1) in the middle of it.
 */
describe('a thread stopped while it imports onnxruntime-node', () => {
  it('is asked to exit rather than terminated, and ends by itself once the import is done', async () => {
    const gauge = newNativeCallGauge();
    const thread = new NodeWorker(bootstrapUrl, {
      workerData: { spare: true, isWarmedUp: false, nativeCalls: gauge },
      stdout: true,
      stderr: true,
    });
    let hasExited = false;
    const exitCode = new Promise<number>((resolve) =>
      thread.once('exit', (code) => {
        hasExited = true;
        resolve(code);
      }),
    );
    let saidReady = false;
    thread.on('message', (message: { type?: string }) => {
      if (message?.type === 'spare-ready') saidReady = true;
    });
    // The import under way is a state of the thread, read from the memory it shares (a spare runs
    // nothing else in onnxruntime before it is given a model).
    while (!hasNativeCall(gauge) && !saidReady && !hasExited) await new Promise((resolve) => setImmediate(resolve));
    expect(saidReady, 'the spare finished its imports without counting them').toBe(false);
    expect(hasNativeCall(gauge)).toBe(true);
    await endThreadSafely(thread, gauge, () => hasExited);
    expect(await exitCode).toBe(0);
    expect(hasNativeCall(gauge)).toBe(false);
    expect(saidReady).toBe(false);
  });
});
