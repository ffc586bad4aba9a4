import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import type { ModelRegistryApi, ModelVersionStats } from '../registry/model-registry-api.ts';
import { RequestHistogram } from './request-histogram.ts';

/** Buckets for latencies, seconds: 0.5 ms to 2 minutes (TorchServe's default response timeout). */
export const LATENCY_BUCKETS_SECONDS = [
  0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120,
];
/** Buckets for batch sizes: powers of two up to 256. */
const BATCH_SIZE_BUCKETS = [1, 2, 4, 8, 16, 32, 64, 128, 256];

const MODEL_LABELS = ['model_name', 'model_version'] as const;
const PRIORITY_LABELS = ['model_name', 'model_version', 'priority'] as const;

/** Marina's per-request metrics of a model version. */
export interface RequestMetrics {
  requestsByStatus: Counter<'model_name' | 'model_version' | 'status_code'>;
  queueLatency: RequestHistogram;
  queueLatencyByPriority: RequestHistogram;
  inferenceLatency: RequestHistogram;
  requestLatency: RequestHistogram;
}

/**
 * marina_requests_total (by status code) and the queue, inference and end-to-end latency histograms.
 *
 * @param flush adds the requests counted since the last scrape to marina_requests_total (at scrape time).
 */
export function registerRequestMetrics(options: { promRegistry: Registry; flush: () => void }): RequestMetrics {
  const registers = [options.promRegistry];
  const requestsByStatus = new Counter({
    name: 'marina_requests_total',
    help: 'Inference requests answered, by model version and HTTP status code.',
    labelNames: ['model_name', 'model_version', 'status_code'] as const,
    registers,
    collect: options.flush,
  });
  const latency = (name: string, help: string, labelNames: readonly string[]) =>
    new RequestHistogram({ name, help, labelNames, buckets: LATENCY_BUCKETS_SECONDS, registers });
  return {
    requestsByStatus,
    queueLatency: latency(
      'marina_queue_latency_seconds',
      "Time an inference job waited in its model version's job queue, seconds.",
      MODEL_LABELS,
    ),
    // Models with priority levels only: one more label, so a model without levels adds no series.
    queueLatencyByPriority: latency(
      'marina_queue_latency_by_priority_seconds',
      "Time an inference job waited in its model version's job queue, seconds, by priority level (models with priorityLevels > 1).",
      PRIORITY_LABELS,
    ),
    inferenceLatency: latency(
      'marina_inference_latency_seconds',
      'Time a job spent in a worker (handler + model), seconds; jobs that never reached a worker are not counted.',
      MODEL_LABELS,
    ),
    requestLatency: latency(
      'marina_request_latency_seconds',
      'End-to-end inference latency from request arrival to response, seconds, every status.',
      MODEL_LABELS,
    ),
  };
}

/** Marina's per-batch histograms of a model version. */
export interface BatchMetrics {
  batchSize: Histogram<'model_name' | 'model_version'>;
  handlerStage: Histogram<string>;
}

/** marina_batch_size and marina_handler_stage_seconds. */
export function registerBatchMetrics(options: { promRegistry: Registry }): BatchMetrics {
  return {
    batchSize: new Histogram({
      name: 'marina_batch_size',
      help: 'Jobs per batch sent to a worker.',
      labelNames: MODEL_LABELS,
      buckets: BATCH_SIZE_BUCKETS,
      registers: [options.promRegistry],
    }),
    handlerStage: new Histogram({
      name: 'marina_handler_stage_seconds',
      help: 'Time of one batch in each handler stage inside the worker, seconds: preprocess_wait (waiting for decoding after the worker picked the batch up), inference, postprocess. Handlers with a single handle() report none.',
      labelNames: [...MODEL_LABELS, 'stage'],
      buckets: LATENCY_BUCKETS_SECONDS,
      registers: [options.promRegistry],
    }),
  };
}

/** marina_pending_response_bytes and marina_response_connections_closed_total, read at scrape time. */
export function registerResponseWriteMetrics(options: {
  promRegistry: Registry;
  responseWrites: { readonly pendingBytes: number; readonly closedCount: number };
}): void {
  const { responseWrites } = options;
  const pending = new Gauge({
    name: 'marina_pending_response_bytes',
    help: 'Bytes of answers written by the server and not yet taken by their clients, over all HTTP connections (bounded by max_pending_response_bytes).',
    registers: [options.promRegistry],
    collect() {
      pending.set(responseWrites.pendingBytes);
    },
  });
  const closed = new Counter({
    name: 'marina_response_connections_closed_total',
    help: 'HTTP connections closed because their answer made no progress for response_write_timeout, or because unread answers held more than max_pending_response_bytes.',
    registers: [options.promRegistry],
    collect() {
      closed.reset();
      closed.inc(responseWrites.closedCount);
    },
  });
}

/** The per-version gauges: name, HELP text and the stats value each shows. */
const MODEL_GAUGES: ReadonlyArray<readonly [string, string, ((s: ModelVersionStats) => number) | undefined]> = [
  ['marina_queue_depth', 'Jobs waiting in the job queue of a model version.', (s) => s.queueDepth],
  ['marina_queue_capacity', 'Size of the job queue of a model version (job_queue_size).', (s) => s.jobQueueSize],
  ['marina_workers', 'Live workers of a model version.', (s) => s.workers],
  ['marina_busy_workers', 'Workers of a model version running a batch right now.', (s) => s.busyWorkers],
  ['marina_min_workers', 'min_worker setting of a model version.', (s) => s.minWorkers],
  // Set per priority level below.
  [
    'marina_queue_depth_by_priority',
    'Jobs queued at each priority level of a model version (models with priorityLevels > 1).',
    undefined,
  ],
  ['marina_max_workers', "max_worker setting of a model version (the autoscaler's ceiling).", (s) => s.maxWorkers],
];

/**
 * The per-version gauges, filled from `registry.stats()` at scrape time; reset first so removed
 * models vanish.
 *
 * @returns the collector, for scrapes of only some metrics.
 */
export function registerModelGauges(options: { promRegistry: Registry; registry: ModelRegistryApi }): () => void {
  const gauges = MODEL_GAUGES.map(
    ([name, help, value]) =>
      [
        new Gauge({
          name,
          help,
          labelNames: value === undefined ? PRIORITY_LABELS : MODEL_LABELS,
          registers: [options.promRegistry],
        }),
        value,
      ] as const,
  );
  let isCollecting = false;
  const collectStats = (): void => {
    if (isCollecting) return;
    isCollecting = true;
    try {
      for (const [gauge] of gauges) gauge.reset();
      for (const s of options.registry.stats()) {
        const labels = { model_name: s.modelName, model_version: s.modelVersion };
        for (const [gauge, value] of gauges) {
          if (value) gauge.set(labels, value(s));
          else
            s.queueDepthByPriority?.forEach((depth, i) => {
              gauge.set({ ...labels, priority: String(i + 1) }, depth);
            });
        }
      }
    } finally {
      isCollecting = false;
    }
  };
  // One collector for all the gauges: prom-client calls `collect` per metric; the flag above plus
  // calling it only from the first gauge keeps it to one stats() call per scrape.
  (gauges[0]![0] as unknown as { collect: () => void }).collect = collectStats;
  return collectStats;
}
