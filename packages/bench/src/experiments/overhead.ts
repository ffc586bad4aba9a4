import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import type { ResultRow } from '../bench-result.ts';
import { benchErrors } from '../errors.ts';
import { runLoad } from '../load-generator.ts';
import { startProcessSampler } from '../process-sampler.ts';
import { runJsonChild } from '../child-process-json.ts';
import type { TensorAssets } from '../model-assets.ts';
import { median } from '../stats.ts';
import { measureServerLoad, rowFromLoad, withServer, type ExperimentContext } from './experiment-context.ts';

const bareServerScript = fileURLToPath(new URL('../jobs/bare-server.mjs', import.meta.url));
const tensorOwnTimeScript = fileURLToPath(new URL('../jobs/tensor-own-time.mjs', import.meta.url));

/** The tensor model's own time per request in one process (parse JSON, run, serialise), p50 ms. */
export async function measureTensorOwnTime(tensor: TensorAssets, runs = 2000): Promise<{ endToEndP50Ms: number; inferP50Ms: number }> {
  const { messages } = await runJsonChild({ scriptPath: tensorOwnTimeScript, args: [JSON.stringify({ modelPath: tensor.modelPath, body: tensor.body.toString('utf8'), runs })] });
  const own = messages.find((m) => m.type === 'own-time') as { inferMs: number[]; endToEndMs: number[] } | undefined;
  return { endToEndP50Ms: own ? median(own.endToEndMs) : Number.NaN, inferP50Ms: own ? median(own.inferMs) : Number.NaN };
}

async function startBareServer(): Promise<{ pid: number; origin: string; stop: () => void }> {
  const child = spawn(process.execPath, [bareServerScript], { stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr!.on('data', (chunk: Buffer) => { stderr = (stderr + chunk.toString()).slice(-2000); });
  const port = await new Promise<number>((resolve, reject) => {
    createInterface({ input: child.stdout! }).once('line', (line) => resolve((JSON.parse(line) as { port: number }).port));
    child.once('exit', (code) => reject(benchErrors.create.MARINA_ERR_BENCH_CHILD_FAILED(`${bareServerScript} exited with code ${code} before listening; stderr: ${stderr || '(empty)'}`)));
  });
  return { pid: child.pid!, origin: `http://127.0.0.1:${port}`, stop: () => child.kill('SIGTERM') };
}

/**
 * Overhead: a bare fastify route that returns a constant, then the Marina server with the tensor
 * model `2x + 1` (its own run time is microseconds, so what is measured is the server: HTTP,
 * queueing, the worker hand-off, JSON in and out), both driven by the same client with the same
 * small JSON body at `plan.overheadConcurrency` for `plan.overheadDurationMs`, then each with one
 * client (its p50 is compared with the model's own time per request).
 */
export async function runOverhead(context: ExperimentContext): Promise<ResultRow[]> {
  const tensor = context.tensorAssets;
  if (!tensor) return [];
  const { body, contentType } = tensor;
  const { overheadConcurrency: concurrency, overheadDurationMs: durationMs } = context.plan;
  const rows: ResultRow[] = [];
  const bigCount = 10_000_000;

  const bare = await startBareServer();
  try {
    for (const clients of [concurrency, 1]) {
      const label = `bare fastify route (constant), ${clients} client${clients > 1 ? 's' : ''}`;
      context.onProgress({ type: 'phase', label, total: 0 });
      const path = `/predictions/${tensor.modelName}`;
      await runLoad({ origin: bare.origin, path, body, contentType, concurrency: clients, requests: 0, warmupRequests: 200 });
      const sampler = startProcessSampler({ getPids: () => [bare.pid] });
      const load = await runLoad({ origin: bare.origin, path, body, contentType, concurrency: clients, requests: bigCount, durationMs });
      rows.push(rowFromLoad('overhead', label, clients, load, sampler.stop()));
    }
  } finally {
    bare.stop();
  }

  await withServer(context, { model: tensor, label: 'tensor model 2x+1, defaults' }, async (server, path) => {
    for (const clients of [concurrency, 1]) {
      rows.push(await measureServerLoad(context, server, {
        path, body, contentType, experiment: 'overhead', label: `Marina server, tensor model 2x+1, ${clients} client${clients > 1 ? 's' : ''}`,
        concurrency: clients, requests: bigCount, durationMs, warmupRequests: 200,
      }));
    }
  });
  return rows;
}
