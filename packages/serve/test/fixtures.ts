import { join } from 'node:path';
import { writeTinyClassifier, writeIndexToName } from '@marina/model-zoo';
import { writeModelFolder } from './helpers.ts';

/**
 * A custom handler whose work takes `sleepMs` from the JSON body, blocking its thread the way a
 * native run() does; answers `{ echo, batchSize, requestId }` per request.
 */
export const sleepyHandlerSource = `
export function handle(data, context) {
  const ms = Math.max(0, ...data.map((row) => Number((row.body && row.body.sleepMs) || 0)));
  const end = Date.now() + ms;
  while (Date.now() < end) { /* busy, like a native inference */ }
  return data.map((row, i) => ({ echo: row.body && row.body.value, batchSize: data.length, requestId: context.requestIds[i] }));
}
`;

export async function writeSleepyModel(
  dir: string,
  name: string,
  modelConfigYaml = 'minWorkers: 1\n',
): Promise<string> {
  return writeModelFolder({
    dir: join(dir, name),
    modelName: name,
    handler: 'sleepy_handler.mjs',
    modelConfigYaml,
    files: { 'sleepy_handler.mjs': sleepyHandlerSource },
  });
}

export async function writeClassifierModel(
  dir: string,
  name: string,
  options: { inputSize?: number; numClasses?: number; modelConfigYaml?: string; labels?: string[]; seed?: number } = {},
): Promise<string> {
  const folder = join(dir, name);
  await writeModelFolder({
    dir: folder,
    modelName: name,
    handler: 'image_classifier',
    writeModel: (path) =>
      writeTinyClassifier({
        outputPath: path,
        inputSize: options.inputSize,
        numClasses: options.numClasses,
        seed: options.seed,
      }),
    modelConfigYaml: options.modelConfigYaml,
  });
  if (options.labels) await writeIndexToName(join(folder, 'index_to_name.json'), options.labels);
  return folder;
}

/**
 * A custom handler driven by marker fields of each JSON row, for failure tests. A row with
 * `gate: <path>` blocks the worker's thread (as a native run() would) until that file exists;
 * `exit: true` calls process.exit; `throw: <text>` throws; `grow: true` fills the heap until the
 * worker's heap limit ends it. Every row answers `{ value, batch, requestId }`.
 */
const gateHandlerSource = `
import { existsSync } from 'node:fs';
const nap = new Int32Array(new SharedArrayBuffer(4));
export function handle(data, context) {
  return data.map((row, i) => {
    const b = (row.body && typeof row.body === 'object') ? row.body : {};
    if (b.gate) while (!existsSync(b.gate)) Atomics.wait(nap, 0, 0, 5);
    if (b.exit) process.exit(7);
    if (b.throw) throw new Error(String(b.throw));
    if (b.grow) { const keep = []; for (;;) keep.push(new Array(1e5).fill(i + 0.5)); }
    return { value: b.value ?? null, batch: data.length, requestId: context.requestIds[i] };
  });
}
`;

export async function writeGateModel(
  dir: string,
  name: string,
  modelConfigYaml = 'minWorkers: 1\nbatchSize: 1\n',
): Promise<string> {
  return writeModelFolder({
    dir: join(dir, name),
    modelName: name,
    handler: 'gate_handler.mjs',
    modelConfigYaml,
    files: { 'gate_handler.mjs': gateHandlerSource },
  });
}

/**
 * A custom handler whose import (in the worker, during its model's load) waits until `gatePath`
 * exists: the load stays in progress for as long as the test holds the gate. Answers `{ value }`.
 */
export async function writeSlowLoadModel(dir: string, name: string, gatePath: string): Promise<string> {
  const source = `
import { existsSync } from 'node:fs';
while (!existsSync(${JSON.stringify(gatePath)})) await new Promise((resolve) => setTimeout(resolve, 5));
export function handle(data) {
  return data.map((row) => ({ value: (row.body && row.body.value) ?? null }));
}
`;
  return writeModelFolder({
    dir: join(dir, name),
    modelName: name,
    handler: 'slow_load_handler.mjs',
    modelConfigYaml: 'minWorkers: 1\nbatchSize: 1\n',
    files: { 'slow_load_handler.mjs': source },
  });
}
