import type { ServerLogs } from '../logging/server-logs.ts';

/** Writes one of TorchServe's metric log lines: `Name.Unit:value|#dims`, plus the hostname and timestamp tail. */
export type MetricLog = (file: 'ts_metrics.log' | 'model_metrics.log', body: string) => void;

/** A metric value as TorchServe's log lines show it: two decimals at most. */
export function roundMetric(n: number): number {
  return Math.round(n * 100) / 100;
}

/**
 * TorchServe's metric log writer: `Name.Unit:value|#dims|#hostname:h,timestamp:epochSeconds`.
 * Without `logs` (metrics_mode other than log) it writes nothing.
 */
export function createMetricLog(options: {
  logs: Pick<ServerLogs, 'metric'> | undefined;
  hostname: string;
}): MetricLog {
  const { logs, hostname } = options;
  let suffixSecond = Number.NaN;
  let suffix = '';
  return (file, body) => {
    if (!logs) return;
    // Several lines per request: the `|#hostname:h,timestamp:s` tail changes once a second.
    const second = Math.floor(Date.now() / 1000);
    if (second !== suffixSecond) {
      suffixSecond = second;
      suffix = `|#hostname:${hostname},timestamp:${second}`;
    }
    logs.metric(file, body + suffix);
  };
}
