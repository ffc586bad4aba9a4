import type { MemoryVariant, ResultRow } from '../bench-result.ts';
import { measureServerLoad, readImage, withServer, type ExperimentContext } from './experiment-context.ts';

/** glibc serves allocations above this from mmap, so memory freed after loading goes back to the OS. */
const MALLOC_MMAP_THRESHOLD_BYTES = 1_048_576;

/** A server configuration the memory experiment measures with 1 and 2 workers. */
interface MemoryServerVariant {
  name: string;
  weights: 'inline' | 'external';
  isMallocThresholdSet: boolean;
  env: Record<string, string>;
}

/**
 * The variants, before and after (each pair of weights × threshold once, so the targets keep one
 * pair per variant):
 * - before: inline weights, no glibc threshold (`MARINA_NO_REEXEC=1` keeps `serve --foreground`
 *   from setting it), no optimised copy: each worker holds all the weights privately;
 * - previous best: external weights + threshold, no optimised copy ('all' still copies them per worker);
 * - after, the defaults: inline weights, the threshold set by `serve --foreground` itself, the
 *   optimised copy with external weights that every worker memory-maps.
 */
const MEMORY_SERVER_VARIANTS: readonly MemoryServerVariant[] = [
  {
    name: 'before: inline weights, no threshold, no optimised copy',
    weights: 'inline',
    isMallocThresholdSet: false,
    env: { MARINA_NO_REEXEC: '1', MARINA_ORT_CACHE_OPTIMIZED_MODEL: '0' },
  },
  {
    name: `external weights, MALLOC_MMAP_THRESHOLD_=${MALLOC_MMAP_THRESHOLD_BYTES}, no optimised copy`,
    weights: 'external',
    isMallocThresholdSet: true,
    env: { MALLOC_MMAP_THRESHOLD_: String(MALLOC_MMAP_THRESHOLD_BYTES), MARINA_ORT_CACHE_OPTIMIZED_MODEL: '0' },
  },
  {
    name: 'after (defaults): inline weights, threshold via re-exec, shared optimised copy',
    weights: 'inline',
    isMallocThresholdSet: true,
    env: {},
  },
];

/**
 * Memory: the server's RSS and PSS with 1 and 2 workers for each of MEMORY_SERVER_VARIANTS.
 * Each server answers a few requests first, so the numbers are those of a serving server.
 * `packages/bench/src/jobs/session-memory-sweep.mjs` measures more onnxruntime options in one process.
 */
export async function runMemory(context: ExperimentContext): Promise<{ rows: ResultRow[]; variants: MemoryVariant[] }> {
  const { assets } = context;
  const body = await readImage(assets);
  const rows: ResultRow[] = [];
  const variants: MemoryVariant[] = [];
  for (const variant of MEMORY_SERVER_VARIANTS) {
    if (variant.weights === 'external' && !assets.externalArchiveFileName) continue;
    for (const workers of [1, 2]) {
      const threads = Math.max(1, Math.floor(context.cpuCount / workers));
      const label = `${workers} worker${workers > 1 ? 's' : ''}, ${variant.name}`;
      const row = await withServer(
        context,
        {
          assets,
          archiveFileName: variant.weights === 'external' ? assets.externalArchiveFileName : assets.archiveFileName,
          settings: { minWorkers: workers, maxWorkers: workers, intraOpNumThreads: threads },
          env: variant.env,
          label: `memory ${label}`,
        },
        (server, path) =>
          measureServerLoad(context, server, {
            path,
            body,
            experiment: 'memory',
            label,
            concurrency: workers,
            requests: 4 * workers,
            warmupRequests: 2 * workers,
            isPssSampled: true,
          }),
      );
      rows.push(row);
      variants.push({
        label,
        weights: variant.weights,
        isMallocThresholdSet: variant.isMallocThresholdSet,
        workers,
        rssMb: row.peakRssMb,
        pssMb: row.pssMb,
      });
    }
  }
  return { rows, variants };
}
