/**
 * Prometheus metrics for the metrics API: TorchServe's three `ts_*` counters (same names, labels
 * and HELP texts, so existing dashboards keep working) plus real histograms and live gauges.
 * Uses its own prom-client Registry, never the global one, so two servers in one process
 * (tests) do not share counters.
 */
import { collectDefaultMetrics, Registry } from 'prom-client';
import type { ServerLogs } from '../logging/server-logs.ts';
import type { ModelRegistryApi } from '../registry/model-registry-api.ts';
import { createMetricLog, type MetricLog, roundMetric } from './metric-log.ts';
import { createBatchRecorder, createRequestRecorder, createWorkerLoadRecorder } from './metric-recorders.ts';
import {
  registerBatchMetrics,
  registerModelGauges,
  registerRequestMetrics,
  registerResponseWriteMetrics,
} from './model-version-metrics.ts';
import { registerResidencyMetrics } from './residency-metrics.ts';
import { toTorchServeExposition } from './torchserve-exposition.ts';
import {
  registerResponseCounters,
  registerTorchServeGauges,
  registerTorchServeRequestCounters,
  type TorchServeGauges,
} from './torchserve-metrics.ts';
import { registerTrafficMetrics } from './traffic-metrics.ts';

export interface ServerMetrics {
  /** The prom-client registry holding every metric below. */
  readonly promRegistry: Registry;
  /** `text/plain; version=0.0.4; charset=utf-8`. */
  readonly contentType: string;
  /** Prometheus text for every metric, or only for `names` (unknown names are skipped). */
  render(names?: readonly string[]): Promise<string>;
  /**
   * Counts one HTTP response of the inference or management API in TorchServe's
   * `Requests2XX` / `Requests4XX` / `Requests5XX` (other classes are not counted, as TorchServe).
   */
  recordResponse(statusCode: number): void;
  /** Stops listening to the registry's events. */
  close(): void;
}

export interface CreateServerMetricsOptions {
  registry: ModelRegistryApi;
  /** The `hostname` label of TorchServe's counters (os.hostname()). */
  hostname: string;
  /** Adds prom-client's process/Node.js metrics (CPU, memory, event loop). Default true. */
  collectProcessMetrics?: boolean;
  /** Folder whose disk DiskUsage/DiskAvailable/DiskUtilization report (TorchServe: the disk of its working folder). Default the working directory. */
  diskPath?: string;
  /**
   * metrics_mode=log: TorchServe's metric lines go to ts_metrics.log (frontend and system, the
   * system ones every `systemMetricsIntervalMs`) and model_metrics.log (HandlerTime, PredictionTime).
   */
  logs?: Pick<ServerLogs, 'metric'>;
  /** metric_time_interval, ms. Default 60 000 (TorchServe's 60 s). */
  systemMetricsIntervalMs?: number;
  /** The listeners' unread answers (marina_pending_response_bytes, marina_response_connections_closed_total). */
  responseWrites?: { readonly pendingBytes: number; readonly closedCount: number };
}

/**
 * Creates the metrics and subscribes to `registry.events` (`request`, `batch`); gauges are read
 * from `registry.stats()` at scrape time, so they are never stale and unregistered models vanish.
 */
export function createServerMetrics(options: CreateServerMetricsOptions): ServerMetrics {
  const { registry, hostname } = options;
  const promRegistry = new Registry();
  const logMetric = createMetricLog({ logs: options.logs, hostname });
  // Registered in this order, which is the order of the exposition. The counters' collectors
  // call the request recorder, created once the histograms it fills exist.
  const flush = () => requests.flush();
  const tsCounters = registerTorchServeRequestCounters({ promRegistry, flush });
  const recordResponse = registerResponseCounters({ promRegistry, hostname, logMetric });
  const requestMetrics = registerRequestMetrics({ promRegistry, flush });
  const batchMetrics = registerBatchMetrics({ promRegistry });
  const tsGauges = registerTorchServeGauges({
    promRegistry,
    hostname,
    diskPath: options.diskPath ?? process.cwd(),
    lastFrontend: () => requests.lastFrontend(),
  });
  if (options.responseWrites) registerResponseWriteMetrics({ promRegistry, responseWrites: options.responseWrites });
  const collectStats = registerModelGauges({ promRegistry, registry });
  registerTrafficMetrics({ promRegistry, registry });
  if (options.collectProcessMetrics ?? true) collectDefaultMetrics({ register: promRegistry });

  const requests = createRequestRecorder({ hostname, tsCounters, metrics: requestMetrics, logMetric });
  const onBatch = createBatchRecorder({ hostname, metrics: batchMetrics, tsGauges, logMetric });
  const onWorkerLoaded = createWorkerLoadRecorder({ hostname, tsGauges, logMetric });
  registry.events.on('request', requests.onRequest);
  registry.events.on('batch', onBatch);
  const offResidency = registerResidencyMetrics({ promRegistry, registry });
  registry.events.on('workerLoaded', onWorkerLoaded);
  const stopSystemLog = options.logs
    ? logSystemMetrics({ tsGauges, logMetric, intervalMs: options.systemMetricsIntervalMs ?? 60_000 })
    : () => undefined;

  return {
    promRegistry,
    contentType: promRegistry.contentType,
    render: (names) => renderMetrics({ promRegistry, names, collectStats }),
    recordResponse,
    close() {
      stopSystemLog();
      registry.events.off('request', requests.onRequest);
      registry.events.off('batch', onBatch);
      registry.events.off('workerLoaded', onWorkerLoaded);
      offResidency();
    },
  };
}

/** Writes the system metrics to ts_metrics.log now and every `intervalMs`; returns the stop. */
function logSystemMetrics(options: {
  tsGauges: TorchServeGauges;
  logMetric: MetricLog;
  intervalMs: number;
}): () => void {
  const write = (): void => {
    for (const [name, unit, value] of options.tsGauges.systemMetrics) {
      const v = value();
      if (v !== undefined) options.logMetric('ts_metrics.log', `${name}.${unit}:${roundMetric(v)}|#Level:Host`);
    }
  };
  write();
  const timer = setInterval(write, options.intervalMs);
  timer.unref();
  return () => clearInterval(timer);
}

/** Every metric, or only those in `names` (unknown names are skipped), in TorchServe's exposition. */
async function renderMetrics(options: {
  promRegistry: Registry;
  names: readonly string[] | undefined;
  collectStats: () => void;
}): Promise<string> {
  const { promRegistry, names } = options;
  if (names === undefined || names.length === 0) return toTorchServeExposition(await promRegistry.metrics());
  // Gauges share one collector hanging off marina_queue_depth; run it for filtered scrapes too.
  options.collectStats();
  const parts: string[] = [];
  for (const name of new Set(names)) {
    if (promRegistry.getSingleMetric(name) === undefined) continue;
    parts.push(await promRegistry.getSingleMetricAsString(name));
  }
  return parts.length === 0 ? '' : toTorchServeExposition(`${parts.join('\n\n')}\n`);
}
