#!/usr/bin/env node
// One decentralized job: a fresh process loads the model, classifies one JPEG, prints its
// own timings as one JSON line and exits. Plain .mjs on purpose: no tsx start-up cost.
// Usage: node classify-job.mjs <model.onnx> <image.jpg> [intraOpNumThreads=1]
const startedMs = performance.now();
const [modelPath, imagePath, threadsArg] = process.argv.slice(2);
const { readFile } = await import('node:fs/promises');
const ort = await import('onnxruntime-node');
const { preprocessImage, inputSizeOf } = await import('./image-preprocess.mjs');
const importedMs = performance.now();

const session = await ort.InferenceSession.create(modelPath, {
  intraOpNumThreads: Number(threadsArg ?? 1),
  interOpNumThreads: 1,
  graphOptimizationLevel: 'all',
});
const loadedMs = performance.now();

const jpeg = await readFile(imagePath);
const size = inputSizeOf(session);
const pixels = await preprocessImage(jpeg, { size });
const preprocessedMs = performance.now();

const input = new ort.Tensor('float32', pixels, [1, 3, size, size]);
const outputs = await session.run({ [session.inputNames[0]]: input });
const inferredMs = performance.now();

const scores = outputs[session.outputNames[0]].data;
let best = 0;
for (let i = 1; i < scores.length; i++) if (scores[i] > scores[best]) best = i;

process.stdout.write(
  `${JSON.stringify({
    // performance.now() counts from process start, so startedMs is Node's own boot time.
    bootMs: startedMs,
    importMs: importedMs - startedMs,
    loadMs: loadedMs - importedMs,
    preprocessMs: preprocessedMs - loadedMs,
    inferMs: inferredMs - preprocessedMs,
    totalMs: performance.now(),
    topClass: best,
  })}\n`,
);
