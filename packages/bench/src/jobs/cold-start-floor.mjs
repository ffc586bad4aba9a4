#!/usr/bin/env node
// The floor for a cold request: onnxruntime creating a session from the server's cached optimised
// model (optimisation disabled, as the server's later workers load it) and one batch-1 run.
// Prints one JSON line: { createMs: number[], runMs: number[] }.
// Usage: node cold-start-floor.mjs <optimised model.onnx> <intraOpNumThreads> [repeats=3]
import * as ort from 'onnxruntime-node';

const [modelPath, threadsText, repeatsText] = process.argv.slice(2);
const intraOpNumThreads = Number(threadsText) || 1;
const repeats = Number(repeatsText) || 3;
const createMs = [];
const runMs = [];
for (let i = 0; i < repeats; i++) {
  const started = performance.now();
  const session = await ort.InferenceSession.create(modelPath, {
    graphOptimizationLevel: 'disabled',
    intraOpNumThreads,
    executionMode: 'sequential',
  });
  createMs.push(performance.now() - started);
  const name = session.inputNames[0];
  const input = new ort.Tensor('float32', new Float32Array(3 * 224 * 224).fill(0.1), [1, 3, 224, 224]);
  const ranAt = performance.now();
  await session.run({ [name]: input });
  runMs.push(performance.now() - ranAt);
  await session.release();
}
process.stdout.write(`${JSON.stringify({ createMs, runMs })}\n`);
