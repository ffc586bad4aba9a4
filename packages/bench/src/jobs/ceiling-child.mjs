#!/usr/bin/env node
// The ceiling: one process, onnxruntime-node called directly, all cores, no HTTP and no
// decoding in the timed loop (the input tensor is preprocessed once and reused).
// Also measures the model's own run time for one image (decode + preprocess + run), the
// floor a server's single-client latency is compared with.
// argv[2] is a JSON object: { modelPath, imagePath, threads, batchSizes, minImages, minDurationMs, ownTimeRuns, stepwise }.
// Prints JSON lines: {type:'progress'} while running, then {type:'batch', ...} per batch size and {type:'own-time', ...}.
// With stepwise: true it then prints {type:'ready'} and measures one own-time run per line read on stdin
// ({type:'step', inferMs, endToEndMs} each), until stdin ends: the bench alternates these with a server's requests.
import { readFile } from 'node:fs/promises';
import { createInterface } from 'node:readline';
import * as ort from 'onnxruntime-node';
import { preprocessImage, inputSizeOf } from './image-preprocess.mjs';

const options = JSON.parse(process.argv[2]);
const print = (value) => process.stdout.write(`${JSON.stringify(value)}\n`);

const session = await ort.InferenceSession.create(options.modelPath, {
  intraOpNumThreads: options.threads,
  interOpNumThreads: 1,
  graphOptimizationLevel: 'all',
});
const jpeg = await readFile(options.imagePath);
const size = inputSizeOf(session);
const pixels = await preprocessImage(jpeg, { size });
const inputName = session.inputNames[0];

for (const batchSize of options.batchSizes ?? []) {
  const data = new Float32Array(pixels.length * batchSize);
  for (let b = 0; b < batchSize; b++) data.set(pixels, b * pixels.length);
  const feeds = { [inputName]: new ort.Tensor('float32', data, [batchSize, 3, size, size]) };
  // Warm-up: the first runs at a new shape allocate and plan.
  for (let i = 0; i < 2; i++) await session.run(feeds);
  const latenciesMs = [];
  let images = 0;
  const startMs = performance.now();
  let printedAtMs = startMs;
  while (images < options.minImages || performance.now() - startMs < options.minDurationMs) {
    const t0 = performance.now();
    await session.run(feeds);
    latenciesMs.push(performance.now() - t0);
    images += batchSize;
    if (performance.now() - printedAtMs > 100) {
      printedAtMs = performance.now();
      print({ type: 'progress', images });
    }
  }
  const wallMs = performance.now() - startMs;
  print({ type: 'batch', batchSize, images, wallMs, latenciesMs });
}

if ((options.ownTimeRuns ?? 0) > 0) {
  const feeds1 = { [inputName]: new ort.Tensor('float32', pixels, [1, 3, size, size]) };
  await session.run(feeds1);
  const inferMs = [];
  const endToEndMs = [];
  for (let i = 0; i < options.ownTimeRuns; i++) {
    const run = await ownRun();
    inferMs.push(run.inferMs);
    endToEndMs.push(run.endToEndMs);
  }
  print({ type: 'own-time', threads: options.threads, inferMs, endToEndMs });
}

/** One image's own time: decode + preprocess, then the run alone. */
async function ownRun() {
  const t0 = performance.now();
  const fresh = await preprocessImage(jpeg, { size });
  const t1 = performance.now();
  await session.run({ [inputName]: new ort.Tensor('float32', fresh, [1, 3, size, size]) });
  const t2 = performance.now();
  return { inferMs: t2 - t1, endToEndMs: t2 - t0 };
}

if (options.stepwise) {
  await ownRun(); // warm-up at batch 1
  print({ type: 'ready' });
  for await (const _line of createInterface({ input: process.stdin })) print({ type: 'step', ...(await ownRun()) });
}
