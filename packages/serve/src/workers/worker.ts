import { EventEmitter } from 'node:events';
import { Worker as NodeWorker } from 'node:worker_threads';
import { defaultOrtTelemetryOff } from '@marina/archive';
import { MarinaError } from '@marina/errors';
import { createServeError } from '../errors.ts';
import type { Job } from '../scheduling/job.ts';
import type { BatchPayload, BatchResult, FromWorker, HandlerStagesMs, ToWorker, WorkerInit } from './worker-protocol.ts';

/**
 * LOADING → READY ⇄ BUSY → UNLOADING (stopped on purpose) or FAILED (crash, load failure,
 * response timeout). A FAILED or UNLOADING worker never comes back; the pool starts a new one.
 */
export type WorkerState = 'LOADING' | 'READY' | 'BUSY' | 'UNLOADING' | 'FAILED';

const bootstrapUrl = new URL('./worker-bootstrap.mjs', import.meta.url);

/** TorchServe numbers workers by port from 9000; Marina keeps the numbering for describe's `id`. */
let nextWorkerId = 9000;

export interface WorkerOptions {
  init: WorkerInit;
  startupTimeoutMs: number;
  responseTimeoutMs: number;
  /** Label for messages: "model 'x' version '1.0'". */
  label: string;
}

/**
 * Batches a worker holds at once: one running, the rest already in its thread so it never waits
 * for the main thread between batches, and so a handler with a separate `preprocess` can decode
 * the next batch on libuv's pool while `run()` blocks the worker's JavaScript thread (the
 * message of batch k+2 must be there before run(k+1) starts, hence 3 and not 2).
 */
export const WORKER_PIPELINE_DEPTH = 3;

interface Flight {
  batchId: number;
  jobs: Job[];
  /** When it became the head of the pipeline (the batch the worker is working on), ms. */
  started: number;
  resolve: (o: BatchOutcome) => void;
}

export interface BatchOutcome {
  /** Time the worker spent on the batch, ms (0 when it failed before answering). */
  inferenceMs: number;
  isOk: boolean;
  /** Per-stage times inside the worker, for handlers with separate stages. */
  stages?: HandlerStagesMs;
}

/**
 * The main-thread side of one worker thread. Its lifecycle (start, stop, failure) is here;
 * the loop that feeds it batches is the pool's and the aggregator's.
 * Emits 'failed' (error: MarinaError) once when it crashes or is killed after a timeout, and
 * 'exit' once its thread has really ended (a timed-out native run() keeps the thread, and its
 * cores, busy until it returns, even after terminate()).
 */
export class Worker extends EventEmitter<{ failed: [MarinaError]; exit: [] }> {
  readonly id = String(nextWorkerId++);
  readonly startTime = new Date();
  readonly intraOpNumThreads: number;
  #state: WorkerState = 'LOADING';
  #thread: NodeWorker | undefined;
  #heapBytes = 0;
  /** Batches sent and not answered yet, oldest first (the thread answers in order). */
  #flights: Flight[] = [];
  /** One timer for the head batch only: the others have not started yet. */
  #timer: ReturnType<typeof setTimeout> | undefined;
  #isReserved = false;
  #nextBatchId = 1;
  #hasExited = false;
  /** Batches handed out in one synchronous pump of the aggregator, sent together in one message (a microtask later). */
  #outbox: BatchPayload[] = [];
  #outboxTransfer: ArrayBuffer[] = [];
  readonly #options: WorkerOptions;
  readonly exited: Promise<void>;
  #markExited!: () => void;

  constructor(options: WorkerOptions) {
    super();
    this.#options = options;
    this.intraOpNumThreads = options.init.intraOpNumThreads;
    this.exited = new Promise((resolve) => (this.#markExited = resolve));
  }

  get state(): WorkerState {
    return this.#state;
  }

  get hasExited(): boolean {
    return this.#hasExited;
  }

  /** Worker heap + external memory, bytes, as last reported by the thread. */
  get memoryBytes(): number {
    return this.#heapBytes;
  }

  /** Batches sent to the thread and not answered yet. */
  get batchesInFlight(): number {
    return this.#flights.length;
  }

  /** True when the worker can take one more batch now: alive, not reserved, its pipeline not full. */
  get canTakeBatch(): boolean {
    return (this.#state === 'READY' || this.#state === 'BUSY') && !this.#isReserved && this.#flights.length < WORKER_PIPELINE_DEPTH;
  }

  /** Marks the worker as taken for a batch being collected (it may still be running earlier ones). */
  reserve(): void {
    if (this.#state !== 'READY' && this.#state !== 'BUSY') return;
    this.#isReserved = true;
    this.#state = 'BUSY';
  }

  /** Returns a reserved worker that got no batch (e.g. on close). */
  release(): void {
    this.#isReserved = false;
    if (this.#state === 'BUSY' && this.#flights.length === 0) this.#state = 'READY';
  }

  /**
   * Starts the thread and resolves once the handler has initialised (model loaded).
   * @throws MARINA_ERR_WORKER_START_FAILED with the handler's error, or MARINA_ERR_WORKER_STARTUP_TIMEOUT.
   */
  start(): Promise<void> {
    const { init, label, startupTimeoutMs } = this.#options;
    return new Promise<void>((resolve, reject) => {
      defaultOrtTelemetryOff();
      const thread = new NodeWorker(bootstrapUrl, { workerData: init, stdout: false, stderr: false });
      this.#thread = thread;
      let isStarting = true;
      const timer = setTimeout(() => {
        if (!isStarting) return;
        isStarting = false;
        const error = createServeError.MARINA_ERR_WORKER_STARTUP_TIMEOUT(`worker ${this.id} of ${label} did not load the model within startupTimeout (${startupTimeoutMs / 1000} s); raise startupTimeout for large models`);
        this.#fail(error);
        reject(error);
      }, startupTimeoutMs);
      thread.on('message', (message: FromWorker) => {
        if (message.type === 'ready') {
          this.#heapBytes = message.heapBytes;
          if (!isStarting) return;
          isStarting = false;
          clearTimeout(timer);
          this.#state = 'READY';
          resolve();
        } else if (message.type === 'init-failed') {
          if (!isStarting) return;
          isStarting = false;
          clearTimeout(timer);
          const { code, message: text, stack } = message.error;
          const wrapped = code === 'MARINA_ERR_WORKER_START_FAILED'
            ? createServeError.MARINA_ERR_WORKER_START_FAILED(text, { details: { stack } })
            : createServeError.MARINA_ERR_WORKER_START_FAILED(`${text} [${code}]`, { details: { handlerCode: code, stack } });
          this.#fail(wrapped);
          reject(wrapped);
        } else {
          this.#onResults(message);
        }
      });
      thread.on('error', (error) => {
        const died = createServeError.MARINA_ERR_WORKER_DIED(`worker ${this.id} of ${label} crashed: ${error.message}`, { cause: error });
        if (isStarting) {
          isStarting = false;
          clearTimeout(timer);
          reject(createServeError.MARINA_ERR_WORKER_START_FAILED(`worker ${this.id} of ${label} crashed while loading: ${error.message}`, { cause: error }));
        }
        this.#fail(died, false);
      });
      thread.on('exit', (code) => {
        this.#hasExited = true;
        if (isStarting) {
          isStarting = false;
          clearTimeout(timer);
          reject(createServeError.MARINA_ERR_WORKER_START_FAILED(`worker ${this.id} of ${label} exited with code ${code} while loading`));
        }
        if (this.#state !== 'UNLOADING' && this.#state !== 'FAILED') {
          this.#fail(createServeError.MARINA_ERR_WORKER_DIED(`worker ${this.id} of ${label} exited unexpectedly with code ${code}`), false);
        }
        this.#markExited();
        this.emit('exit');
      });
    });
  }

  /**
   * Runs one batch. Settles every job (result or error) before resolving; never rejects.
   * A batch past responseTimeout fails its jobs with MARINA_ERR_RESPONSE_TIMEOUT and the worker
   * is killed ('failed' is emitted; the pool replaces it).
   */
  runBatch(jobs: Job[]): Promise<BatchOutcome> {
    const { label } = this.#options;
    return new Promise<BatchOutcome>((resolve) => {
      this.#isReserved = false;
      if (!this.#thread || (this.#state !== 'READY' && this.#state !== 'BUSY')) {
        const error = createServeError.MARINA_ERR_WORKER_DIED(`worker ${this.id} of ${label} is ${this.#state} and cannot take a batch`);
        for (const job of jobs) job.reject(error);
        resolve({ inferenceMs: 0, isOk: false });
        return;
      }
      this.#state = 'BUSY';
      const batchId = this.#nextBatchId++;
      const now = performance.now();
      for (const job of jobs) job.timings.dispatchedAt = now;
      this.#flights.push({ batchId, jobs, started: now, resolve });
      if (this.#flights.length === 1) this.#armTimer();
      const n = jobs.length;
      const rows: Array<Record<string, unknown>> = new Array(n);
      const requestIds: string[] = new Array(n);
      const headers: Array<Record<string, string>> = new Array(n);
      let decodings: BatchPayload['decodings'];
      for (let i = 0; i < n; i++) {
        const job = jobs[i]!;
        const row: Record<string, unknown> = {};
        for (const key in job.input) row[key] = this.#prepareValue(job.input[key]);
        rows[i] = row;
        requestIds[i] = job.requestId;
        headers[i] = job.headers;
        if (job.bodyDecoding !== undefined) (decodings ??= new Array(n).fill(undefined))[i] = job.bodyDecoding;
      }
      this.#outbox.push(decodings ? { batchId, rows, requestIds, headers, decodings } : { batchId, rows, requestIds, headers });
      // The aggregator hands out every batch it can in one synchronous pump: send them together.
      // (Waiting longer, to the end of the event-loop turn, measured slower: the worker idles.)
      if (this.#outbox.length === 1) queueMicrotask(() => this.#flushOutbox());
    });
  }

  /**
   * A Buffer goes over as its own bytes: one that owns its whole ArrayBuffer (a large request
   * body) is transferred without a copy; a view into a bigger one (small Buffers share an 8 KiB
   * pool slab) is copied first, as the structured clone would copy the whole slab.
   */
  #prepareValue(value: unknown): unknown {
    if (!(value instanceof Uint8Array)) return value;
    const { buffer } = value;
    if (value.byteOffset !== 0 || value.byteLength !== buffer.byteLength) return new Uint8Array(value);
    if (buffer instanceof ArrayBuffer && value.byteLength >= 64 * 1024 && !this.#outboxTransfer.includes(buffer)) this.#outboxTransfer.push(buffer);
    return value;
  }

  #flushOutbox(): void {
    const batches = this.#outbox;
    const transfer = this.#outboxTransfer;
    this.#outbox = [];
    this.#outboxTransfer = [];
    if (batches.length === 0 || !this.#thread || this.#hasExited) return;
    const message: ToWorker = { type: 'batches', batches };
    this.#thread.postMessage(message, transfer);
  }

  /** Starts responseTimeout for the head batch, from now: a prefetched batch's clock starts when it does. */
  #armTimer(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    const head = this.#flights[0];
    if (!head) return;
    const { label, responseTimeoutMs } = this.#options;
    head.started = performance.now();
    // 504 rather than TorchServe's 500 "Worker died.": the request did not crash anything, it
    // ran out of time; a gateway-timeout status tells clients and load balancers exactly that.
    this.#timer = setTimeout(() => {
      const error = createServeError.MARINA_ERR_RESPONSE_TIMEOUT(
        `${label} did not answer within responseTimeout (${responseTimeoutMs / 1000} s) for a batch of ${head.jobs.length}; worker ${this.id} was stopped and is being replaced. Raise responseTimeout, or make the model faster (fewer workers with more threads, smaller batches)`,
        { details: { responseTimeoutMs, batchSize: head.jobs.length } },
      );
      this.#fail(error);
    }, responseTimeoutMs);
  }

  /** Stops the worker on purpose (scale down, unregister, close). Callers drain it first. */
  async stop(): Promise<void> {
    if (this.#state !== 'FAILED') this.#state = 'UNLOADING';
    if (this.#flights.length > 0) this.#settleInFlight(createServeError.MARINA_ERR_MODEL_UNLOADING(`worker ${this.id} of ${this.#options.label} was stopped while running a batch`));
    if (this.#thread && !this.#hasExited) await this.#thread.terminate();
    await this.exited;
  }

  #onResults(message: Extract<FromWorker, { type: 'results' }>): void {
    this.#heapBytes = message.heapBytes;
    for (const result of message.results) this.#onBatchResult(result);
  }

  #onBatchResult(result: BatchResult): void {
    const flight = this.#flights[0];
    if (!flight || flight.batchId !== result.batchId) return;
    this.#flights.shift();
    const inferenceMs = performance.now() - flight.started;
    this.#armTimer();
    if (this.#state === 'BUSY' && this.#flights.length === 0 && !this.#isReserved) this.#state = 'READY';
    if (!result.ok) {
      const error = new MarinaError(result.error.code, result.error.message, result.error.statusCode, { details: { requestIds: flight.jobs.map((j) => j.requestId) } });
      for (const job of flight.jobs) job.reject(error);
      flight.resolve({ inferenceMs, isOk: false });
      return;
    }
    const { items } = result;
    for (let i = 0; i < items.length; i++) {
      const item = items[i]!;
      const job = flight.jobs[i]!;
      if (result.stages) job.timings.stages = result.stages;
      if (item.ok) {
        const { body } = item;
        job.resolve({ statusCode: item.statusCode, body: typeof body === 'string' ? Buffer.from(body, 'utf8') : Buffer.from(body.buffer, body.byteOffset, body.byteLength), contentType: item.contentType, headers: item.headers });
      } else {
        job.reject(new MarinaError(item.error.code, item.error.message, item.error.statusCode, { details: Object.keys(item.headers).length > 0 ? { headers: item.headers } : undefined }));
      }
    }
    flight.resolve({ inferenceMs, isOk: true, ...(result.stages ? { stages: result.stages } : {}) });
  }

  #settleInFlight(error: MarinaError): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    const now = performance.now();
    for (const flight of this.#flights.splice(0)) {
      for (const job of flight.jobs) job.reject(error);
      flight.resolve({ inferenceMs: now - flight.started, isOk: false });
    }
  }

  #fail(error: MarinaError, shouldTerminate = true): void {
    if (this.#state === 'FAILED' || this.#state === 'UNLOADING') return;
    const wasRunning = this.#state === 'READY' || this.#state === 'BUSY';
    this.#state = 'FAILED';
    this.#settleInFlight(error);
    // terminate() cannot interrupt a native run(); the thread ends when run() returns ('exit' then).
    if (shouldTerminate && this.#thread && !this.#hasExited) void this.#thread.terminate();
    if (wasRunning) this.emit('failed', error);
  }
}
