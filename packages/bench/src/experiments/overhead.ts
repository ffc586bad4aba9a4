import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import type { ResultRow } from '../bench-result.ts';
import { benchErrors } from '../errors.ts';
import { runLoad } from '../load-generator.ts';
import { startProcessSampler } from '../process-sampler.ts';
import { measureServerLoad, readImage, rowFromLoad, withServer, type ExperimentContext } from './experiment-context.ts';

const bareServerScript = fileURLToPath(new URL('../jobs/bare-server.mjs', import.meta.url));

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
 * Overhead: a bare fastify route that returns a constant, then the Marina server with the tiny
 * model, both driven by the same client with the same body at `plan.overheadConcurrency` for
 * `plan.overheadDurationMs`, then each with one client (its p50 is compared with the tiny model's own time).
 */
export async function runOverhead(context: ExperimentContext): Promise<ResultRow[]> {
  const tiny = context.tinyAssets;
  if (!tiny) return [];
  const body = await readImage(tiny);
  const { overheadConcurrency: concurrency, overheadDurationMs: durationMs } = context.plan;
  const rows: ResultRow[] = [];
  const bigCount = 10_000_000;

  const bare = await startBareServer();
  try {
    for (const clients of [concurrency, 1]) {
      const label = `bare fastify route (constant), ${clients} client${clients > 1 ? 's' : ''}`;
      context.onProgress({ type: 'phase', label, total: 0 });
      await runLoad({ origin: bare.origin, path: '/predictions/tiny', body, concurrency: clients, requests: 0, warmupRequests: 200 });
      const sampler = startProcessSampler({ getPids: () => [bare.pid] });
      const load = await runLoad({ origin: bare.origin, path: '/predictions/tiny', body, concurrency: clients, requests: bigCount, durationMs });
      rows.push(rowFromLoad('overhead', label, clients, load, sampler.stop()));
    }
  } finally {
    bare.stop();
  }

  await withServer(context, { assets: tiny, label: 'tiny model, defaults' }, async (server, path) => {
    for (const clients of [concurrency, 1]) {
      rows.push(await measureServerLoad(context, server, {
        path, body, experiment: 'overhead', label: `Marina server, tiny model, ${clients} client${clients > 1 ? 's' : ''}`,
        concurrency: clients, requests: bigCount, durationMs, warmupRequests: 200,
      }));
    }
  });
  return rows;
}
