import { readdir, stat } from 'node:fs/promises';
import { join } from 'node:path';

/** Node worker thread, handler and session bookkeeping beside the weights, per worker, bytes. */
const PER_WORKER_BYTES = 16 * 2 ** 20;

/**
 * What loading a model is expected to add to the process's memory before anything is measured
 * (ModelMesh's predictModelSize; the budget's reservation during a first load): the first worker
 * holds about 2 × the model's files (weights plus onnxruntime's working copies and its arena after
 * the first run: a ResNet-18 of 47 MB measured 105–140 MB serving), each
 * further worker about half of them more (the optimised copy's weights are memory-mapped and
 * shared), and PER_WORKER_BYTES each. Once loaded, the measured growth replaces it.
 */
export async function estimateModelBytes(options: { modelDir: string; workers?: number }): Promise<number> {
  const fileBytes = await folderBytes(options.modelDir, 0);
  const workers = Math.max(1, options.workers ?? 1);
  return Math.round(fileBytes * 2 + (workers - 1) * fileBytes * 0.5 + workers * PER_WORKER_BYTES);
}

/** Bytes of the files under `dir` (a file: its size), at most 8 levels deep, symbolic links not followed. */
async function folderBytes(dir: string, depth: number): Promise<number> {
  const info = await stat(dir);
  if (!info.isDirectory()) return info.size;
  if (depth > 8) return 0;
  let total = 0;
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) total += await folderBytes(path, depth + 1);
    else if (entry.isFile()) total += (await stat(path)).size;
  }
  return total;
}
