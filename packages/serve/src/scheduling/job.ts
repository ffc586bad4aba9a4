import type { MarinaError } from '@marina/errors';
import type { BodyDecoding, HandlerStagesMs } from '../workers/worker-protocol.ts';

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

export interface JobTimings {
  /** performance.now() when the request arrived. */
  arrivedAt: number;
  /** When its batch started running in a worker (not when it was handed over); undefined until then. */
  dispatchedAt: number | undefined;
  /** When the worker answered. */
  finishedAt: number | undefined;
  /** Where the worker spent the time of this job's batch, for handlers with separate stages. */
  stages?: HandlerStagesMs;
  /** The handler's time for this job's batch, measured in the worker thread. */
  handlerMs?: number;
  /** It arrived while its model version was not resident, and waited for the load. */
  waitedForLoad?: boolean;
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
  /** performance.now() after which the job is answered without running (clientTimeoutInMills); undefined: no deadline. */
  readonly deadline: number | undefined;
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
  }) {
    this.requestId = options.requestId;
    this.input = options.input;
    this.bodyDecoding = options.bodyDecoding;
    this.headers = options.headers ?? {};
    this.timings = {
      arrivedAt: options.arrivedAt ?? performance.now(),
      dispatchedAt: undefined,
      finishedAt: undefined,
    };
    this.deadline =
      options.clientTimeoutMs !== undefined && options.clientTimeoutMs > 0
        ? this.timings.arrivedAt + options.clientTimeoutMs
        : undefined;
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
