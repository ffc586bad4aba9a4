import { Counter, Gauge, type Registry } from 'prom-client';
import type { MetricLog } from './metric-log.ts';
import { createSystemMetricsReader } from './system-metrics.ts';

const TS_REQUEST_LABELS = ['model_name', 'model_version', 'hostname'] as const;
const HOST_LEVEL = ['Level', 'Hostname'] as const;

/** TorchServe's per-request counters, labelled by the version asked for. */
export interface TorchServeRequestCounters {
  requests: Counter<(typeof TS_REQUEST_LABELS)[number]>;
  inferenceLatencyUs: Counter<(typeof TS_REQUEST_LABELS)[number]>;
  queueLatencyUs: Counter<(typeof TS_REQUEST_LABELS)[number]>;
}

/**
 * ts_inference_requests_total, ts_inference_latency_microseconds and ts_queue_latency_microseconds,
 * with TorchServe's names, labels and HELP texts so its dashboards keep working.
 *
 * @param flush adds the requests counted since the last scrape (called at scrape time).
 */
export function registerTorchServeRequestCounters(options: {
  promRegistry: Registry;
  flush: () => void;
}): TorchServeRequestCounters {
  const counter = (name: string, unit: string) =>
    new Counter({
      name,
      help: `Torchserve prometheus counter metric with unit: ${unit}`,
      labelNames: TS_REQUEST_LABELS,
      registers: [options.promRegistry],
      collect: options.flush,
    });
  return {
    requests: counter('ts_inference_requests_total', 'Count'),
    inferenceLatencyUs: counter('ts_inference_latency_microseconds', 'Microseconds'),
    queueLatencyUs: counter('ts_queue_latency_microseconds', 'Microseconds'),
  };
}

/**
 * TorchServe's frontend counters Requests2XX, Requests4XX and Requests5XX: every response of the
 * inference and management APIs by class, counted in plain numbers and added at scrape time.
 *
 * @returns the function that counts one response (other classes are not counted, as TorchServe).
 */
export function registerResponseCounters(options: {
  promRegistry: Registry;
  hostname: string;
  logMetric: MetricLog;
}): (statusCode: number) => void {
  const hostLabels = { Level: 'Host', Hostname: options.hostname };
  const responsesByClass = new Map(
    (['2XX', '4XX', '5XX'] as const).map((statusClass) => {
      const entry = { pending: 0 };
      const counter = new Counter({
        name: `Requests${statusClass}`,
        help: 'Torchserve prometheus counter metric with unit: Count',
        labelNames: HOST_LEVEL,
        registers: [options.promRegistry],
        collect() {
          if (entry.pending === 0) return;
          this.inc(hostLabels, entry.pending);
          entry.pending = 0;
        },
      });
      // Present (at 0) from the first scrape, so rate() works before the first error.
      counter.inc(hostLabels, 0);
      return [statusClass, entry] as const;
    }),
  );
  return (statusCode) => {
    const statusClass =
      statusCode >= 200 && statusCode < 300
        ? '2XX'
        : statusCode >= 400 && statusCode < 500
          ? '4XX'
          : statusCode >= 500 && statusCode < 600
            ? '5XX'
            : undefined;
    if (statusClass !== undefined) {
      responsesByClass.get(statusClass)!.pending++;
      options.logMetric('ts_metrics.log', `Requests${statusClass}.Count:1|#Level:Host`);
    }
  };
}

/** The latest answered request's frontend times, for TorchServe's QueueTime and WorkerThreadTime gauges. */
export interface FrontendTimes {
  queueMs: number;
  workerThreadMs: number;
}

/** TorchServe's gauges that events set (WorkerLoadTime, HandlerTime, PredictionTime). */
export interface TorchServeGauges {
  workerLoadTime: Gauge;
  handlerTime: Gauge;
  predictionTime: Gauge;
  /** The system metrics, by TorchServe name and unit, for the metric log. */
  systemMetrics: ReadonlyArray<readonly [name: string, unit: string, value: () => number | undefined]>;
}

/**
 * TorchServe's gauges (ts/configs/metrics.yaml), same names, labels and HELP texts: the frontend's
 * QueueTime, WorkerThreadTime and WorkerLoadTime, the backend's HandlerTime and PredictionTime, and
 * the system metrics (read at scrape time from `diskPath`'s disk, memory and CPU).
 *
 * @param lastFrontend the latest answered request's times, read at scrape time.
 */
export function registerTorchServeGauges(options: {
  promRegistry: Registry;
  hostname: string;
  diskPath: string;
  lastFrontend: () => FrontendTimes | undefined;
}): TorchServeGauges {
  const hostLabels = { Level: 'Host', Hostname: options.hostname };
  const tsGauge = (name: string, unit: string, labelNames: readonly string[], collect?: () => number | undefined) => {
    const gauge: Gauge = new Gauge({
      name,
      help: `Torchserve prometheus gauge metric with unit: ${unit}`,
      labelNames,
      registers: [options.promRegistry],
    });
    if (collect)
      (gauge as unknown as { collect: () => void }).collect = () => {
        const v = collect();
        if (v !== undefined) gauge.set(hostLabels, v);
      };
    return gauge;
  };
  tsGauge('QueueTime', 'Milliseconds', HOST_LEVEL, () => options.lastFrontend()?.queueMs);
  tsGauge('WorkerThreadTime', 'Milliseconds', HOST_LEVEL, () => options.lastFrontend()?.workerThreadMs);
  const workerLoadTime = tsGauge('WorkerLoadTime', 'Milliseconds', ['WorkerName', 'Level', 'Hostname']);
  const handlerTime = tsGauge('HandlerTime', 'ms', ['ModelName', 'Level', 'Hostname']);
  const predictionTime = tsGauge('PredictionTime', 'ms', ['ModelName', 'Level', 'Hostname']);
  const system = createSystemMetricsReader({ diskPath: options.diskPath });
  const systemMetrics = [
    ['CPUUtilization', 'Percent', () => system.read().cpuUtilizationPercent],
    ['MemoryUsed', 'Megabytes', () => system.read().memoryUsedMb],
    ['MemoryAvailable', 'Megabytes', () => system.read().memoryAvailableMb],
    ['MemoryUtilization', 'Percent', () => system.read().memoryUtilizationPercent],
    ['DiskUsage', 'Gigabytes', () => system.read().diskUsedGb],
    ['DiskUtilization', 'Percent', () => system.read().diskUtilizationPercent],
    ['DiskAvailable', 'Gigabytes', () => system.read().diskAvailableGb],
  ] as const;
  for (const [name, unit, value] of systemMetrics) tsGauge(name, unit, HOST_LEVEL, value);
  return { workerLoadTime, handlerTime, predictionTime, systemMetrics };
}
