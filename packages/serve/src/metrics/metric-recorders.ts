import type { BatchDoneEvent, RequestDoneEvent, WorkerLoadedEvent } from '../registry/model-registry-api.ts';
import { type MetricLog, roundMetric } from './metric-log.ts';
import type { BatchMetrics, RequestMetrics } from './model-version-metrics.ts';
import type { HistogramCell } from './request-histogram.ts';
import type { FrontendTimes, TorchServeGauges, TorchServeRequestCounters } from './torchserve-metrics.ts';

/**
 * One label set's per-request metrics, found once (cellOf) and then updated with plain arithmetic:
 * prom-client's labelled inc/observe cost about 0.6 µs each, several per request on the HTTP
 * thread. The counters' shares are added at scrape time (flush).
 */
interface RequestCell {
  readonly tsLabels: { model_name: string; model_version: string; hostname: string };
  readonly labels: { model_name: string; model_version: string };
  /** Not yet added to ts_inference_requests_total, and the answered requests' share of the two ts_* latency counters. */
  requests: number;
  answered: number;
  latencyUs: number;
  queueUs: number;
  /** Not yet added to marina_requests_total, by status code. */
  readonly statuses: Map<number, number>;
  readonly request: HistogramCell;
  readonly queue: HistogramCell;
  readonly inference: HistogramCell;
}

/** Records each answered request; its counters are added at scrape time. */
export interface RequestRecorder {
  onRequest(event: RequestDoneEvent): void;
  /** Adds the requests counted since the last call to the counters. */
  flush(): void;
  /** The latest answered request's frontend times, for TorchServe's QueueTime and WorkerThreadTime. */
  lastFrontend(): FrontendTimes | undefined;
}

/** The recorder of the `request` events: TorchServe's counters and Marina's histograms, by label set. */
export function createRequestRecorder(options: {
  hostname: string;
  tsCounters: TorchServeRequestCounters;
  metrics: RequestMetrics;
  logMetric: MetricLog;
}): RequestRecorder {
  const { metrics, logMetric } = options;
  const cells = new Map<string, RequestCell>();
  let lastFrontend: FrontendTimes | undefined;
  const cellOf = (event: RequestDoneEvent): RequestCell => {
    const requestedVersion = event.requestedVersion || 'default';
    const key = `${event.modelName}\u0000${requestedVersion}\u0000${event.modelVersion}`;
    let cell = cells.get(key);
    if (!cell) {
      const labels = { model_name: event.modelName, model_version: event.modelVersion };
      cell = {
        tsLabels: { model_name: event.modelName, model_version: requestedVersion, hostname: options.hostname },
        labels,
        requests: 0,
        answered: 0,
        latencyUs: 0,
        queueUs: 0,
        statuses: new Map(),
        request: metrics.requestLatency.cell(labels),
        queue: metrics.queueLatency.cell(labels),
        inference: metrics.inferenceLatency.cell(labels),
      };
      cells.set(key, cell);
    }
    return cell;
  };
  return {
    onRequest(event) {
      const cell = cellOf(event);
      countRequest(cell, event);
      metrics.requestLatency.observe(cell.request, event.totalMs / 1000);
      metrics.queueLatency.observe(cell.queue, event.queueMs / 1000);
      if (event.priority !== undefined)
        metrics.queueLatencyByPriority.observe(
          metrics.queueLatencyByPriority.cell({ ...cell.labels, priority: String(event.priority) }),
          event.queueMs / 1000,
        );
      if (event.inferenceMs > 0) metrics.inferenceLatency.observe(cell.inference, event.inferenceMs / 1000);
      if (event.statusCode < 400) {
        // TorchServe's WorkerThreadTime: the frontend's share of a job outside the queue and the backend.
        const workerThreadMs = Math.max(0, event.totalMs - event.queueMs - event.inferenceMs);
        lastFrontend = { queueMs: event.queueMs, workerThreadMs };
        logMetric('ts_metrics.log', `QueueTime.Milliseconds:${roundMetric(event.queueMs)}|#Level:Host`);
        logMetric('ts_metrics.log', `WorkerThreadTime.Milliseconds:${roundMetric(workerThreadMs)}|#Level:Host`);
        logMetric(
          'ts_metrics.log',
          `ts_inference_requests_total.Count:1|#model_name:${event.modelName},model_version:${cell.tsLabels.model_version}`,
        );
      }
    },
    flush: () => flushCells({ cells: cells.values(), tsCounters: options.tsCounters, metrics }),
    lastFrontend: () => lastFrontend,
  };
}

/** Counts a request in its cell; TorchServe adds latency only for answered (successful) requests: keep its meaning. */
function countRequest(cell: RequestCell, event: RequestDoneEvent): void {
  cell.requests++;
  if (event.statusCode < 400) {
    cell.answered++;
    cell.latencyUs += event.totalMs * 1000;
    cell.queueUs += event.queueMs * 1000;
  }
  cell.statuses.set(event.statusCode, (cell.statuses.get(event.statusCode) ?? 0) + 1);
}

function flushCells(options: {
  cells: Iterable<RequestCell>;
  tsCounters: TorchServeRequestCounters;
  metrics: RequestMetrics;
}): void {
  const { tsCounters } = options;
  for (const cell of options.cells) {
    if (cell.requests > 0) tsCounters.requests.inc(cell.tsLabels, cell.requests);
    if (cell.answered > 0) {
      tsCounters.inferenceLatencyUs.inc(cell.tsLabels, cell.latencyUs);
      tsCounters.queueLatencyUs.inc(cell.tsLabels, cell.queueUs);
    }
    cell.requests = 0;
    cell.answered = 0;
    cell.latencyUs = 0;
    cell.queueUs = 0;
    for (const [statusCode, count] of cell.statuses) {
      if (count > 0) options.metrics.requestsByStatus.inc({ ...cell.labels, status_code: String(statusCode) }, count);
    }
    cell.statuses.clear();
  }
}

/** The recorder of the `batch` events: batch sizes, handler stages, and TorchServe's backend gauges. */
export function createBatchRecorder(options: {
  hostname: string;
  metrics: BatchMetrics;
  tsGauges: TorchServeGauges;
  logMetric: MetricLog;
}): (event: BatchDoneEvent) => void {
  const { metrics, tsGauges, logMetric } = options;
  return (event) => {
    const labels = { model_name: event.modelName, model_version: event.modelVersion };
    metrics.batchSize.observe(labels, event.batchSize);
    if (event.isOk !== false) {
      const modelLabels = { ModelName: event.modelName, Level: 'Model', Hostname: options.hostname };
      tsGauges.handlerTime.set(modelLabels, event.inferenceMs);
      tsGauges.predictionTime.set(modelLabels, event.stages?.inferenceMs ?? event.inferenceMs);
      logMetric(
        'model_metrics.log',
        `HandlerTime.ms:${roundMetric(event.inferenceMs)}|#ModelName:${event.modelName},Level:Model|#type:GAUGE`,
      );
      logMetric(
        'model_metrics.log',
        `PredictionTime.ms:${roundMetric(event.stages?.inferenceMs ?? event.inferenceMs)}|#ModelName:${event.modelName},Level:Model|#type:GAUGE`,
      );
    }
    if (event.stages) {
      metrics.handlerStage.observe({ ...labels, stage: 'preprocess_wait' }, event.stages.preprocessWaitMs / 1000);
      metrics.handlerStage.observe({ ...labels, stage: 'inference' }, event.stages.inferenceMs / 1000);
      metrics.handlerStage.observe({ ...labels, stage: 'postprocess' }, event.stages.postprocessMs / 1000);
    }
  };
}

/** The recorder of the `workerLoaded` events: TorchServe's WorkerLoadTime gauge and log line. */
export function createWorkerLoadRecorder(options: {
  hostname: string;
  tsGauges: TorchServeGauges;
  logMetric: MetricLog;
}): (event: WorkerLoadedEvent) => void {
  const hostLabels = { Level: 'Host', Hostname: options.hostname };
  return (event) => {
    const workerName = `W-${event.workerId}-${event.modelName}_${event.modelVersion}`;
    options.tsGauges.workerLoadTime.set({ WorkerName: workerName, ...hostLabels }, event.loadMs);
    options.logMetric(
      'ts_metrics.log',
      `WorkerLoadTime.Milliseconds:${roundMetric(event.loadMs)}|#WorkerName:${workerName},Level:Host`,
    );
  };
}
