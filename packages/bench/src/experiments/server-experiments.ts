import type { ResultRow } from '../bench-result.ts';
import type { ServerModelSettings } from '../server-process.ts';
import { measureServerLoad, readImage, withServer, type ExperimentContext } from './experiment-context.ts';

/** A server configuration the bench can start again (the sweep reruns the best one). */
export interface ServerSpec {
  label: string;
  /** Archive to load; undefined = the model's inline-weights archive. */
  archiveFileName?: string;
  /** models JSON for the version; undefined = the server's defaults. */
  settings?: ServerModelSettings;
  env?: Record<string, string>;
}

export interface ServerRunResult {
  row: ResultRow;
  spec: ServerSpec;
}

function warmupFor(spec: ServerSpec): number {
  const workers = spec.settings?.minWorkers ?? 1;
  const batch = spec.settings?.batchSize ?? 1;
  return Math.max(4, 2 * workers * batch);
}

async function runServerAtConcurrency(context: ExperimentContext, experiment: ResultRow['experiment'], spec: ServerSpec): Promise<ServerRunResult> {
  const body = await readImage(context.assets);
  const row = await withServer(context, { assets: context.assets, archiveFileName: spec.archiveFileName, settings: spec.settings, env: spec.env, label: spec.label }, (server, path) =>
    measureServerLoad(context, server, {
      path, body, experiment, label: spec.label, concurrency: context.plan.concurrency, requests: context.plan.images, warmupRequests: warmupFor(spec),
    }));
  return { row, spec };
}

/** Centralized: one server with default settings, `plan.images` requests at `plan.concurrency` (raw JPEG bodies). */
export function runCentralized(context: ExperimentContext): Promise<ServerRunResult> {
  return runServerAtConcurrency(context, 'centralized', { label: '1 worker, defaults' });
}

/**
 * Batched: batchSize 8, maxBatchDelay 100 ms at `plan.concurrency`; then a lone client on the same
 * server, whose latency shows whether the batcher waits when nothing else is coming.
 */
export async function runBatched(context: ExperimentContext): Promise<{ loaded: ServerRunResult; lone: ResultRow }> {
  const spec: ServerSpec = { label: 'batch 8, delay 100 ms', settings: { batchSize: 8, maxBatchDelay: 100 } };
  const body = await readImage(context.assets);
  const loneRequests = Math.max(10, Math.min(40, Math.round(context.plan.images / 5)));
  return withServer(context, { assets: context.assets, settings: spec.settings, label: spec.label }, async (server, path) => {
    const loaded = await measureServerLoad(context, server, {
      path, body, experiment: 'batched', label: spec.label, concurrency: context.plan.concurrency, requests: context.plan.images, warmupRequests: warmupFor(spec),
    });
    const lone = await measureServerLoad(context, server, {
      path, body, experiment: 'batched', label: `${spec.label}, lone client`, concurrency: 1, requests: loneRequests, warmupRequests: 2,
    });
    return { loaded: { row: loaded, spec }, lone };
  });
}

/**
 * Workers: 2, 4, 8 … workers (up to the core count) with cores ÷ workers intra-op threads each,
 * so the cores are never oversubscribed; 2 workers also with external-data (memory-mapped) weights.
 */
export async function runWorkers(context: ExperimentContext): Promise<ServerRunResult[]> {
  const results: ServerRunResult[] = [];
  const counts = [2, 4, 8, 16].filter((w) => w <= Math.max(2, context.cpuCount));
  for (const workers of counts) {
    const threads = Math.max(1, Math.floor(context.cpuCount / workers));
    const settings: ServerModelSettings = { minWorkers: workers, maxWorkers: workers, intraOpNumThreads: threads };
    results.push(await runServerAtConcurrency(context, 'workers', { label: `${workers} workers × ${threads} thread${threads > 1 ? 's' : ''}`, settings }));
    // Batching inside each worker: on CPU a batch of 4–8 ran up to ~10% faster than batch 1 (the ceiling's own rows).
    results.push(await runServerAtConcurrency(context, 'workers', {
      label: `${workers} workers × ${threads} thread${threads > 1 ? 's' : ''}, batch 8, delay 100 ms`,
      settings: { ...settings, batchSize: 8, maxBatchDelay: 100 },
    }));
    if (workers === 2 && context.assets.externalArchiveFileName) {
      results.push(await runServerAtConcurrency(context, 'workers', {
        label: `${workers} workers × ${threads} thread${threads > 1 ? 's' : ''}, external data`, settings, archiveFileName: context.assets.externalArchiveFileName,
      }));
    }
  }
  return results;
}

/** The concurrency sweep (perf_analyzer style) of one server configuration: one server, one row per level. */
export async function runSweep(context: ExperimentContext, spec: ServerSpec): Promise<ResultRow[]> {
  const body = await readImage(context.assets);
  return withServer(context, { assets: context.assets, archiveFileName: spec.archiveFileName, settings: spec.settings, env: spec.env, label: `sweep ${spec.label}` }, async (server, path) => {
    const rows: ResultRow[] = [];
    for (const concurrency of context.plan.sweepConcurrencies) {
      rows.push(await measureServerLoad(context, server, {
        path, body, experiment: 'sweep', label: `${spec.label} @ ${concurrency}`, concurrency,
        requests: Math.max(context.plan.sweepMinRequests, 4 * concurrency), warmupRequests: Math.min(concurrency, 8),
      }));
    }
    return rows;
  });
}
