/**
 * OpenTelemetry traces of inference requests, off by default. On with the standard environment
 * (OTEL_TRACES_EXPORTER=otlp or console) or config.properties `enable_tracing=true`; configured by
 * OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_PROTOCOL (http/protobuf, the
 * default, or http/json), OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG, OTEL_SERVICE_NAME and
 * OTEL_RESOURCE_ATTRIBUTES (the exporters also read OTEL_EXPORTER_OTLP_HEADERS themselves).
 *
 * Packages: @opentelemetry/api (the types and context), @opentelemetry/sdk-trace (the tracer
 * provider, samplers, batch processor), the two OTLP/HTTP trace exporters (protobuf and JSON),
 * @opentelemetry/resources and @opentelemetry/core (the W3C trace-context propagator). Not
 * sdk-node: it pulls in every signal, instrumentations and gRPC exporters Marina does not use;
 * not sdk-trace-node: parents are passed explicitly here, so no async context manager is needed.
 *
 * Spans of one request (children of its request span): `admission` (arrival to queued), `queue`
 * (queued to its batch's start, with the priority level), then `preprocess`, `inference` and
 * `postprocess` from the worker's stage times (or one `inference` for a handler without stages),
 * with the batch size and worker id. Each batch gets a `batch` span, a child of its first traced
 * request, linked to every traced request it ran.
 */
import {
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  TraceFlags,
  trace,
  type Attributes,
  type Context,
  type HrTime,
  type Link,
  type Span,
  type SpanContext,
  type SpanStatus,
  type TextMapGetter,
  type Tracer,
} from '@opentelemetry/api';
import {
  hrTimeDuration,
  millisToHrTime,
  parseKeyPairsIntoRecord,
  W3CTraceContextPropagator,
} from '@opentelemetry/core';
import { OTLPTraceExporter as OtlpJsonExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { OTLPTraceExporter as OtlpProtoExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { defaultResource, resourceFromAttributes } from '@opentelemetry/resources';
import {
  AlwaysOffSampler,
  AlwaysOnSampler,
  BatchSpanProcessor,
  ConsoleSpanExporter,
  ParentBasedSampler,
  TraceIdRatioBasedSampler,
  TracerProvider,
  type ReadableSpan,
  type Sampler,
  type SpanExporter,
} from '@opentelemetry/sdk-trace';
import { createServeError } from '../errors.ts';
import type { JobTimings } from '../scheduling/job-timings.ts';

/** What tracing reads of a job (scheduling/job.ts's Job). */
interface TracedJob {
  readonly timings: JobTimings;
  readonly priority: number;
  readonly trace: RequestTrace | undefined;
}

/** Which wire a request came by: the `marina.protocol` attribute. */
export type TracedProtocol = 'torchserve-rest' | 'oip-rest' | 'torchserve-grpc' | 'oip-grpc';

/** Tracing as configured: what `createTracing` builds. */
export interface TracingSettings {
  exporter: 'otlp' | 'console';
  protocol: 'http/protobuf' | 'http/json';
  /** The full URL spans are posted to (…/v1/traces). */
  endpoint: string;
  /** OTEL_TRACES_SAMPLER's value and argument. */
  sampler: string;
  samplerArg: number | undefined;
  serviceName: string;
  resourceAttributes: Record<string, string>;
}

const SAMPLERS = [
  'always_on',
  'always_off',
  'traceidratio',
  'parentbased_always_on',
  'parentbased_always_off',
  'parentbased_traceidratio',
];

/**
 * Tracing settings from the environment and the config.properties switch, or undefined when
 * tracing is off: OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none turn it off; otlp or console
 * turn it on; unset, `enable_tracing` decides (off by default, unlike OpenTelemetry's own default).
 * @throws MARINA_ERR_TRACING_CONFIG_INVALID for an exporter, protocol, sampler or argument it does not know.
 */
export function tracingSettingsFrom(options: {
  env: Readonly<Record<string, string | undefined>>;
  isEnabled: boolean;
  serviceVersion: string;
}): TracingSettings | undefined {
  const { env } = options;
  const invalid = (name: string, value: string, allowed: string) =>
    createServeError.MARINA_ERR_TRACING_CONFIG_INVALID(
      `${name}=${JSON.stringify(value.slice(0, 60))} is not supported; use ${allowed}, or unset it`,
      { details: { variable: name } },
    );
  if (env.OTEL_SDK_DISABLED?.trim().toLowerCase() === 'true') return undefined;
  const exporters = (env.OTEL_TRACES_EXPORTER ?? '')
    .split(',')
    .map((e) => e.trim().toLowerCase())
    .filter(Boolean);
  let exporter: TracingSettings['exporter'];
  if (exporters.length === 0) {
    if (!options.isEnabled) return undefined;
    exporter = 'otlp';
  } else if (exporters.includes('none')) {
    return undefined;
  } else {
    const unknown = exporters.find((e) => e !== 'otlp' && e !== 'console');
    if (unknown !== undefined) throw invalid('OTEL_TRACES_EXPORTER', unknown, 'otlp, console or none');
    exporter = exporters.includes('otlp') ? 'otlp' : 'console';
  }
  const protocolText = (env.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL ?? env.OTEL_EXPORTER_OTLP_PROTOCOL ?? 'http/protobuf')
    .trim()
    .toLowerCase();
  if (protocolText !== 'http/protobuf' && protocolText !== 'http/json')
    throw invalid(
      'OTEL_EXPORTER_OTLP_TRACES_PROTOCOL',
      protocolText,
      'http/protobuf or http/json (grpc is not built in)',
    );
  const specific = env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT?.trim();
  const general = env.OTEL_EXPORTER_OTLP_ENDPOINT?.trim();
  const endpoint = specific ? specific : `${(general || 'http://localhost:4318').replace(/\/+$/, '')}/v1/traces`;
  try {
    new URL(endpoint);
  } catch {
    throw invalid(
      specific ? 'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT' : 'OTEL_EXPORTER_OTLP_ENDPOINT',
      endpoint,
      'an http(s) URL',
    );
  }
  const sampler = (env.OTEL_TRACES_SAMPLER ?? 'parentbased_always_on').trim().toLowerCase();
  if (!SAMPLERS.includes(sampler)) throw invalid('OTEL_TRACES_SAMPLER', sampler, SAMPLERS.join(', '));
  const argText = env.OTEL_TRACES_SAMPLER_ARG?.trim();
  let samplerArg: number | undefined;
  if (sampler.endsWith('traceidratio') && argText !== undefined && argText !== '') {
    samplerArg = Number(argText);
    if (!Number.isFinite(samplerArg) || samplerArg < 0 || samplerArg > 1)
      throw invalid('OTEL_TRACES_SAMPLER_ARG', argText, 'a ratio from 0 to 1');
  }
  const resourceAttributes = parseKeyPairsIntoRecord(env.OTEL_RESOURCE_ATTRIBUTES);
  const serviceName = env.OTEL_SERVICE_NAME?.trim() || resourceAttributes['service.name'] || 'marina';
  return {
    exporter,
    protocol: protocolText,
    endpoint,
    sampler,
    samplerArg,
    serviceName,
    resourceAttributes: { ...resourceAttributes, 'service.version': options.serviceVersion },
  };
}

/**
 * The configured sampler inside a ParentBased one whose sampled remote parent is always
 * followed: a caller that traces a request sees Marina's spans in its trace whatever the sampler
 * says. An unsampled parent is followed for the parentbased_* samplers; the others decide alone.
 */
function samplerOf(settings: TracingSettings): Sampler {
  const name = settings.sampler.replace(/^parentbased_/, '');
  const root: Sampler =
    name === 'always_off'
      ? new AlwaysOffSampler()
      : name === 'traceidratio'
        ? new TraceIdRatioBasedSampler(settings.samplerArg ?? 1)
        : new AlwaysOnSampler();
  const isParentBased = settings.sampler.startsWith('parentbased_');
  return new ParentBasedSampler({
    root,
    remoteParentSampled: new AlwaysOnSampler(),
    remoteParentNotSampled: isParentBased ? new AlwaysOffSampler() : root,
    localParentSampled: new AlwaysOnSampler(),
    localParentNotSampled: new AlwaysOffSampler(),
  });
}

/** Reads W3C trace context from a header record (REST headers, gRPC metadata as strings). */
const headerGetter: TextMapGetter<Readonly<Record<string, string | string[] | undefined>>> = {
  keys: (carrier) => Object.keys(carrier),
  get: (carrier, key) => carrier[key],
};

const propagator = new W3CTraceContextPropagator();

/**
 * A performance.now() time as epoch milliseconds on one clock for every span: the SDK would turn
 * each span's performance times into wall time with its own offset (they differ by up to a
 * millisecond), and an end without a time would read Date.now(), which drifts from both.
 */
function epochMs(performanceTime: number): number {
  return performance.timeOrigin + performanceTime;
}

const idBytes = Buffer.alloc(8);

/** A random, non-zero span id (as the SDK's own generator makes them: Math.random, not crypto). */
function newSpanId(): string {
  idBytes.writeUInt32BE((Math.random() * 0x100000000) >>> 0, 0);
  idBytes.writeUInt32BE((((Math.random() * 0x100000000) >>> 0) | 1) >>> 0, 4);
  return idBytes.toString('hex');
}

const UNSET: SpanStatus = { code: SpanStatusCode.UNSET };

/**
 * A span that is over when it is made: a job's admission, queue and stage spans, and a batch's,
 * whose start and end are known from the job's timings once it is answered. Handed straight to
 * the batch processor as the SDK's ReadableSpan (what exporters read), without the SDK's live
 * span, its sampler call (a child of a sampled local parent is always sampled here) and its
 * attribute cleaning (these attributes are Marina's own numbers and short strings): measured on
 * the tensor model, the SDK's path cost about half of tracing's time per request.
 */
class FinishedSpan implements ReadableSpan {
  readonly #context: SpanContext;
  readonly events = [];
  readonly ended = true;
  readonly droppedAttributesCount = 0;
  readonly droppedEventsCount = 0;
  readonly droppedLinksCount = 0;
  readonly duration: HrTime;

  constructor(
    readonly name: string,
    parent: ReadableSpan,
    readonly startTime: HrTime,
    readonly endTime: HrTime,
    readonly attributes: Attributes,
    readonly status: SpanStatus,
    readonly links: Link[] = [],
  ) {
    const context = parent.spanContext();
    this.#context = { traceId: context.traceId, spanId: newSpanId(), traceFlags: TraceFlags.SAMPLED };
    this.parentSpanContext = context;
    this.resource = parent.resource;
    this.instrumentationScope = parent.instrumentationScope;
    this.duration = hrTimeDuration(startTime, endTime);
  }

  readonly kind = SpanKind.INTERNAL;
  readonly parentSpanContext: SpanContext;
  readonly resource: ReadableSpan['resource'];
  readonly instrumentationScope: ReadableSpan['instrumentationScope'];

  spanContext(): SpanContext {
    return this.#context;
  }
}

/** What a request span starts with. */
export interface RequestSpanOptions {
  /** Span name: `POST /predictions/{model_name}`, `inference.GRPCInferenceService/ModelInfer`. */
  name: string;
  protocol: TracedProtocol;
  /** The request's headers (or gRPC metadata), for `traceparent` and `tracestate`. */
  headers: Readonly<Record<string, string | string[] | undefined>>;
  attributes: Attributes;
  /** performance.now() when the request arrived. */
  startedAt: number;
}

/**
 * One request's trace: its server span and the context its children hang from. The job carries
 * it to its batch; the protocol ends it with its status.
 */
export class RequestTrace {
  readonly span: Span;
  readonly context: Context;
  readonly #tracing: Tracing;
  #isEnded = false;

  /** The tracer that started it (batch spans come from the same one). */
  get tracing(): Tracing {
    return this.#tracing;
  }

  constructor(tracing: Tracing, span: Span, parent: Context) {
    this.#tracing = tracing;
    this.span = span;
    this.context = trace.setSpan(parent, span);
  }

  get isSampled(): boolean {
    return this.span.isRecording();
  }

  /** `traceparent` for the response: the request span's context, so a client without a tracer can find its trace. */
  get traceparent(): string {
    const { traceId, spanId, traceFlags } = this.span.spanContext();
    return `00-${traceId}-${spanId}-0${(traceFlags & 1).toString(16)}`;
  }

  /** Names the model, version and request id on the request span. */
  setModel(modelName: string, modelVersion: string, requestId: string): void {
    if (!this.span.isRecording()) return;
    this.span.setAttributes({
      'marina.model.name': modelName,
      'marina.model.version': modelVersion,
      'marina.request.id': requestId,
    });
  }

  /**
   * The job's spans under the request span, from its timings: admission, queue, then the worker's
   * stages. Called once the job is answered (whatever the outcome).
   */
  recordJob(job: TracedJob, outcome: { isOk: boolean; errorCode?: string }): void {
    if (!this.span.isRecording()) return;
    const tracing = this.#tracing;
    const parent = this.span as unknown as ReadableSpan;
    const t = job.timings;
    const end = t.finishedAt ?? performance.now();
    const queuedAt = t.queuedAt ?? end;
    const error: SpanStatus | undefined = outcome.isOk
      ? undefined
      : { code: SpanStatusCode.ERROR, ...(outcome.errorCode !== undefined ? { message: outcome.errorCode } : {}) };
    const child = (name: string, start: number, stop: number, attributes: Attributes = {}, isError = false) =>
      tracing.emit(
        new FinishedSpan(
          name,
          parent,
          millisToHrTime(epochMs(start)),
          millisToHrTime(epochMs(Math.max(start, stop))),
          attributes,
          isError ? (error ?? { code: SpanStatusCode.ERROR }) : UNSET,
        ),
      );
    child('admission', t.arrivedAt, queuedAt);
    const startedAt = t.dispatchedAt;
    child('queue', queuedAt, startedAt ?? end, { 'marina.priority': job.priority }, startedAt === undefined);
    if (startedAt === undefined) return;
    const batch = {
      'marina.batch.size': t.batchSize ?? 1,
      ...(t.workerId !== undefined ? { 'marina.worker.id': t.workerId } : {}),
    };
    const stages = t.stages;
    if (stages) {
      // Laid out back from the answer: the worker measured the stages on its own clock, and a
      // prefetched batch may have started there before the main thread learnt of it.
      const postprocessStart = Math.max(startedAt, end - stages.postprocessMs);
      const inferenceStart = Math.max(startedAt, postprocessStart - stages.inferenceMs);
      const preprocessStart = Math.max(startedAt, inferenceStart - stages.preprocessWaitMs);
      child('preprocess', preprocessStart, inferenceStart, batch);
      child('inference', inferenceStart, postprocessStart, batch, !outcome.isOk);
      child('postprocess', postprocessStart, end, batch);
    } else {
      child('inference', startedAt, end, batch, !outcome.isOk);
    }
  }

  /**
   * A message of a streaming call, as OpenTelemetry's RPC conventions record it: an `rpc.message`
   * event on the call's span, with its direction and its number in that direction (from 1).
   */
  addMessageEvent(type: 'SENT' | 'RECEIVED', id: number): void {
    if (!this.span.isRecording()) return;
    this.span.addEvent('rpc.message', { 'rpc.message.type': type, 'rpc.message.id': id }, epochMs(performance.now()));
  }

  /** Ends the request span with its answer: `http.response.status_code` or `rpc.grpc.status_code`, ERROR for server errors. */
  end(result: { attributes: Attributes; isError: boolean; errorType?: string }): void {
    if (this.#isEnded) return;
    this.#isEnded = true;
    if (this.span.isRecording()) {
      this.span.setAttributes(result.attributes);
      if (result.isError) {
        this.span.setStatus({ code: SpanStatusCode.ERROR });
        if (result.errorType !== undefined) this.span.setAttribute('error.type', result.errorType);
      }
    }
    this.span.end(epochMs(performance.now()));
  }
}

/**
 * The server's tracer: request spans from each protocol's edge, their children from the jobs,
 * and batch spans from the workers. `shutdown` exports what is left.
 */
export class Tracing {
  readonly tracer: Tracer;
  readonly settings: TracingSettings;
  readonly #provider: TracerProvider;
  readonly #processor: BatchSpanProcessor;

  constructor(settings: TracingSettings, options: { exporter?: SpanExporter; scheduledDelayMs?: number } = {}) {
    this.settings = settings;
    const exporter =
      options.exporter ??
      (settings.exporter === 'console'
        ? new ConsoleSpanExporter()
        : settings.protocol === 'http/json'
          ? new OtlpJsonExporter({ url: settings.endpoint })
          : new OtlpProtoExporter({ url: settings.endpoint }));
    this.#processor = new BatchSpanProcessor({
      exporter,
      // Spans leave in batches, off the request path; a full buffer drops spans, never blocks a request.
      maxQueueSize: 8192,
      maxExportBatchSize: 512,
      scheduledDelayMillis: options.scheduledDelayMs ?? 1000,
    });
    this.#provider = new TracerProvider({
      sampler: samplerOf(settings),
      resource: defaultResource().merge(
        resourceFromAttributes({ ...settings.resourceAttributes, 'service.name': settings.serviceName }),
      ),
      spanProcessors: [this.#processor],
    });
    this.tracer = this.#provider.getTracer('marina', settings.resourceAttributes['service.version']);
  }

  /** Hands a finished span to the batch processor, as the SDK does when a live span ends. */
  emit(span: ReadableSpan): void {
    this.#processor.onEnd(span);
  }

  /** Starts a request's server span, joined to the caller's `traceparent`/`tracestate` when it sent one. */
  startRequest(options: RequestSpanOptions): RequestTrace {
    const parent = propagator.extract(ROOT_CONTEXT, options.headers, headerGetter);
    const span = this.tracer.startSpan(
      options.name,
      {
        kind: SpanKind.SERVER,
        startTime: epochMs(options.startedAt),
        attributes: { ...options.attributes, 'marina.protocol': options.protocol },
      },
      parent,
    );
    return new RequestTrace(this, span, parent);
  }

  /**
   * One request carried by a message of a streaming call (TorchServe's StreamPredictions2): its
   * own span, a child of the call's server span, under which the job's spans hang as under any
   * request span. Each message is a request of its own (its own model, answer and status), so it
   * gets its own trace of admission, queue and stages; the call's span keeps the stream's life and
   * its `rpc.message` events.
   */
  startMessage(call: RequestTrace, options: Omit<RequestSpanOptions, 'headers'>): RequestTrace {
    const span = this.tracer.startSpan(
      options.name,
      {
        kind: SpanKind.INTERNAL,
        startTime: epochMs(options.startedAt),
        attributes: { ...options.attributes, 'marina.protocol': options.protocol },
      },
      call.context,
    );
    return new RequestTrace(this, span, call.context);
  }

  /**
   * A batch that ran: one `batch` span over its run, a child of its first traced request and
   * linked to every traced request in it (a batch serves many traces).
   */
  recordBatch(
    jobs: readonly TracedJob[],
    batch: { workerId: string; modelName: string; modelVersion: string; isOk: boolean },
  ): void {
    let first: RequestTrace | undefined;
    const links: Link[] = [];
    for (const job of jobs) {
      const t = job.trace;
      if (t === undefined || !t.isSampled) continue;
      first ??= t;
      links.push({ context: t.span.spanContext() });
    }
    if (first === undefined) return;
    const startedAt = jobs[0]!.timings.dispatchedAt ?? performance.now();
    this.emit(
      new FinishedSpan(
        'batch',
        first.span as unknown as ReadableSpan,
        millisToHrTime(epochMs(startedAt)),
        millisToHrTime(epochMs(Math.max(startedAt, performance.now()))),
        {
          'marina.batch.size': jobs.length,
          'marina.worker.id': batch.workerId,
          'marina.model.name': batch.modelName,
          'marina.model.version': batch.modelVersion,
        },
        batch.isOk ? UNSET : { code: SpanStatusCode.ERROR },
        links,
      ),
    );
  }

  /** Exports the spans ended so far (tests, and before a planned stop). */
  forceFlush(): Promise<void> {
    return this.#provider.forceFlush();
  }

  /** Exports what is left and stops; called when the server closes. */
  shutdown(): Promise<void> {
    return this.#provider.shutdown();
  }
}

/**
 * A batch's span, when any of its jobs is traced (a loop over the batch's jobs otherwise: tracing
 * off costs nothing more).
 */
export function recordBatchSpan(
  jobs: readonly TracedJob[],
  batch: { workerId: string; modelName: string; modelVersion: string; isOk: boolean },
): void {
  for (const job of jobs) {
    if (job.trace !== undefined) {
      job.trace.tracing.recordBatch(jobs, batch);
      return;
    }
  }
}

/**
 * The trace of each REST request being traced, set by the listener's hooks and read by the routes
 * (which pass it below the protocols); keyed by the request, so it goes with it.
 */
export const requestTraces = new WeakMap<object, RequestTrace>();

/** Builds the server's tracing from its settings; undefined when off. */
export function createTracing(settings: TracingSettings | undefined): Tracing | undefined {
  return settings === undefined ? undefined : new Tracing(settings);
}
