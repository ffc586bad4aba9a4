import { fileURLToPath } from 'node:url';
import { emptyRow, type ResultRow } from '../bench-result.ts';
import { runJsonChild } from '../child-process-json.ts';
import { startProcessSampler } from '../process-sampler.ts';
import { median, summarizeLatencies } from '../stats.ts';
import type { ExperimentContext } from './experiment-context.ts';

const ceilingScript = fileURLToPath(new URL('../jobs/ceiling-child.mjs', import.meta.url));
const MB = 1024 * 1024;

/** The model's own time for one image in one process: decode + preprocess + run, and run alone (p50 ms). */
export interface OwnTime {
  endToEndP50Ms: number;
  inferP50Ms: number;
}

interface BatchMessage { type: 'batch'; batchSize: number; images: number; wallMs: number; latenciesMs: number[] }
interface OwnTimeMessage { type: 'own-time'; inferMs: number[]; endToEndMs: number[] }

/**
 * Ceiling: the model in one child process calling onnxruntime-node directly, intra-op threads =
 * cores, graph optimisation 'all', one preprocessed tensor reused, each batch size tried; no HTTP,
 * no decoding. Returns one row per batch size (the best is the ceiling) and the model's own
 * single-image time at the same thread count.
 */
export async function runCeiling(context: ExperimentContext): Promise<{ rows: ResultRow[]; ownTime: OwnTime }> {
  const { plan, assets } = context;
  const total = plan.ceilingBatchSizes.length;
  context.onProgress({ type: 'phase', label: `ceiling: ${assets.model}, ${context.cpuCount} threads, batch ${plan.ceilingBatchSizes.join('/')}`, total: total * plan.images });
  let pid = 0;
  const sampler = startProcessSampler({ getPids: () => (pid ? [pid] : []) });
  let finishedImages = 0;
  const { messages } = await runJsonChild({
    scriptPath: ceilingScript,
    args: [JSON.stringify({
      modelPath: assets.modelPath,
      imagePath: assets.imagePath,
      threads: context.cpuCount,
      batchSizes: plan.ceilingBatchSizes,
      minImages: Math.min(plan.images, 64),
      minDurationMs: plan.ceilingMinDurationMs,
      ownTimeRuns: 20,
    })],
    onSpawn: (child) => { pid = child.pid ?? 0; },
    onMessage: (message) => {
      if (message.type === 'progress') context.onProgress({ type: 'tick', done: Math.min(total * plan.images, finishedImages + Number(message.images)) });
      if (message.type === 'batch') finishedImages += plan.images;
    },
  });
  const usage = sampler.stop();
  const rows = messages.filter((m): m is BatchMessage & Record<string, unknown> => m.type === 'batch').map((m) => {
    const latency = summarizeLatencies(m.latenciesMs);
    return {
      ...emptyRow('ceiling', `batch ${m.batchSize}`),
      images: m.images,
      concurrency: m.batchSize,
      throughputPerSec: m.images / (m.wallMs / 1000),
      p50Ms: latency.p50Ms,
      p90Ms: latency.p90Ms,
      p99Ms: latency.p99Ms,
      // One process runs every batch size, so CPU and memory are for the whole ceiling run.
      peakCpuPercent: usage.peakCpuPercent,
      meanCpuPercent: usage.meanCpuPercent,
      peakRssMb: usage.peakRssBytes / MB,
      note: 'latency = one batch run',
    };
  });
  const best = rows.reduce<ResultRow | undefined>((acc, row) => (acc === undefined || row.throughputPerSec > acc.throughputPerSec ? row : acc), undefined);
  if (best) best.note = `${best.note}; best batch size (the ceiling)`;
  const own = messages.find((m): m is OwnTimeMessage & Record<string, unknown> => m.type === 'own-time');
  return { rows, ownTime: { endToEndP50Ms: own ? median(own.endToEndMs) : Number.NaN, inferP50Ms: own ? median(own.inferMs) : Number.NaN } };
}

/** Only the model's own single-image time (no batch sweep), e.g. for the tiny model. */
export async function measureOwnTime(modelPath: string, imagePath: string, threads: number, runs = 200): Promise<OwnTime> {
  const { messages } = await runJsonChild({
    scriptPath: ceilingScript,
    args: [JSON.stringify({ modelPath, imagePath, threads, batchSizes: [], minImages: 0, minDurationMs: 0, ownTimeRuns: runs })],
  });
  const own = messages.find((m): m is OwnTimeMessage & Record<string, unknown> => m.type === 'own-time');
  return { endToEndP50Ms: own ? median(own.endToEndMs) : Number.NaN, inferP50Ms: own ? median(own.inferMs) : Number.NaN };
}
