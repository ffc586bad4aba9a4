import { fileURLToPath } from 'node:url';
import { emptyRow, type ResultRow } from '../bench-result.ts';
import { runJsonChild } from '../child-process-json.ts';
import { startProcessSampler } from '../process-sampler.ts';
import { summarizeLatencies } from '../stats.ts';
import { measuredColumns, type ExperimentContext } from './experiment-context.ts';

const jobScript = fileURLToPath(new URL('../jobs/classify-job.mjs', import.meta.url));

interface JobTimings {
  loadMs: number;
  totalMs: number;
}

/**
 * Decentralized: every image is a fresh `node classify-job.mjs` process (1 intra-op thread)
 * that loads the model, classifies one JPEG and exits; at most `cap` run at once, for each cap
 * of the plan. Latency is spawn-to-exit of a job; loadShare is the mean share of a job's wall
 * time spent creating the session. RSS is the sum over all live job processes.
 */
export async function runDecentralized(context: ExperimentContext): Promise<ResultRow[]> {
  const { plan, assets } = context;
  const rows: ResultRow[] = [];
  for (const cap of plan.decentralizedCaps) {
    const jobs = plan.decentralizedJobs;
    context.onProgress({ type: 'phase', label: `decentralized: cap ${cap}, ${jobs} jobs`, total: jobs });
    const live = new Set<number>();
    const sampler = startProcessSampler({ getPids: () => [...live] });
    const latenciesMs: number[] = [];
    const loadShares: number[] = [];
    let started = 0;
    let errors = 0;
    let firstError = '';
    const startMs = performance.now();
    const lane = async () => {
      while (started < jobs) {
        started += 1;
        let pid = 0;
        try {
          const { messages, wallMs } = await runJsonChild({
            scriptPath: jobScript,
            args: [assets.modelPath, assets.imagePath, '1'],
            onSpawn: (child) => {
              pid = child.pid ?? 0;
              live.add(pid);
            },
          });
          const timings = messages[0] as unknown as JobTimings | undefined;
          latenciesMs.push(wallMs);
          if (timings) loadShares.push(timings.loadMs / wallMs);
        } catch (error) {
          errors += 1;
          firstError ||= (error as Error).message.slice(0, 200);
        } finally {
          live.delete(pid);
        }
        context.onProgress({ type: 'tick', done: latenciesMs.length + errors });
      }
    };
    await Promise.all(Array.from({ length: cap }, lane));
    const wallMs = performance.now() - startMs;
    const usage = sampler.stop();
    const latency = summarizeLatencies(latenciesMs);
    const loadShare = loadShares.reduce((a, b) => a + b, 0) / Math.max(1, loadShares.length);
    rows.push({
      ...emptyRow('decentralized', `cap ${cap} jobs × 1 thread`),
      images: latency.count,
      concurrency: cap,
      throughputPerSec: latency.count / (wallMs / 1000),
      ...measuredColumns(latency, usage),
      errors,
      loadShare,
      note: `${Math.round(loadShare * 100)}% of each job loading the model${firstError ? `; first error: ${firstError}` : ''}`,
    });
  }
  return rows;
}
