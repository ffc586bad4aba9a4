#!/usr/bin/env node
// Memory and latency of onnxruntime-node session options, as a server with 1 and 2 workers sees
// them: one process, two worker_threads, one session each. Prints one JSON line:
//   { pssAfterOneMb, pssAfterTwoMb, extraWorkerPssMb, rssAfterOneMb, rssAfterTwoMb, createMs[], runMs[] }
// PSS comes from /proc/self/smaps_rollup after each worker has created its session and run it
// (so load-time and first-run allocations are counted as a serving server holds them).
// Plain .mjs: a worker_thread cannot load .ts on Node 20, and the numbers should not include tsx.
//
// Usage: node session-memory.mjs <model.onnx> '<variant JSON>' [runs=10]
//   variant: { graphOptimizationLevel, enableCpuMemArena, enableMemPattern, configEntries: {'full.config.key': value},
//              intraOpNumThreads }
// Set MALLOC_MMAP_THRESHOLD_ in this process's environment to measure with glibc's threshold.
import { readFileSync } from 'node:fs';
import { Worker, isMainThread, parentPort, workerData } from 'node:worker_threads';

function readMemoryMb() {
  const text = readFileSync('/proc/self/smaps_rollup', 'utf8');
  // /proc's kB are KiB; reported in decimal MB like every size Marina prints.
  const field = (name) => (Number(new RegExp(`^${name}:\\s+(\\d+) kB`, 'm').exec(text)?.[1] ?? NaN) * 1024) / 1_000_000;
  return { pssMb: field('Pss'), rssMb: field('Rss') };
}

/**
 * onnxruntime-node joins `extra`'s nesting with dots into session config keys
 * ({ session: { 'intra_op.allow_spinning': '0' } } is 'session.intra_op.allow_spinning'),
 * so full keys are split at their first dot.
 */
function nestConfigEntries(entries) {
  const extra = {};
  for (const [key, value] of Object.entries(entries)) {
    const dot = key.indexOf('.');
    const group = key.slice(0, dot);
    extra[group] ??= {};
    extra[group][key.slice(dot + 1)] = value;
  }
  return extra;
}

/** Session options of a variant; mirrors createSessionOptions in packages/serve/src/backend/ort-session.ts. */
function sessionOptionsOf(variant) {
  const options = {
    graphOptimizationLevel: variant.graphOptimizationLevel ?? 'all',
    intraOpNumThreads: variant.intraOpNumThreads ?? 1,
    interOpNumThreads: 1,
    executionMode: 'sequential',
    executionProviders: ['cpu'],
    extra: nestConfigEntries({ 'session.intra_op.allow_spinning': '0', ...(variant.configEntries ?? {}) }),
  };
  if (variant.enableCpuMemArena !== undefined) options.enableCpuMemArena = variant.enableCpuMemArena;
  if (variant.enableMemPattern !== undefined) options.enableMemPattern = variant.enableMemPattern;
  return options;
}

async function workerMain() {
  const ort = await import('onnxruntime-node');
  const { modelPath, variant, runs } = workerData;
  const startMs = performance.now();
  const session = await ort.InferenceSession.create(modelPath, sessionOptionsOf(variant));
  const createMs = performance.now() - startMs;
  const [dims] = [session.inputMetadata?.[0]?.shape ?? [1, 3, 224, 224]];
  const shape = dims.map((d, i) => (typeof d === 'number' && d > 0 ? d : i === 0 ? 1 : 224));
  const input = new ort.Tensor('float32', new Float32Array(shape.reduce((a, b) => a * b, 1)).fill(0.5), shape);
  const feeds = { [session.inputNames[0]]: input };
  await session.run(feeds);
  parentPort.postMessage({ type: 'loaded', createMs });
  parentPort.on('message', async (message) => {
    if (message !== 'time') return;
    const runMs = [];
    for (let i = 0; i < runs; i++) {
      const t0 = performance.now();
      await session.run(feeds);
      runMs.push(performance.now() - t0);
    }
    parentPort.postMessage({ type: 'timed', runMs });
  });
}

async function main() {
  const [modelPath, variantJson = '{}', runsArg = '10'] = process.argv.slice(2);
  const variant = JSON.parse(variantJson);
  const runs = Number(runsArg);
  const workers = [];
  const startWorker = () =>
    new Promise((resolve, reject) => {
      const worker = new Worker(new URL(import.meta.url), { workerData: { modelPath, variant, runs } });
      workers.push(worker);
      worker.once('error', reject);
      worker.once('message', (message) => resolve({ worker, createMs: message.createMs }));
    });
  const first = await startWorker();
  await new Promise((resolve) => setTimeout(resolve, 300));
  const afterOne = readMemoryMb();
  const second = await startWorker();
  await new Promise((resolve) => setTimeout(resolve, 300));
  const afterTwo = readMemoryMb();
  // Latency with the other worker idle, as a lone request to a 2-worker server would see it.
  const { runMs } = await new Promise((resolve) => {
    first.worker.once('message', resolve);
    first.worker.postMessage('time');
  });
  await Promise.all(workers.map((worker) => worker.terminate()));
  process.stdout.write(
    `${JSON.stringify({
      pssAfterOneMb: afterOne.pssMb,
      pssAfterTwoMb: afterTwo.pssMb,
      extraWorkerPssMb: afterTwo.pssMb - afterOne.pssMb,
      rssAfterOneMb: afterOne.rssMb,
      rssAfterTwoMb: afterTwo.rssMb,
      createMs: [first.createMs, second.createMs],
      runMs,
    })}\n`,
  );
}

if (isMainThread) await main();
else await workerMain();
