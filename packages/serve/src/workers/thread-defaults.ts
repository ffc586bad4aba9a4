/** Where a worker's intra-op thread count came from. */
export type ThreadSource = 'model config' | 'OMP_NUM_THREADS' | 'cores';

/**
 * Intra-op threads for each worker of a model: the model's own setting (`intraOpNumThreads`
 * in model-config.yaml or the models JSON), else `OMP_NUM_THREADS`, else the cores divided
 * among all workers of all models, at least 1. The default never oversubscribes the cores
 * (that costs 30–40% throughput: onnxruntime-node facts).
 */
export function resolveIntraOpThreads(options: {
  configured: number | undefined;
  ompNumThreads: number | undefined;
  cpuCount: number;
  /** Workers of every model that will run at once, including the one being sized. */
  totalWorkers: number;
}): { intraOpNumThreads: number; source: ThreadSource } {
  if (options.configured !== undefined && options.configured > 0)
    return { intraOpNumThreads: options.configured, source: 'model config' };
  if (options.ompNumThreads !== undefined && options.ompNumThreads > 0)
    return { intraOpNumThreads: options.ompNumThreads, source: 'OMP_NUM_THREADS' };
  return {
    intraOpNumThreads: Math.max(1, Math.floor(options.cpuCount / Math.max(1, options.totalWorkers))),
    source: 'cores',
  };
}
