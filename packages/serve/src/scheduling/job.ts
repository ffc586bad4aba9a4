import type { MarinaError } from '@marina/errors';
import type { BodyDecoding } from '../workers/worker-protocol.ts';
import type { JobTimings } from './job-timings.ts';
import type { RequestTrace } from '../tracing/tracing.ts';

/** One request's input as the handler sees it: `{ body }` for a raw body, one key per multipart field otherwise. */
export type JobInput = Record<string, unknown>;

/** What a worker answers for one job. */
export interface JobResult {
  statusCode: number;
  readonly body: Buffer;
  /**
   * The same answer as text, when the worker sent text (JSON it serialised, a string the handler
   * returned): the REST routes send it as it is, in one write with the response head.
   */
  readonly text?: string;
  /** Set by the handler, or 'application/json' when the server serialised the item to JSON. */
  contentType: string | undefined;
  headers: Record<string, string>;
}

/** A JobResult the worker sent as text: its bytes (`body`) are encoded only when a protocol reads them. */
export class TextJobResult implements JobResult {
  #body: Buffer | undefined;

  constructor(
    public statusCode: number,
    readonly text: string,
    public contentType: string | undefined,
    public headers: Record<string, string>,
  ) {}

  get body(): Buffer {
    this.#body ??= Buffer.from(this.text, 'utf8');
    return this.#body;
  }
}

/**
 * Where a job waits and until when (see JobQueue): its priority level, the time after which it is
 * answered without running, and (timeoutAction 'delay') the time after which it loses its place.
 */
export interface JobSchedule {
  /** 1 is the highest level. Default 1. */
  priority: number;
  /** performance.now() after which the job is answered without running; undefined: never. */
  deadline?: number;
  /** Whether the deadline is the request's own (its timeout, a gRPC deadline: 504) rather than its level's policy (503). */
  isRequestDeadline?: boolean;
  /** performance.now() after which the job moves behind its level's other jobs (timeoutAction 'delay'). */
  delayAt?: number;
}

/**
 * One inference request travelling from the HTTP route through the queue to a worker.
 * Settled exactly once: with a JobResult, or with a MarinaError.
 */
export class Job {
  readonly requestId: string;
  readonly input: JobInput;
  /** Request headers, lower-case names (TorchServe forwards every header to the handler). */
  readonly headers: Record<string, string>;
  readonly timings: JobTimings;
  /** How the worker decodes `input.body` bytes before the handler sees them (undefined: as is). */
  readonly bodyDecoding: BodyDecoding;
  readonly promise: Promise<JobResult>;
  /** performance.now() after which the job is answered without running (its level's timeout, its own, or its gRPC deadline); undefined: no deadline. */
  readonly deadline: number | undefined;
  /** The deadline is the request's own (answered 504) rather than its level's (503). */
  readonly isRequestDeadline: boolean;
  /** Priority level, 1 the highest. */
  readonly priority: number;
  /** performance.now() after which the job moves behind its level's others (timeoutAction 'delay'); cleared when it does. */
  delayAt: number | undefined;
  /** The request's trace, when tracing is on (see tracing/tracing.ts); the scheduler only carries it. */
  readonly trace: RequestTrace | undefined;
  #resolve!: (result: JobResult) => void;
  #reject!: (error: MarinaError) => void;
  #isSettled = false;

  constructor(options: {
    requestId: string;
    input: JobInput;
    headers?: Record<string, string>;
    arrivedAt?: number;
    bodyDecoding?: BodyDecoding;
    clientTimeoutMs?: number;
    /** Priority and deadlines (overrides clientTimeoutMs). */
    schedule?: JobSchedule;
    trace?: RequestTrace;
  }) {
    this.requestId = options.requestId;
    this.input = options.input;
    this.bodyDecoding = options.bodyDecoding;
    this.headers = options.headers ?? {};
    this.timings = {
      arrivedAt: options.arrivedAt ?? performance.now(),
      queuedAt: undefined,
      dispatchedAt: undefined,
      finishedAt: undefined,
      workerId: undefined,
      batchSize: undefined,
    };
    const schedule = options.schedule;
    this.deadline =
      schedule !== undefined
        ? schedule.deadline
        : options.clientTimeoutMs !== undefined && options.clientTimeoutMs > 0
          ? this.timings.arrivedAt + options.clientTimeoutMs
          : undefined;
    this.isRequestDeadline = schedule?.isRequestDeadline === true;
    this.priority = schedule?.priority ?? 1;
    this.delayAt = schedule?.delayAt;
    this.trace = options.trace;
    this.promise = new Promise<JobResult>((resolve, reject) => {
      this.#resolve = resolve;
      this.#reject = reject;
    });
    // A job failed before anyone awaits it (e.g. during close) must not become an unhandled rejection.
    this.promise.catch(() => undefined);
  }

  get isSettled(): boolean {
    return this.#isSettled;
  }

  resolve(result: JobResult): void {
    if (this.#isSettled) return;
    this.#isSettled = true;
    this.timings.finishedAt = performance.now();
    this.#resolve(result);
  }

  reject(error: MarinaError): void {
    if (this.#isSettled) return;
    this.#isSettled = true;
    this.timings.finishedAt = performance.now();
    this.#reject(error);
  }
}
