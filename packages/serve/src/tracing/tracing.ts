/**
 * OpenTelemetry traces of inference requests, off by default. On with the standard environment
 * (OTEL_TRACES_EXPORTER=otlp or console) or config.properties `enable_tracing=true`; configured by
 * OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_PROTOCOL (http/protobuf, the
 * default, or http/json), OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG, OTEL_SERVICE_NAME and
 * OTEL_RESOURCE_ATTRIBUTES, and for the OTLP transport OTEL_EXPORTER_OTLP_(TRACES_)HEADERS, _TIMEOUT,
 * _COMPRESSION, _CERTIFICATE, _CLIENT_CERTIFICATE and _CLIENT_KEY (otlp-http-transport.ts).
 *
 * Packages: @opentelemetry/api (the types and context), @opentelemetry/sdk-trace (the samplers),
 * @opentelemetry/resources (the resource: service, SDK and OTEL_RESOURCE_ATTRIBUTES),
 * and @opentelemetry/core (the W3C trace-context propagator). Spans themselves are not the SDK's:
 * each is written, once it is over, straight into an OTLP export request (otlp-span-writer.ts,
 * span-batcher.ts), as the SDK's live spans and serializers cost a fast model 40% of its
 * throughput; the requests are posted by Marina's own OTLP/HTTP transport (otlp-http-transport.ts),
 * which costs less per export than the SDK's export delegate. Not sdk-node: it
 * pulls in every signal, instrumentations and gRPC exporters Marina does not use; not
 * sdk-trace-node: parents are passed explicitly here, so no async context manager is needed.
 *
 * Spans of one request (children of its request span): `admission` (arrival to queued), `queue`
 * (queued to its batch's start, with the priority level), then `preprocess`, `inference` and
 * `postprocess` from the worker's stage times (or one `inference` for a handler without stages),
 * the inference span with the batch size and worker id. Each batch gets a `batch` span, a child of
 * its first traced request, linked to every traced request it ran.
 */
import {
  ROOT_CONTEXT,
  SpanKind,
  trace,
  type Attributes,
  type Context,
  type Link,
  type SpanContext,
  type TextMapGetter,
} from '@opentelemetry/api';
import { parseKeyPairsIntoRecord, W3CTraceContextPropagator } from '@opentelemetry/core';
import { defaultResource, resourceFromAttributes } from '@opentelemetry/resources';
import {
  AlwaysOffSampler,
  AlwaysOnSampler,
  ParentBasedSampler,
  SamplingDecision,
  TraceIdRatioBasedSampler,
  type Sampler,
} from '@opentelemetry/sdk-trace';
import { createServeError } from '../errors.ts';
import type { JobTimings } from '../scheduling/job-timings.ts';
import {
  childIdBlock,
  ID_PARENT,
  ID_SPAN,
  newIdBlock,
  NO_ATTRIBUTES,
  OtlpJsonWriter,
  OtlpProtobufWriter,
  rootIdBlock,
  traceparentOf,
  type SpanAttributes,
  type SpanEvent,
  type SpanRecord,
} from './otlp-span-writer.ts';
import { otlpHttpSettingsFrom, otlpHttpTransport, type OtlpHttpSettings } from './otlp-http-transport.ts';
import { consoleTransport, SpanBatcher, type SpanBatcherCounts, type SpanTransport } from './span-batcher.ts';

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
  /** How the OTLP transport sends: timeout, headers, compression, certificates. */
  otlp: OtlpHttpSettings;
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
  let isHttpUrl = false;
  try {
    const { protocol } = new URL(endpoint);
    isHttpUrl = protocol === 'http:' || protocol === 'https:';
  } catch {
    // Not a URL at all: refused just below, as one that is not http(s).
  }
  if (!isHttpUrl)
    throw invalid(
      specific ? 'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT' : 'OTEL_EXPORTER_OTLP_ENDPOINT',
      endpoint,
      'an http(s) URL',
    );
  const otlp = otlpHttpSettingsFrom(env);
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
    otlp,
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

/** OTLP SpanKind values. */
const INTERNAL = 1;
const SERVER = 2;
/** OTLP status codes. */
const STATUS_UNSET = 0;
const STATUS_ERROR = 2;

const NO_LINKS: Link[] = [];

/**
 * Spans waiting to be sent (the SDK batch processor's maxQueueSize), spans per export request,
 * how long a span may wait for its request to fill, and export requests in flight: at 20 000
 * traced requests a second (seven spans each) a request of 2048 spans leaves about every 15 ms.
 */
const MAX_QUEUE_SIZE = 16_384;
const MAX_EXPORT_BATCH_SIZE = 2048;
const SCHEDULED_DELAY_MS = 1000;
const MAX_CONCURRENT_EXPORTS = 2;
/** How long closing waits for the last spans to reach the collector. */
const SHUTDOWN_TIMEOUT_MS = 10_000;

/** What a request span starts with. */
export interface RequestSpanOptions {
  /** Span name: `POST /predictions/{model_name}`, `inference.GRPCInferenceService/ModelInfer`. */
  name: string;
  protocol: TracedProtocol;
  /** The request's headers (or gRPC metadata), for `traceparent` and `tracestate`. */
  headers: Readonly<Record<string, string | string[] | undefined>>;
  /** The span's attributes; the trace takes the object over (it adds the model, status and protocol to it). */
  attributes: Record<string, string | number | boolean | undefined>;
  /** performance.now() when the request arrived. */
  startedAt: number;
}

/**
 * One request's trace: its server span (written when it ends) and the ids its children hang
 * from. The job carries it to its batch; the protocol ends it with its status. Unsampled, it only
 * gives the response its `traceparent`.
 */
export class RequestTrace {
  readonly isSampled: boolean;
  /** `traceparent` for the response: the request span's context, so a client without a tracer can find its trace. */
  readonly traceparent: string;
  /** The request's id block (see otlp-span-writer.ts): links and children read its ids. */
  readonly ids: Uint8Array;
  readonly #tracing: Tracing;
  /** Whether it has a parent span (a caller's, or a stream call's), and whether that parent is remote. */
  readonly #hasParent: boolean;
  readonly #isParentRemote: boolean;
  readonly #traceState: string | undefined;
  readonly #name: string;
  readonly #kind: number;
  readonly #startedAt: number;
  readonly #attributes: Record<string, string | number | boolean | undefined>;
  #events: SpanEvent[] | undefined;
  #isEnded = false;

  constructor(
    tracing: Tracing,
    options: {
      ids: Uint8Array;
      hasParent: boolean;
      isParentRemote: boolean;
      traceState: string | undefined;
      isSampled: boolean;
      name: string;
      kind: number;
      startedAt: number;
      attributes: RequestSpanOptions['attributes'];
    },
  ) {
    this.#tracing = tracing;
    this.ids = options.ids;
    this.#hasParent = options.hasParent;
    this.#isParentRemote = options.isParentRemote;
    this.#traceState = options.traceState;
    this.isSampled = options.isSampled;
    this.#name = options.name;
    this.#kind = options.kind;
    this.#startedAt = options.startedAt;
    this.#attributes = options.attributes;
    this.traceparent = traceparentOf(options.ids, options.isSampled);
  }

  /** The trace id, hex (from `traceparent`, which every request builds anyway). */
  get traceId(): string {
    return this.traceparent.slice(3, 35);
  }

  /** The request span's id, hex. */
  get spanId(): string {
    return this.traceparent.slice(36, 52);
  }

  /** The tracer that started it (batch spans come from the same one). */
  get tracing(): Tracing {
    return this.#tracing;
  }

  /** Names the model, version and request id on the request span. */
  setModel(modelName: string, modelVersion: string, requestId: string): void {
    if (!this.isSampled) return;
    const attributes = this.#attributes;
    attributes['marina.model.name'] = modelName;
    attributes['marina.model.version'] = modelVersion;
    attributes['marina.request.id'] = requestId;
  }

  /**
   * The job's spans under the request span, from its timings: admission, queue, then the worker's
   * stages. Called once the job is answered (whatever the outcome).
   */
  recordJob(job: TracedJob, outcome: { isOk: boolean; errorCode?: string }): void {
    if (!this.isSampled) return;
    const t = job.timings;
    const end = t.finishedAt ?? performance.now();
    const queuedAt = t.queuedAt ?? end;
    const errorMessage = outcome.isOk ? undefined : outcome.errorCode;
    this.#child('admission', t.arrivedAt, queuedAt, NO_ATTRIBUTES, false, undefined);
    const startedAt = t.dispatchedAt;
    this.#child(
      'queue',
      queuedAt,
      startedAt ?? end,
      { 'marina.priority': job.priority },
      startedAt === undefined,
      errorMessage,
    );
    if (startedAt === undefined) return;
    const batch = { 'marina.batch.size': t.batchSize ?? 1, 'marina.worker.id': t.workerId };
    const stages = t.stages;
    if (stages) {
      // Laid out back from the answer: the worker measured the stages on its own clock, and a
      // prefetched batch may have started there before the main thread learnt of it.
      const postprocessStart = Math.max(startedAt, end - stages.postprocessMs);
      const inferenceStart = Math.max(startedAt, postprocessStart - stages.inferenceMs);
      const preprocessStart = Math.max(startedAt, inferenceStart - stages.preprocessWaitMs);
      // The batch size and worker id go on the inference span only: the three stages ran in the
      // same batch on the same worker, and each repeat cost the span 66 bytes (a tenth of a
      // request's spans) to write and send.
      this.#child('preprocess', preprocessStart, inferenceStart, NO_ATTRIBUTES, false, undefined);
      this.#child('inference', inferenceStart, postprocessStart, batch, !outcome.isOk, errorMessage);
      this.#child('postprocess', postprocessStart, end, NO_ATTRIBUTES, false, undefined);
    } else {
      this.#child('inference', startedAt, end, batch, !outcome.isOk, errorMessage);
    }
  }

  /** A finished child of the request span (admission, queue, a stage). */
  #child(
    name: string,
    start: number,
    stop: number,
    attributes: SpanAttributes,
    isError: boolean,
    message: string | undefined,
  ): void {
    const span = this.#tracing.scratch;
    span.ids = this.ids;
    span.spanIdAt = -1;
    span.parentIdAt = ID_SPAN;
    span.isParentRemote = false;
    span.traceState = this.#traceState;
    span.name = name;
    span.kind = INTERNAL;
    span.start = start;
    span.end = Math.max(start, stop);
    span.attributes = attributes;
    span.statusCode = isError ? STATUS_ERROR : STATUS_UNSET;
    span.statusMessage = isError ? message : undefined;
    span.links = undefined;
    span.events = undefined;
    this.#tracing.write(span);
  }

  /**
   * A message of a streaming call, as OpenTelemetry's RPC conventions record it: an `rpc.message`
   * event on the call's span, with its direction and its number in that direction (from 1).
   */
  addMessageEvent(type: 'SENT' | 'RECEIVED', id: number): void {
    if (!this.isSampled || this.#isEnded) return;
    // A stream's events are bounded as the SDK bounds a span's (its default limit, 128): the oldest go first.
    this.#events ??= [];
    if (this.#events.length >= MAX_EVENTS) this.#events.shift();
    this.#events.push({
      name: 'rpc.message',
      time: performance.now(),
      attributes: { 'rpc.message.type': type, 'rpc.message.id': id },
    });
  }

  /**
   * Ends the request span with its answer: its status as `statusAttribute`
   * (`http.response.status_code` or `rpc.grpc.status_code`), ERROR for server errors. One named
   * attribute, not a record of them: a loop over a record's keys cost each request a generic
   * keyed load and store.
   */
  end(result: {
    statusAttribute: 'http.response.status_code' | 'rpc.grpc.status_code';
    status: number;
    isError: boolean;
    errorType?: string;
  }): void {
    if (this.#isEnded) return;
    this.#isEnded = true;
    if (!this.isSampled) return;
    const attributes = this.#attributes;
    attributes[result.statusAttribute] = result.status;
    if (result.isError && result.errorType !== undefined) attributes['error.type'] = result.errorType;
    const span = this.#tracing.scratch;
    span.ids = this.ids;
    span.spanIdAt = ID_SPAN;
    span.parentIdAt = this.#hasParent ? ID_PARENT : -1;
    span.isParentRemote = this.#isParentRemote;
    span.traceState = this.#traceState;
    span.name = this.#name;
    span.kind = this.#kind;
    span.start = this.#startedAt;
    span.end = Math.max(this.#startedAt, performance.now());
    span.attributes = attributes;
    span.statusCode = result.isError ? STATUS_ERROR : STATUS_UNSET;
    span.statusMessage = undefined;
    span.links = undefined;
    span.events = this.#events;
    this.#tracing.write(span);
  }
}

/** Events kept on one span (a long stream's call span keeps its last ones). */
const MAX_EVENTS = 128;

/**
 * The server's tracer: request spans from each protocol's edge, their children from the jobs,
 * and batch spans from the workers, written as they end into OTLP export requests (see
 * span-batcher.ts). `shutdown` exports what is left.
 */
export class Tracing {
  readonly settings: TracingSettings;
  readonly #sampler: Sampler;
  /** The sampler's answer for a request without a parent when it is always the same (always_on, always_off); undefined for a ratio. */
  readonly #rootDecision: boolean | undefined;
  readonly #batcher: SpanBatcher;
  /** The one span record the writers are handed (they copy it out at once). */
  readonly scratch: SpanRecord = {
    ids: new Uint8Array(32),
    spanIdAt: -1,
    parentIdAt: -1,
    isParentRemote: false,
    traceState: undefined,
    name: '',
    kind: INTERNAL,
    start: 0,
    end: 0,
    attributes: NO_ATTRIBUTES,
    statusCode: STATUS_UNSET,
    statusMessage: undefined,
    links: undefined,
    events: undefined,
  };

  constructor(
    settings: TracingSettings,
    options: {
      transport?: SpanTransport;
      scheduledDelayMs?: number;
      /** Where lost spans are reported (a warning at the first loss, then at most once a minute). */
      log?: (level: 'warn', message: string) => void;
    } = {},
  ) {
    this.settings = settings;
    this.#sampler = samplerOf(settings);
    const root = settings.sampler.replace(/^parentbased_/, '');
    this.#rootDecision = root === 'always_on' ? true : root === 'always_off' ? false : undefined;
    const resource = defaultResource().merge(
      resourceFromAttributes({ ...settings.resourceAttributes, 'service.name': settings.serviceName }),
    );
    const header = {
      resourceAttributes: resource.attributes as SpanAttributes,
      scopeName: 'marina',
      scopeVersion: settings.resourceAttributes['service.version'] ?? '',
    };
    const writer =
      settings.exporter === 'console' || settings.protocol === 'http/json'
        ? new OtlpJsonWriter(header)
        : new OtlpProtobufWriter(header);
    this.#batcher = new SpanBatcher({
      writer,
      transport:
        options.transport ??
        (settings.exporter === 'console'
          ? consoleTransport()
          : otlpHttpTransport({
              url: settings.endpoint,
              contentType: writer.contentType,
              settings: settings.otlp,
              maxSockets: MAX_CONCURRENT_EXPORTS,
            })),
      maxQueueSize: MAX_QUEUE_SIZE,
      maxExportBatchSize: MAX_EXPORT_BATCH_SIZE,
      scheduledDelayMs: options.scheduledDelayMs ?? SCHEDULED_DELAY_MS,
      maxConcurrentExports: MAX_CONCURRENT_EXPORTS,
      onLoss: (counts) =>
        options.log?.(
          'warn',
          `tracing: ${counts.dropped} span(s) dropped because the export queue was full (the collector is slow or down) and ${counts.failed} lost in exports the collector refused or never answered, so far; those traces are incomplete`,
        ),
    });
  }

  /** What became of the spans so far: exported, failed, dropped. */
  get counts(): Readonly<SpanBatcherCounts> {
    return this.#batcher.counts;
  }

  /** Writes a finished span (the record is read at once, not kept). */
  write(span: SpanRecord): void {
    this.#batcher.add(span);
  }

  /** Starts a request's server span, joined to the caller's `traceparent`/`tracestate` when it sent one. */
  startRequest(options: RequestSpanOptions): RequestTrace {
    const attributes = options.attributes;
    attributes['marina.protocol'] = options.protocol;
    if (options.headers.traceparent === undefined && this.#rootDecision !== undefined) {
      // No parent and a sampler that decides alone without looking (always_on, always_off): its answer is known.
      return new RequestTrace(this, {
        ids: rootIdBlock(),
        hasParent: false,
        isParentRemote: false,
        traceState: undefined,
        isSampled: this.#rootDecision,
        name: options.name,
        kind: SERVER,
        startedAt: options.startedAt,
        attributes,
      });
    }
    let context: Context = ROOT_CONTEXT;
    let parent: SpanContext | undefined;
    if (options.headers.traceparent !== undefined) {
      context = propagator.extract(ROOT_CONTEXT, options.headers, headerGetter);
      parent = trace.getSpanContext(context);
    }
    const ids = newIdBlock(parent);
    const decision = this.#sampler.shouldSample(
      context,
      ids.traceId,
      options.name,
      SpanKind.SERVER,
      attributes as Attributes,
      NO_LINKS,
    );
    const traceState = decision.traceState ?? parent?.traceState;
    return new RequestTrace(this, {
      ids: ids.ids,
      hasParent: parent !== undefined,
      isParentRemote: parent !== undefined,
      traceState: traceState?.serialize() || undefined,
      isSampled: decision.decision === SamplingDecision.RECORD_AND_SAMPLED,
      name: options.name,
      kind: SERVER,
      startedAt: options.startedAt,
      attributes,
    });
  }

  /**
   * One request carried by a message of a streaming call (TorchServe's StreamPredictions2): its
   * own span, a child of the call's server span, under which the job's spans hang as under any
   * request span. Each message is a request of its own (its own model, answer and status), so it
   * gets its own trace of admission, queue and stages; the call's span keeps the stream's life and
   * its `rpc.message` events.
   */
  startMessage(call: RequestTrace, options: Omit<RequestSpanOptions, 'headers'>): RequestTrace {
    const attributes = options.attributes;
    attributes['marina.protocol'] = options.protocol;
    return new RequestTrace(this, {
      ids: childIdBlock(call.ids),
      hasParent: true,
      isParentRemote: false,
      traceState: undefined,
      isSampled: call.isSampled,
      name: options.name,
      kind: INTERNAL,
      startedAt: options.startedAt,
      attributes,
    });
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
    const links: Uint8Array[] = [];
    for (const job of jobs) {
      const t = job.trace;
      if (t === undefined || !t.isSampled) continue;
      first ??= t;
      links.push(t.ids);
    }
    if (first === undefined) return;
    const startedAt = jobs[0]!.timings.dispatchedAt ?? performance.now();
    const span = this.scratch;
    span.ids = first.ids;
    span.spanIdAt = -1;
    span.parentIdAt = ID_SPAN;
    span.isParentRemote = false;
    span.traceState = undefined;
    span.name = 'batch';
    span.kind = INTERNAL;
    span.start = startedAt;
    span.end = Math.max(startedAt, performance.now());
    span.attributes = {
      'marina.batch.size': jobs.length,
      'marina.worker.id': batch.workerId,
      'marina.model.name': batch.modelName,
      'marina.model.version': batch.modelVersion,
    };
    span.statusCode = batch.isOk ? STATUS_UNSET : STATUS_ERROR;
    span.statusMessage = undefined;
    span.links = links;
    span.events = undefined;
    this.write(span);
  }

  /** Exports the spans ended so far; resolves once the collector has answered (tests, and before a planned stop). */
  forceFlush(): Promise<void> {
    return this.#batcher.forceFlush();
  }

  /** Exports what is left (waiting at most 10 s for the collector) and stops; called when the server closes. */
  shutdown(): Promise<void> {
    return this.#batcher.shutdown(SHUTDOWN_TIMEOUT_MS);
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

/** Builds the server's tracing from its settings; undefined when off. */
export function createTracing(
  settings: TracingSettings | undefined,
  log?: (level: 'warn', message: string) => void,
): Tracing | undefined {
  return settings === undefined ? undefined : new Tracing(settings, log ? { log } : {});
}
