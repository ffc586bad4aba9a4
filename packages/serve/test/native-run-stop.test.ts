/**
 * A worker stopped while onnxruntime runs (real sessions, real worker threads): worker.terminate()
 * cannot interrupt the native run, and when that run returned into the terminated thread,
 * onnxruntime-node threw a C++ exception nothing caught and the whole process aborted ("terminate
 * called after throwing an instance of 'Napi::Error'"). Now the thread is asked to exit and ends
 * once its run returns (workers/native-calls.ts). A crash here ends the test process itself.
 */
import { writeSlowModel, writeTinyTensorModel } from '@marina/model-zoo';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp, type MarinaApp } from '../src/index.ts';
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
