import { fileURLToPath } from 'node:url';
import type { OverheadRound, ResultRow } from '../bench-result.ts';
import { runLoad } from '../load-generator.ts';
import { startProcessSampler } from '../process-sampler.ts';
import { runJsonChild, startListeningChild } from '../child-process-json.ts';
import type { TensorAssets } from '../model-assets.ts';
import { median } from '../stats.ts';
import type { RunningServer } from '../server-process.ts';
import {
  bestRound,
  measureServerLoad,
  rowFromLoad,
  serverTmpDir,
  withServer,
  type ExperimentContext,
} from './experiment-context.ts';

const bareServerScript = fileURLToPath(new URL('../jobs/bare-server.mjs', import.meta.url));
const tensorOwnTimeScript = fileURLToPath(new URL('../jobs/tensor-own-time.mjs', import.meta.url));

/** The tensor model's own time per request in one process (parse JSON, run, serialise), p50 ms. */
export async function measureTensorOwnTime(
  tensor: TensorAssets,
  runs = 2000,
): Promise<{ endToEndP50Ms: number; inferP50Ms: number }> {
  const { messages } = await runJsonChild({
    scriptPath: tensorOwnTimeScript,
    args: [JSON.stringify({ modelPath: tensor.modelPath, body: tensor.body.toString('utf8'), runs })],
  });
  const own = messages.find((m) => m.type === 'own-time') as { inferMs: number[]; endToEndMs: number[] } | undefined;
  return {
    endToEndP50Ms: own ? median(own.endToEndMs) : Number.NaN,
    inferP50Ms: own ? median(own.inferMs) : Number.NaN,
  };
}

async function startBareServer(): Promise<{ pid: number; origin: string; stop: () => void }> {
  const { child, port } = await startListeningChild(bareServerScript);
  return { pid: child.pid!, origin: `http://127.0.0.1:${port}`, stop: () => child.kill('SIGTERM') };
}

/**
 * The server's best configuration for a model whose run takes microseconds: one worker with one
 * intra-op thread (a thread pool's wake-ups would cost more than the run), and batches of up to
 * 8 formed from the queue under load; the no-wasted-wait rule sends a lone request at once, so
 * the delay costs a lone client nothing.
 */
export const OVERHEAD_BEST_SETTINGS = {
  minWorkers: 1,
  maxWorkers: 1,
  batchSize: 8,
  maxBatchDelay: 2,
  intraOpNumThreads: 1,
} as const;

/**
 * Unmeasured requests before each measured run: enough for V8 to optimise the request path of
 * both the bare route and the server (a second at these rates). With 200, the server's first
 * round measured up to 25% below its later ones while the JIT was still at work.
 */
const OVERHEAD_WARMUP_REQUESTS = 5000;

/**
 * Rounds of the many-clients comparison, each a sixth of the planned time per server; the bare
 * route and the servers take turns within each, in alternating order (forward, then backward).
 * This machine's speed drifts by up to 40% within a minute, and by half within seconds, and the
 * bare route gains more from a fast phase than the server, so the ratio target is judged on the
 * median of the rounds' own ratios rather than on the best rounds, which may come from different
 * phases. Twelve short rounds rather than six long ones (the same time in all): the two sides of a
 * pair are measured closer together, and the median of twelve moves less between runs.
 */
const OVERHEAD_ROUNDS = 12;

/** Each many-clients round runs this share of the planned time per server (OVERHEAD_ROUNDS × share = twice the planned time). */
const OVERHEAD_ROUND_SHARE = 2 / OVERHEAD_ROUNDS;

/**
 * Overhead: a bare fastify route that returns a constant against the Marina server with the
 * tensor model `2x + 1` (its own run time is microseconds, so what is measured is the server:
 * HTTP, queueing, the worker hand-off, JSON in and out), in its best configuration for such a
 * model (`OVERHEAD_BEST_SETTINGS`) and with defaults, all driven by the same client with the
 * same small JSON body at `plan.overheadConcurrency`, then each with one client (its p50 is
 * compared with the model's own time per request).
 *
 * All three servers stay up and the many-clients runs alternate between them in
 * `OVERHEAD_ROUNDS` rounds of a sixth of the planned time each, so a load spike from another
 * process hits all of them alike; each row keeps its best round, and says so when the rounds differ
 * by more than 25% ("noisy"). The rounds' bare and best-server rates are returned in pairs for the
 * ratio target.
 */
export async function runOverhead(context: ExperimentContext): Promise<{ rows: ResultRow[]; rounds: OverheadRound[] }> {
  const tensor = context.tensorAssets;
  if (!tensor) return { rows: [], rounds: [] };
  const { body, contentType } = tensor;
  const { overheadConcurrency: concurrency, overheadDurationMs: durationMs } = context.plan;
  const path = `/predictions/${tensor.modelName}`;
  const settingsText = `batch ${OVERHEAD_BEST_SETTINGS.batchSize}, delay ${OVERHEAD_BEST_SETTINGS.maxBatchDelay} ms, 1 worker × ${OVERHEAD_BEST_SETTINGS.intraOpNumThreads} thread`;

  const bare = await startBareServer();
  try {
    return await withServer(
      context,
      { model: tensor, label: `tensor model 2x+1, ${settingsText}`, settings: { ...OVERHEAD_BEST_SETTINGS } },
      async (best, bestPath) =>
        withServer(
          context,
          {
            model: tensor,
            label: 'tensor model 2x+1, defaults',
            tmpDir: serverTmpDir(context, 'marina-bench-overhead-2'),
          },
          async (defaults, defaultsPath) => {
            const targets = [
              {
                name: 'bare fastify route (constant)',
                measure: (clients: number, ms: number, warmup = OVERHEAD_WARMUP_REQUESTS) =>
                  measureBare(context, bare, path, body, contentType, clients, ms, warmup),
              },
              {
                name: `Marina server, tensor model 2x+1, ${settingsText} (best)`,
                measure: (clients: number, ms: number, warmup = OVERHEAD_WARMUP_REQUESTS) =>
                  measureServer(context, best, bestPath, body, contentType, clients, ms, warmup),
              },
              {
                name: 'Marina server, tensor model 2x+1, defaults',
                measure: (clients: number, ms: number, warmup = OVERHEAD_WARMUP_REQUESTS) =>
                  measureServer(context, defaults, defaultsPath, body, contentType, clients, ms, warmup),
              },
            ];
            const rows: ResultRow[] = [];
            const rounds: ResultRow[][] = targets.map(() => []);
            const order = [...targets.keys()];
            for (let round = 0; round < OVERHEAD_ROUNDS; round++) {
              // The first round warms each server up fully; later ones only open their connections again.
              const warmup = round === 0 ? OVERHEAD_WARMUP_REQUESTS : OVERHEAD_WARMUP_REQUESTS / 10;
              for (const i of round % 2 === 0 ? order : [...order].reverse())
                rounds[i]!.push(
                  await targets[i]!.measure(concurrency, Math.ceil(durationMs * OVERHEAD_ROUND_SHARE), warmup),
                );
            }
            targets.forEach((target, i) => {
              rows.push({ ...bestRound(rounds[i]!, 'req/s', 0), config: `${target.name}, ${concurrency} clients` });
            });
            for (const target of targets.slice(0, 2)) {
              const row = await target.measure(1, durationMs);
              rows.push({ ...row, config: `${target.name}, 1 client` });
            }
            const paired = rounds[0]!.map((bareRound, r) => ({
              bareReqPerSec: bareRound.throughputPerSec,
              serverReqPerSec: rounds[1]![r]!.throughputPerSec,
            }));
            return { rows, rounds: paired };
          },
        ),
    );
  } finally {
    bare.stop();
  }
}

async function measureBare(
  context: ExperimentContext,
  bare: { pid: number; origin: string },
  path: string,
  body: Buffer,
  contentType: string | undefined,
  clients: number,
  durationMs: number,
  warmupRequests: number,
): Promise<ResultRow> {
  context.onProgress({
    type: 'phase',
    label: `bare fastify route (constant), ${clients} client${clients > 1 ? 's' : ''}`,
    total: 0,
  });
  await runLoad({ origin: bare.origin, path, body, contentType, concurrency: clients, requests: 0, warmupRequests });
  const sampler = startProcessSampler({ getPids: () => [bare.pid] });
  const load = await runLoad({
    origin: bare.origin,
    path,
    body,
    contentType,
    concurrency: clients,
    requests: 10_000_000,
    durationMs,
  });
  return rowFromLoad('overhead', 'bare', clients, load, sampler.stop());
}

function measureServer(
  context: ExperimentContext,
  server: RunningServer,
  path: string,
  body: Buffer,
  contentType: string | undefined,
  clients: number,
  durationMs: number,
  warmupRequests: number,
): Promise<ResultRow> {
  return measureServerLoad(context, server, {
    path,
    body,
    contentType,
    experiment: 'overhead',
    label: `Marina server, ${clients} client${clients > 1 ? 's' : ''}`,
    concurrency: clients,
    requests: 10_000_000,
    durationMs,
    warmupRequests,
  });
}
