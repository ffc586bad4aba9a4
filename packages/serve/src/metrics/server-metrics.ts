/**
 * Prometheus metrics for the metrics API: TorchServe's three `ts_*` counters (same names, labels
 * and HELP texts, so existing dashboards keep working) plus real histograms and live gauges.
 * Uses its own prom-client Registry, never the global one, so two servers in one process
 * (tests) do not share counters.
 */
import { toTorchServeExposition } from './torchserve-exposition.ts';
import { registerResidencyMetrics } from './residency-metrics.ts';
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import type {
  BatchDoneEvent,
  ModelRegistryApi,
  RequestDoneEvent,
  WorkerLoadedEvent,
} from '../registry/model-registry-api.ts';
import type { ServerLogs } from '../logging/server-logs.ts';
import { createSystemMetricsReader } from './system-metrics.ts';
import { RequestHistogram, type HistogramCell } from './request-histogram.ts';
import type { ShadowStats } from '../registry/model-registry-api.ts';

/** Buckets for latencies, seconds: 0.5 ms to 2 minutes (TorchServe's default response timeout). */
export const LATENCY_BUCKETS_SECONDS = [
  0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120,
];
/** Buckets for batch sizes: powers of two up to 256. */
const BATCH_SIZE_BUCKETS = [1, 2, 4, 8, 16, 32, 64, 128, 256];

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

  const tsLabels = ['model_name', 'model_version', 'hostname'] as const;
  // The per-request counters are summed in RequestCells and added at scrape time (collect).
  const tsRequests = new Counter({
    name: 'ts_inference_requests_total',
    help: 'Torchserve prometheus counter metric with unit: Count',
    labelNames: tsLabels,
    registers: [promRegistry],
    collect: () => flushRequestCounters(),
  });
  const tsInferenceLatency = new Counter({
    name: 'ts_inference_latency_microseconds',
    help: 'Torchserve prometheus counter metric with unit: Microseconds',
    labelNames: tsLabels,
    registers: [promRegistry],
    collect: () => flushRequestCounters(),
  });
  const tsQueueLatency = new Counter({
    name: 'ts_queue_latency_microseconds',
    help: 'Torchserve prometheus counter metric with unit: Microseconds',
    labelNames: tsLabels,
    registers: [promRegistry],
    collect: () => flushRequestCounters(),
  });

  // TorchServe's frontend counters: every response of the inference and management APIs by class.
  const hostLabels = { Level: 'Host', Hostname: hostname };
  const round = (n: number) => Math.round(n * 100) / 100;
  let suffixSecond = Number.NaN;
  let suffix = '';
  /** TorchServe's metric log line: `Name.Unit:value|#dims|#hostname:h,timestamp:epochSeconds`. */
  const logMetric = (file: 'ts_metrics.log' | 'model_metrics.log', body: string): void => {
    if (!options.logs) return;
    // Several lines per request: the `|#hostname:h,timestamp:s` tail changes once a second.
    const second = Math.floor(Date.now() / 1000);
    if (second !== suffixSecond) {
      suffixSecond = second;
      suffix = `|#hostname:${hostname},timestamp:${second}`;
    }
    options.logs.metric(file, body + suffix);
  };
  // Counted per response in plain numbers, added to the counters at scrape time.
  const responsesByClass = new Map(
    (['2XX', '4XX', '5XX'] as const).map((statusClass) => {
      const entry = { pending: 0 };
      const counter = new Counter({
        name: `Requests${statusClass}`,
        help: 'Torchserve prometheus counter metric with unit: Count',
        labelNames: ['Level', 'Hostname'] as const,
        registers: [promRegistry],
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

  const modelLabels = ['model_name', 'model_version'] as const;
  const requestsByStatus = new Counter({
    name: 'marina_requests_total',
    help: 'Inference requests answered, by model version and HTTP status code.',
    labelNames: ['model_name', 'model_version', 'status_code'] as const,
    registers: [promRegistry],
    collect: () => flushRequestCounters(),
  });
  const queueLatency = new RequestHistogram({
    name: 'marina_queue_latency_seconds',
    help: "Time an inference job waited in its model version's job queue, seconds.",
    labelNames: modelLabels,
    buckets: LATENCY_BUCKETS_SECONDS,
    registers: [promRegistry],
  });
  // Models with priority levels only: one more label, so a model without levels adds no series.
  const queueLatencyByPriority = new RequestHistogram({
    name: 'marina_queue_latency_by_priority_seconds',
    help: "Time an inference job waited in its model version's job queue, seconds, by priority level (models with priorityLevels > 1).",
    labelNames: ['model_name', 'model_version', 'priority'] as const,
    buckets: LATENCY_BUCKETS_SECONDS,
    registers: [promRegistry],
  });
  const inferenceLatency = new RequestHistogram({
    name: 'marina_inference_latency_seconds',
    help: 'Time a job spent in a worker (handler + model), seconds; jobs that never reached a worker are not counted.',
    labelNames: modelLabels,
    buckets: LATENCY_BUCKETS_SECONDS,
    registers: [promRegistry],
  });
  const requestLatency = new RequestHistogram({
    name: 'marina_request_latency_seconds',
    help: 'End-to-end inference latency from request arrival to response, seconds, every status.',
    labelNames: modelLabels,
    buckets: LATENCY_BUCKETS_SECONDS,
    registers: [promRegistry],
  });
  const batchSize = new Histogram({
    name: 'marina_batch_size',
    help: 'Jobs per batch sent to a worker.',
    labelNames: modelLabels,
    buckets: BATCH_SIZE_BUCKETS,
    registers: [promRegistry],
  });
  const handlerStage = new Histogram({
    name: 'marina_handler_stage_seconds',
    help: 'Time of one batch in each handler stage inside the worker, seconds: preprocess_wait (waiting for decoding after the worker picked the batch up), inference, postprocess. Handlers with a single handle() report none.',
    labelNames: [...modelLabels, 'stage'],
    buckets: LATENCY_BUCKETS_SECONDS,
    registers: [promRegistry],
  });

  // TorchServe's gauges (ts/configs/metrics.yaml), same names, labels and HELP, so its Grafana dashboards keep working.
  const tsGauge = (name: string, unit: string, labelNames: readonly string[]) =>
    new Gauge({
      name,
      help: `Torchserve prometheus gauge metric with unit: ${unit}`,
      labelNames,
      registers: [promRegistry],
    });
  const hostLevel = ['Level', 'Hostname'] as const;
  const frontend = {
    queueTime: tsGauge('QueueTime', 'Milliseconds', hostLevel),
    workerThreadTime: tsGauge('WorkerThreadTime', 'Milliseconds', hostLevel),
    workerLoadTime: tsGauge('WorkerLoadTime', 'Milliseconds', ['WorkerName', 'Level', 'Hostname']),
  };
  const backend = {
    handlerTime: tsGauge('HandlerTime', 'ms', ['ModelName', 'Level', 'Hostname']),
    predictionTime: tsGauge('PredictionTime', 'ms', ['ModelName', 'Level', 'Hostname']),
  };
  const system = createSystemMetricsReader({ diskPath: options.diskPath ?? process.cwd() });
  const systemGauges = [
    ['CPUUtilization', 'Percent', () => system.read().cpuUtilizationPercent],
    ['MemoryUsed', 'Megabytes', () => system.read().memoryUsedMb],
    ['MemoryAvailable', 'Megabytes', () => system.read().memoryAvailableMb],
    ['MemoryUtilization', 'Percent', () => system.read().memoryUtilizationPercent],
    ['DiskUsage', 'Gigabytes', () => system.read().diskUsedGb],
    ['DiskUtilization', 'Percent', () => system.read().diskUtilizationPercent],
    ['DiskAvailable', 'Gigabytes', () => system.read().diskAvailableGb],
  ] as const;
  for (const [name, unit, value] of systemGauges) {
    const gauge = tsGauge(name, unit, hostLevel);
    (gauge as unknown as { collect: () => void }).collect = () => {
      const v = value();
      if (v !== undefined) gauge.set(hostLabels, v);
    };
  }

  const responseWrites = options.responseWrites;
  if (responseWrites) {
    const pending = new Gauge({
      name: 'marina_pending_response_bytes',
      help: 'Bytes of answers written by the server and not yet taken by their clients, over all HTTP connections (bounded by max_pending_response_bytes).',
      registers: [promRegistry],
      collect() {
        pending.set(responseWrites.pendingBytes);
      },
    });
    const closed = new Counter({
      name: 'marina_response_connections_closed_total',
      help: 'HTTP connections closed because their answer made no progress for response_write_timeout, or because unread answers held more than max_pending_response_bytes.',
      registers: [promRegistry],
      collect() {
        closed.reset();
        closed.inc(responseWrites.closedCount);
      },
    });
  }

  // Gauges are filled from registry.stats() at scrape time; reset first so removed models vanish.
  const gauges = {
    queueDepth: new Gauge({
      name: 'marina_queue_depth',
      help: 'Jobs waiting in the job queue of a model version.',
      labelNames: modelLabels,
      registers: [promRegistry],
    }),
    queueCapacity: new Gauge({
      name: 'marina_queue_capacity',
      help: 'Size of the job queue of a model version (job_queue_size).',
      labelNames: modelLabels,
      registers: [promRegistry],
    }),
    workers: new Gauge({
      name: 'marina_workers',
      help: 'Live workers of a model version.',
      labelNames: modelLabels,
      registers: [promRegistry],
    }),
    busyWorkers: new Gauge({
      name: 'marina_busy_workers',
      help: 'Workers of a model version running a batch right now.',
      labelNames: modelLabels,
      registers: [promRegistry],
    }),
    minWorkers: new Gauge({
      name: 'marina_min_workers',
      help: 'min_worker setting of a model version.',
      labelNames: modelLabels,
      registers: [promRegistry],
    }),
    queueDepthByPriority: new Gauge({
      name: 'marina_queue_depth_by_priority',
      help: 'Jobs queued at each priority level of a model version (models with priorityLevels > 1).',
      labelNames: ['model_name', 'model_version', 'priority'] as const,
      registers: [promRegistry],
    }),
    maxWorkers: new Gauge({
      name: 'marina_max_workers',
      help: "max_worker setting of a model version (the autoscaler's ceiling).",
      labelNames: modelLabels,
      registers: [promRegistry],
    }),
  };
  let isCollecting = false;
  const collectStats = (): void => {
    if (isCollecting) return;
    isCollecting = true;
    try {
      for (const gauge of Object.values(gauges)) gauge.reset();
      for (const s of registry.stats()) {
        const labels = { model_name: s.modelName, model_version: s.modelVersion };
        gauges.queueDepth.set(labels, s.queueDepth);
        gauges.queueCapacity.set(labels, s.jobQueueSize);
        gauges.workers.set(labels, s.workers);
        gauges.busyWorkers.set(labels, s.busyWorkers);
        gauges.minWorkers.set(labels, s.minWorkers);
        gauges.maxWorkers.set(labels, s.maxWorkers);
        s.queueDepthByPriority?.forEach((depth, i) => {
          gauges.queueDepthByPriority.set({ ...labels, priority: String(i + 1) }, depth);
        });
      }
    } finally {
      isCollecting = false;
    }
  };
  // One collector for all six gauges: prom-client calls `collect` per metric; the flag above plus
  // calling it only from the first gauge keeps it to one stats() call per scrape.
  (gauges.queueDepth as unknown as { collect: () => void }).collect = collectStats;

  // Traffic per version: the policy's weights and the shadow's numbers, read at scrape time from
  // their one owner (the registry); present at 0 for every registered version, so rate() and the
  // dashboard's panels work before the first shadow copy.
  const shadowCounter = (name: string, help: string, value: (s: ShadowStats) => number) =>
    new Counter({
      name,
      help,
      labelNames: modelLabels,
      registers: [promRegistry],
      collect() {
        this.reset();
        for (const s of registry.shadowStats())
          this.inc({ model_name: s.modelName, model_version: s.modelVersion }, value(s));
      },
    });
  new Counter({
    name: 'marina_shadow_requests_total',
    help: 'Shadow copies of live requests a shadow version ran, by result (ok: answered, error: failed); their answers reach no client.',
    labelNames: [...modelLabels, 'result'] as const,
    registers: [promRegistry],
    collect() {
      this.reset();
      for (const s of registry.shadowStats()) {
        const labels = { model_name: s.modelName, model_version: s.modelVersion };
        this.inc({ ...labels, result: 'ok' }, s.requests - s.failed);
        this.inc({ ...labels, result: 'error' }, s.failed);
      }
    },
  });
  shadowCounter(
    'marina_shadow_dropped_total',
    'Shadow copies shed before they ran: no headroom (no idle worker of the shadow version, requests waiting for the live version, or CPU pressure at or above shadow_max_cpu_pressure) until the shadow queue was full or 10 s passed, or the version refused the copy.',
    (s) => s.dropped,
  );
  shadowCounter(
    'marina_shadow_compared_total',
    "Shadow answers compared with the live answer (the same handler's output: top-1, IoU or cosine).",
    (s) => s.compared,
  );
  shadowCounter(
    'marina_shadow_agreement_sum',
    'Sum of the per-request agreement (0 to 1) of the compared shadow answers; divided by marina_shadow_compared_total it is the mean agreement over any window.',
    (s) => s.agreementSum,
  );
  new Gauge({
    name: 'marina_shadow_agreement',
    help: "A shadow version's mean agreement with the live answers so far, 0 to 1 (present once an answer was compared).",
    labelNames: modelLabels,
    registers: [promRegistry],
    collect() {
      this.reset();
      for (const s of registry.shadowStats())
        if (s.compared > 0)
          this.set({ model_name: s.modelName, model_version: s.modelVersion }, s.agreementSum / s.compared);
    },
  });
  new Gauge({
    name: 'marina_traffic_weight',
    help: "A version's share of the requests that name no version, percent, from its model's traffic policy (100 for the default version without one).",
    labelNames: modelLabels,
    registers: [promRegistry],
    collect() {
      this.reset();
      for (const model of registry.list()) {
        let weights: Record<string, number>;
        try {
          weights = registry.getTrafficPolicy(model.modelName).weights ?? {};
        } catch {
          continue; // Unregistered between list() and here.
        }
        for (const version of model.versions)
          this.set({ model_name: model.modelName, model_version: version }, weights[version] ?? 0);
      }
    },
  });

  if (options.collectProcessMetrics ?? true) collectDefaultMetrics({ register: promRegistry });

  /**
   * One label set's per-request metrics, found once (requestCellOf) and then updated with plain
   * arithmetic: prom-client's labelled inc/observe cost about 0.6 µs each, several per request on
   * the HTTP thread. The counters' shares are added at scrape time (flushRequestCounters).
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
  const requestCells = new Map<string, RequestCell>();
  const requestCellOf = (event: RequestDoneEvent): RequestCell => {
    const requestedVersion = event.requestedVersion || 'default';
    const key = `${event.modelName}\u0000${requestedVersion}\u0000${event.modelVersion}`;
    let cell = requestCells.get(key);
    if (!cell) {
      const labels = { model_name: event.modelName, model_version: event.modelVersion };
      cell = {
        tsLabels: { model_name: event.modelName, model_version: requestedVersion, hostname },
        labels,
        requests: 0,
        answered: 0,
        latencyUs: 0,
        queueUs: 0,
        statuses: new Map(),
        request: requestLatency.cell(labels),
        queue: queueLatency.cell(labels),
        inference: inferenceLatency.cell(labels),
      };
      requestCells.set(key, cell);
    }
    return cell;
  };
  const flushRequestCounters = (): void => {
    for (const cell of requestCells.values()) {
      if (cell.requests > 0) tsRequests.inc(cell.tsLabels, cell.requests);
      if (cell.answered > 0) {
        tsInferenceLatency.inc(cell.tsLabels, cell.latencyUs);
        tsQueueLatency.inc(cell.tsLabels, cell.queueUs);
      }
      cell.requests = 0;
      cell.answered = 0;
      cell.latencyUs = 0;
      cell.queueUs = 0;
      for (const [statusCode, count] of cell.statuses) {
        if (count > 0) requestsByStatus.inc({ ...cell.labels, status_code: String(statusCode) }, count);
      }
      cell.statuses.clear();
    }
  };
  /** The latest answered request's frontend times (TorchServe's QueueTime and WorkerThreadTime gauges), set at scrape time. */
  let lastFrontend: { queueMs: number; workerThreadMs: number } | undefined;
  (frontend.queueTime as unknown as { collect: () => void }).collect = () => {
    if (lastFrontend) frontend.queueTime.set(hostLabels, lastFrontend.queueMs);
  };
  (frontend.workerThreadTime as unknown as { collect: () => void }).collect = () => {
    if (lastFrontend) frontend.workerThreadTime.set(hostLabels, lastFrontend.workerThreadMs);
  };

  const onRequest = (event: RequestDoneEvent): void => {
    const cell = requestCellOf(event);
    cell.requests++;
    const isAnswered = event.statusCode < 400;
    // TorchServe adds latency only for answered (successful) requests: keep its meaning.
    if (isAnswered) {
      cell.answered++;
      cell.latencyUs += event.totalMs * 1000;
      cell.queueUs += event.queueMs * 1000;
    }
    cell.statuses.set(event.statusCode, (cell.statuses.get(event.statusCode) ?? 0) + 1);
    requestLatency.observe(cell.request, event.totalMs / 1000);
    queueLatency.observe(cell.queue, event.queueMs / 1000);
    if (event.priority !== undefined)
      queueLatencyByPriority.observe(
        queueLatencyByPriority.cell({ ...cell.labels, priority: String(event.priority) }),
        event.queueMs / 1000,
      );
    if (event.inferenceMs > 0) inferenceLatency.observe(cell.inference, event.inferenceMs / 1000);
    if (isAnswered) {
      // TorchServe's WorkerThreadTime: the frontend's share of a job outside the queue and the backend.
      const workerThreadMs = Math.max(0, event.totalMs - event.queueMs - event.inferenceMs);
      lastFrontend = { queueMs: event.queueMs, workerThreadMs };
      logMetric('ts_metrics.log', `QueueTime.Milliseconds:${round(event.queueMs)}|#Level:Host`);
      logMetric('ts_metrics.log', `WorkerThreadTime.Milliseconds:${round(workerThreadMs)}|#Level:Host`);
      logMetric(
        'ts_metrics.log',
        `ts_inference_requests_total.Count:1|#model_name:${event.modelName},model_version:${cell.tsLabels.model_version}`,
      );
    }
  };
  const onWorkerLoaded = (event: WorkerLoadedEvent): void => {
    const workerName = `W-${event.workerId}-${event.modelName}_${event.modelVersion}`;
    frontend.workerLoadTime.set({ WorkerName: workerName, ...hostLabels }, event.loadMs);
    logMetric(
      'ts_metrics.log',
      `WorkerLoadTime.Milliseconds:${round(event.loadMs)}|#WorkerName:${workerName},Level:Host`,
    );
  };
  const onBatch = (event: BatchDoneEvent): void => {
    const labels = { model_name: event.modelName, model_version: event.modelVersion };
    batchSize.observe(labels, event.batchSize);
    if (event.isOk !== false) {
      const modelLabels = { ModelName: event.modelName, Level: 'Model', Hostname: hostname };
      backend.handlerTime.set(modelLabels, event.inferenceMs);
      backend.predictionTime.set(modelLabels, event.stages?.inferenceMs ?? event.inferenceMs);
      logMetric(
        'model_metrics.log',
        `HandlerTime.ms:${round(event.inferenceMs)}|#ModelName:${event.modelName},Level:Model|#type:GAUGE`,
      );
      logMetric(
        'model_metrics.log',
        `PredictionTime.ms:${round(event.stages?.inferenceMs ?? event.inferenceMs)}|#ModelName:${event.modelName},Level:Model|#type:GAUGE`,
      );
    }
    if (event.stages) {
      handlerStage.observe({ ...labels, stage: 'preprocess_wait' }, event.stages.preprocessWaitMs / 1000);
      handlerStage.observe({ ...labels, stage: 'inference' }, event.stages.inferenceMs / 1000);
      handlerStage.observe({ ...labels, stage: 'postprocess' }, event.stages.postprocessMs / 1000);
    }
  };
  registry.events.on('request', onRequest);
  registry.events.on('batch', onBatch);
  const offResidency = registerResidencyMetrics({ promRegistry, registry });
  registry.events.on('workerLoaded', onWorkerLoaded);
  const writeSystemMetrics = (): void => {
    for (const [name, unit, value] of systemGauges) {
      const v = value();
      if (v !== undefined) logMetric('ts_metrics.log', `${name}.${unit}:${round(v)}|#Level:Host`);
    }
  };
  let systemTimer: NodeJS.Timeout | undefined;
  if (options.logs) {
    writeSystemMetrics();
    systemTimer = setInterval(writeSystemMetrics, options.systemMetricsIntervalMs ?? 60_000);
    systemTimer.unref();
  }

  return {
    promRegistry,
    contentType: promRegistry.contentType,
    async render(names) {
      if (names === undefined || names.length === 0) return toTorchServeExposition(await promRegistry.metrics());
      // Gauges share one collector hanging off marina_queue_depth; run it for filtered scrapes too.
      collectStats();
      const parts: string[] = [];
      for (const name of new Set(names)) {
        if (promRegistry.getSingleMetric(name) === undefined) continue;
        parts.push(await promRegistry.getSingleMetricAsString(name));
      }
      return parts.length === 0 ? '' : toTorchServeExposition(`${parts.join('\n\n')}\n`);
    },
    recordResponse(statusCode) {
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
        logMetric('ts_metrics.log', `Requests${statusClass}.Count:1|#Level:Host`);
      }
    },
    close() {
      if (systemTimer) clearInterval(systemTimer);
      registry.events.off('request', onRequest);
      registry.events.off('batch', onBatch);
      registry.events.off('workerLoaded', onWorkerLoaded);
      offResidency();
    },
  };
}
