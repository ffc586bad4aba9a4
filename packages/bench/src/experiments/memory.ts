import type { MemoryVariant, ResultRow } from '../bench-result.ts';
import { measureServerLoad, readImage, withServer, type ExperimentContext } from './experiment-context.ts';

/** glibc serves allocations above this from mmap, so memory freed after loading goes back to the OS. */
export const MALLOC_MMAP_THRESHOLD_BYTES = 131_072;

/**
 * Memory: the server's RSS and PSS with 1 and 2 workers, with weights inline or external
 * (memory-mapped from the extracted archive), with and without MALLOC_MMAP_THRESHOLD_.
 * Each server answers a few requests first, so the numbers are those of a serving server.
 */
export async function runMemory(context: ExperimentContext): Promise<{ rows: ResultRow[]; variants: MemoryVariant[] }> {
  const { assets } = context;
  const body = await readImage(assets);
  const rows: ResultRow[] = [];
  const variants: MemoryVariant[] = [];
  const weightsKinds: Array<'inline' | 'external'> = assets.externalArchiveFileName ? ['inline', 'external'] : ['inline'];
  for (const weights of weightsKinds) {
    for (const isMallocThresholdSet of [false, true]) {
      for (const workers of [1, 2]) {
        const threads = Math.max(1, Math.floor(context.cpuCount / workers));
        const label = `${workers} worker${workers > 1 ? 's' : ''}, ${weights} weights${isMallocThresholdSet ? `, MALLOC_MMAP_THRESHOLD_=${MALLOC_MMAP_THRESHOLD_BYTES}` : ''}`;
        const row = await withServer(context, {
          assets,
          archiveFileName: weights === 'external' ? assets.externalArchiveFileName : assets.archiveFileName,
          settings: { minWorkers: workers, maxWorkers: workers, intraOpNumThreads: threads },
          env: isMallocThresholdSet ? { MALLOC_MMAP_THRESHOLD_: String(MALLOC_MMAP_THRESHOLD_BYTES) } : undefined,
          label: `memory ${label}`,
        }, (server, path) => measureServerLoad(context, server, {
          path, body, experiment: 'memory', label, concurrency: workers, requests: 4 * workers, warmupRequests: 2 * workers, isPssSampled: true,
        }));
        rows.push(row);
        variants.push({ label, weights, isMallocThresholdSet, workers, rssMb: row.peakRssMb, pssMb: row.pssMb });
      }
    }
  }
  return { rows, variants };
}
