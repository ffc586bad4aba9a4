import { EventEmitter } from 'node:events';
import { isUtf8 } from 'node:buffer';
import { Worker as NodeWorker } from 'node:worker_threads';
import { defaultOrtTelemetryOff } from '@marina/archive';
import { MarinaError } from '@marina/errors';
import { getBuiltinHandler } from '@marina/handlers';
import { hasNativeCall, mayTerminateNow, newNativeCallGauge } from './native-calls.ts';
import type { AssignMessage, SpareThreadPool } from './spare-threads.ts';
import { SHADOW_SCHED_IDLE_ENV, WORKER_SCHED_BATCH_ENV } from './use-sched-batch.ts';
import { createServeError } from '../errors.ts';
import type { DispatchReason } from '../scheduling/batch-aggregator.ts';
import { TextJobResult, type Job } from '../scheduling/job.ts';
import type {
  BatchPayload,
  BatchResult,
  BodyDecoding,
  FromWorker,
  HandlerStagesMs,
  ToWorker,
  WorkerInit,
} from './worker-protocol.ts';

/**
 * LOADING → READY ⇄ BUSY → UNLOADING (stopped on purpose) or FAILED (crash, load failure,
 * response timeout). A FAILED or UNLOADING worker never comes back; the pool starts a new one.
 */
export type WorkerState = 'LOADING' | 'READY' | 'BUSY' | 'UNLOADING' | 'FAILED';

/** The worker thread's entry point (also the spare threads', see spare-threads.ts). */
export const bootstrapUrl = new URL('./worker-bootstrap.mjs', import.meta.url);

let isSchedulingWarned = false;
/** Says once per process that worker threads run under the default scheduling policy, and why. */
function warnSchedulingOnce(problem: string): void {
  if (isSchedulingWarned) return;
  isSchedulingWarned = true;
  process.stderr.write(
    `${new Date().toISOString()} WARN worker threads run under the default scheduling policy, not SCHED_BATCH: ${problem}. Serving works; under load the HTTP thread may lose its core to a woken worker. Set ${WORKER_SCHED_BATCH_ENV}=0 to silence this.\n`,
  );
}

let isBackgroundWarned = false;
/** Says once per process that a shadow version's workers run at normal priority, and why. */
function warnBackgroundOnce(problem: string): void {
  if (isBackgroundWarned) return;
  isBackgroundWarned = true;
  process.stderr.write(
    `${new Date().toISOString()} WARN a shadow version's worker threads run at normal CPU priority, not SCHED_IDLE or nice 19: ${problem}. Shadow copies still wait for an idle worker, but once running they share the cores with live requests. Set ${SHADOW_SCHED_IDLE_ENV}=0 to silence this.\n`,
  );
}

/** TorchServe numbers workers by port from 9000; Marina keeps the numbering for describe's `id`. */
let nextWorkerId = 9000;

export interface WorkerOptions {
  init: WorkerInit;
  startupTimeoutMs: number;
  responseTimeoutMs: number;
  /** The thread's V8 heap limit (resourceLimits.maxOldGenerationSizeMb): a handler that outgrows it ends only its worker. */
  maxHeapMb: number;
  /** Label for messages: "model 'x' version '1.0'". */
  label: string;
  /**
   * The spare threads (spare-threads.ts): the worker starts on one with its modules imported when
   * one is ready, else on a new thread; retired with `isRecycled`, it gives its thread back.
   */
  spareThreads?: SpareThreadPool;
}

export interface BatchOutcome {
  jobs: readonly Job[];
  reason: DispatchReason;
  /** Time from the batch's start in the worker to its answer, ms. */
  inferenceMs: number;
  isOk: boolean;
  /** Per-stage times inside the worker, for handlers with separate stages. */
  stages?: HandlerStagesMs;
}

interface Batch {
  id: number;
  jobs: Job[];
  reason: DispatchReason;
  startedAt: number;
}

/**
 * The main-thread side of one worker thread: its lifecycle (start, retire, failure) and the two
 * batches it may hold, one running and at most one prefetched (sent, not started).
 *
 * Events:
 * - 'started' (jobs): a prefetched batch began running (a batch given to an idle worker starts in
 *   `give`, which says so); the worker now wants its next batch (answer with `give` synchronously,
 *   or a pipelined handler's thread is told there is none yet);
 * - 'finished' (outcome): a batch was answered (its jobs are settled);
 * - 'failed' (error, unstarted): the worker crashed, ran out of heap or timed out; the running batch's
 *   jobs are failed with `error`, `unstarted` is the prefetched batch that never began (its owner
 *   puts it back in the queue). Emitted once;
 * - 'prepared': the loading worker's handler can decode before its session exists (Handler.prepare)
 *   and asks for its first batch: answer with `give` synchronously, or the thread is told there is none;
 * - 'returned' (jobs): the first batch given to a loading worker whose load then failed, never begun
 *   (its owner puts it back in the queue);
 * - 'exit': the thread has really ended (a timed-out native run() keeps the thread, and its cores,
 *   busy until it returns, even after terminate()).
 */
export class Worker extends EventEmitter<{
  started: [readonly Job[]];
  finished: [BatchOutcome];
  failed: [MarinaError, Job[]];
  prepared: [];
  returned: [Job[]];
  exit: [];
}> {
  readonly id = String(nextWorkerId++);
  readonly startTime = new Date();
  readonly intraOpNumThreads: number;
  /** Serves a shadow version at the lowest CPU priority (WorkerInit.isBackground); fixed for the thread's life. */
  readonly isBackground: boolean;
  #state: WorkerState = 'LOADING';
  #thread: NodeWorker | undefined;
  #heapBytes = 0;
  #warmupMs: number | undefined;
  #running: Batch | undefined;
  #prefetched: Batch | undefined;
  /** The thread reported a start and waits for the answer (a batch or none). */
  #isReplyDue = false;
  /** The loading thread's handler is prepared and waits for its first batch (see 'prepared'). */
  #isAskingFirst = false;
  /** Whether the thread reports each batch's start (a pipelined handler); otherwise a prefetched batch starts when the one before it is answered. */
  #reportsStarts = true;
  #isRetiring = false;
  /** Retired to make room for a load: its thread, once idle, leaves its model and becomes a spare (see retire). */
  #isRecycling = false;
  /** The thread's listeners, removed when the thread is handed over as a spare. */
  #detach: (() => void) | undefined;
  #timer: ReturnType<typeof setTimeout> | undefined;
  #recycleTimer: ReturnType<typeof setTimeout> | undefined;
  /** terminate() was called: the thread is ending and is never handed on. */
  #isTerminated = false;
  /** Whether the thread is inside onnxruntime (native-calls.ts): #terminate reads it. */
  readonly #nativeCalls = newNativeCallGauge();
  #nextBatchId = 1;
  #hasExited = false;
  readonly #options: WorkerOptions;
  /** The request headers the thread's handler reads (a built-in handler's list); undefined: every header (a custom handler). */
  readonly #requestHeaders: readonly string[] | undefined;
  /** A built-in handler's thread, not a shadow's: it ran no archive's code, so another model may use it after this one. */
  readonly #isRecyclable: boolean;
  #wasRecycled = false;
  readonly exited: Promise<void>;
  #markExited!: () => void;

  constructor(options: WorkerOptions) {
    super();
    this.#options = options;
    this.intraOpNumThreads = options.init.intraOpNumThreads;
    this.isBackground = options.init.isBackground;
    this.#requestHeaders = getBuiltinHandler(options.init.handler)?.requestHeaders;
    this.#isRecyclable = getBuiltinHandler(options.init.handler) !== undefined && !options.init.isBackground;
    this.exited = new Promise((resolve) => (this.#markExited = resolve));
  }

  get state(): WorkerState {
    return this.#state;
  }

  get hasExited(): boolean {
    return this.#hasExited;
  }

  /** The thread's id (worker_threads' threadId) once started: the same for a worker given a recycled thread. */
  get threadId(): number | undefined {
    return this.#thread?.threadId;
  }

  /** Whether the thread is inside an onnxruntime call now (session creation or a run). */
  get isInNativeCall(): boolean {
    return hasNativeCall(this.#nativeCalls);
  }

  /** The thread was handed to the spare threads when this worker ended, rather than terminated. */
  get wasRecycled(): boolean {
    return this.#wasRecycled;
  }

  /** Worker heap + external memory, bytes, as last reported by the thread. */
  get memoryBytes(): number {
    return this.#heapBytes;
  }

  /** Wall time of the warm-up before this worker became ready, ms; undefined when the model has no `warmup:`. */
  get warmupMs(): number | undefined {
    return this.#warmupMs;
  }

  get isAlive(): boolean {
    return this.#state === 'READY' || this.#state === 'BUSY';
  }

  /** Running nothing and holding no batch. */
  get isIdle(): boolean {
    return this.isAlive && this.#running === undefined && this.#prefetched === undefined;
  }

  /** May be given a batch now: alive (or loading and asking for its first batch), not retiring, no prefetched batch. */
  get wantsBatch(): boolean {
    return (this.isAlive || this.#isAskingFirst) && !this.#isRetiring && this.#prefetched === undefined;
  }

  get isRunning(): boolean {
    return this.#running !== undefined;
  }

  /**
   * Starts the thread and resolves once the handler has initialised (model loaded).
   * @throws MARINA_ERR_WORKER_START_FAILED with the handler's error, or MARINA_ERR_WORKER_STARTUP_TIMEOUT.
   */
  async start(): Promise<void> {
    const { label, startupTimeoutMs, maxHeapMb } = this.#options;
    const init: WorkerInit = { ...this.#options.init, nativeCalls: this.#nativeCalls };
    const spare = await this.#options.spareThreads?.take(maxHeapMb);
    return new Promise<void>((resolve, reject) => {
      defaultOrtTelemetryOff();
      const thread =
        spare ??
        new NodeWorker(bootstrapUrl, {
          workerData: init,
          stdout: false,
          stderr: false,
          resourceLimits: { maxOldGenerationSizeMb: maxHeapMb },
        });
      if (spare) spare.postMessage({ type: 'assign', init } satisfies AssignMessage);
      this.#thread = thread;
      let isStarting = true;
      const timer = setTimeout(() => {
        if (!isStarting) return;
        isStarting = false;
        const error = createServeError.MARINA_ERR_WORKER_STARTUP_TIMEOUT(
          `worker ${this.id} of ${label} did not load the model within startupTimeout (${startupTimeoutMs / 1000} s); raise startupTimeout for large models`,
        );
        this.#fail(error);
        reject(error);
      }, startupTimeoutMs);
      const onMessage = (message: FromWorker) => {
        if (message.type === 'progress') {
          this.#onProgress(message);
        } else if (message.type === 'prepared') {
          this.#onPrepared(isStarting);
        } else if (message.type === 'recycled') {
          this.#onRecycled();
        } else if (message.type === 'ready') {
          this.#heapBytes = message.heapBytes;
          this.#reportsStarts = message.reportsStarts;
          if (message.schedulingProblem !== undefined)
            (message.isBackgroundProblem ? warnBackgroundOnce : warnSchedulingOnce)(message.schedulingProblem);
          if (message.warmup) {
            const w = message.warmup;
            this.#warmupMs = w.ms;
            process.stderr.write(
              `${new Date().toISOString()} INFO worker ${this.id} of ${label} warmed up in ${w.ms.toFixed(0)} ms: ${w.runs} run(s) at batch size(s) ${w.batchSizes.join(', ')} with ${w.input}\n`,
            );
          }
          if (!isStarting) return;
          isStarting = false;
          clearTimeout(timer);
          // With a first batch given while it loaded, the thread starts it now (it reports the start).
          this.#state = this.#prefetched ? 'BUSY' : 'READY';
          resolve();
          // Retired while loading (scaled down, closed): it leaves without taking work.
          this.#endIfRetired();
        } else {
          if (!isStarting) return;
          isStarting = false;
          clearTimeout(timer);
          const { code, message: text, stack } = message.error;
          const wrapped =
            code === 'MARINA_ERR_WORKER_START_FAILED'
              ? createServeError.MARINA_ERR_WORKER_START_FAILED(text, { details: { stack } })
              : createServeError.MARINA_ERR_WORKER_START_FAILED(`${text} [${code}]`, {
                  details: { handlerCode: code, stack },
                });
          this.#fail(wrapped);
          reject(wrapped);
        }
      };
      const onError = (error: Error & { code?: string }) => {
        const isOutOfMemory = error.code === 'ERR_WORKER_OUT_OF_MEMORY';
        const died = isOutOfMemory
          ? createServeError.MARINA_ERR_WORKER_OUT_OF_MEMORY(
              `worker ${this.id} of ${label} ran out of JavaScript heap (limit ${maxHeapMb} MB, maxWorkerHeapMb) and was replaced; only its batch failed. Send smaller inputs, or raise maxWorkerHeapMb in model-config.yaml`,
              { cause: error },
            )
          : createServeError.MARINA_ERR_WORKER_DIED(`worker ${this.id} of ${label} crashed: ${error.message}`, {
              cause: error,
            });
        if (isStarting) {
          isStarting = false;
          clearTimeout(timer);
          reject(
            createServeError.MARINA_ERR_WORKER_START_FAILED(
              `worker ${this.id} of ${label} crashed while loading: ${error.message}`,
              { cause: error },
            ),
          );
        }
        this.#fail(died);
      };
      const onExit = (code: number) => {
        this.#hasExited = true;
        if (isStarting) {
          isStarting = false;
          clearTimeout(timer);
          reject(
            createServeError.MARINA_ERR_WORKER_START_FAILED(
              `worker ${this.id} of ${label} exited with code ${code} while loading`,
            ),
          );
        }
        this.#fail(
          createServeError.MARINA_ERR_WORKER_DIED(
            `Worker died. Worker ${this.id} of ${label} exited unexpectedly with code ${code} while running this request; it is being replaced`,
          ),
        );
        this.#markExited();
        this.emit('exit');
      };
      thread.on('message', onMessage);
      thread.on('error', onError);
      thread.on('exit', onExit);
      this.#detach = () => {
        clearTimeout(timer);
        thread.off('message', onMessage);
        thread.off('error', onError);
        thread.off('exit', onExit);
      };
    });
  }

  /**
   * Sends the worker a batch taken from the queue (it must want one: see `wantsBatch`). Given to
   * an idle worker, the batch is running from now on (the thread starts it as it arrives); returns
   * true then, and the caller counts it as started ('started' is not emitted). Otherwise it is the
   * prefetched batch until it starts: when the batch before it is answered, or, for a pipelined
   * handler, when the thread reports the start.
   */
  give(jobs: Job[], reason: DispatchReason): boolean {
    const batch: Batch = { id: this.#nextBatchId++, jobs, reason, startedAt: 0 };
    // A loading worker's first batch waits, prefetched, until the worker is ready.
    const isFirst = this.#isAskingFirst;
    this.#isAskingFirst = false;
    const startsAtOnce = !isFirst && this.#running === undefined && this.#prefetched === undefined;
    if (!isFirst) this.#state = 'BUSY';
    this.#isReplyDue = false;
    const n = jobs.length;
    const rows: Array<Record<string, unknown>> = new Array(n);
    const requestIds: string[] = new Array(n);
    const wanted = this.#requestHeaders;
    let headers: BatchPayload['headers'];
    let decodings: BatchPayload['decodings'];
    for (let i = 0; i < n; i++) {
      const job = jobs[i]!;
      const row: Record<string, unknown> = {};
      for (const key in job.input)
        row[key] = prepareValue(job.input[key], key === 'body' ? job.bodyDecoding : undefined);
      rows[i] = row;
      requestIds[i] = job.requestId;
      const picked = wanted === undefined ? job.headers : pickHeaders(job.headers, wanted);
      if (picked !== undefined) {
        headers ??= new Array(n).fill(undefined);
        headers[i] = picked;
      }
      if (job.bodyDecoding !== undefined) {
        decodings ??= new Array(n).fill(undefined);
        decodings[i] = job.bodyDecoding;
      }
    }
    const payload: BatchPayload = { batchId: batch.id, rows, requestIds };
    if (headers) payload.headers = headers;
    if (decodings) payload.decodings = decodings;
    this.#post({ type: 'batch', batch: payload });
    if (startsAtOnce) this.#start(batch);
    else this.#prefetched = batch;
    return startsAtOnce;
  }

  /**
   * Stops taking batches; once the running and prefetched batches are answered the thread is
   * terminated (never awaited: a native run() that does not return cannot hold anyone up), or,
   * `isRecycled` (an eviction that makes room for a load), handed to the spare threads once it has
   * left its model, when the worker's thread may be (see #isRecyclable) and they want one. A batch that runs past responseTimeout fails as usual, which ends the worker too.
   */
  retire(options: { graceMs?: number; isRecycled?: boolean } = {}): void {
    if (this.#isRetiring) return;
    this.#isRetiring = true;
    this.#isRecycling = options.isRecycled === true;
    this.#endIfRetired();
    const { graceMs } = options;
    if (graceMs === undefined || this.#state === 'UNLOADING' || this.#state === 'FAILED') return;
    // Past the grace period a batch still running (a native run() that does not return) is
    // answered 503 and the thread abandoned: whoever unloads never waits on native code.
    const grace = setTimeout(() => {
      if (this.#state === 'UNLOADING' || this.#state === 'FAILED') return;
      this.abandon(
        createServeError.MARINA_ERR_MODEL_UNLOADING(
          `${this.#options.label}: worker ${this.id} was stopped (unloaded, evicted, scaled down or the server stopped) while this request ran, and the run did not finish within unload_grace_seconds (${graceMs / 1000} s); its thread was abandoned. Retry the request`,
        ),
      );
    }, graceMs);
    grace.unref?.();
    this.exited.then(() => clearTimeout(grace));
  }

  /**
   * Stops the worker now: its running batch is answered with `error`, a prefetched one is handed
   * back ('failed'), and the thread is terminated without waiting (a native run() keeps it, and
   * its memory, until the run returns; 'exit' then).
   */
  abandon(error: MarinaError): void {
    if (this.#state === 'FAILED' || this.#state === 'UNLOADING') return;
    this.#isRetiring = true;
    this.#fail(error);
  }

  #post(message: ToWorker): void {
    if (!this.#thread || this.#hasExited) return;
    this.#thread.postMessage(message);
  }

  #onProgress(message: Extract<FromWorker, { type: 'progress' }>): void {
    this.#heapBytes = message.heapBytes;
    for (const result of message.results) this.#onResult(result);
    if (message.startedBatchId !== undefined) this.#onStarted(message.startedBatchId);
    this.#endIfRetired();
  }

  /**
   * The loading thread's handler is prepared: it may take its first batch now, decoded while its
   * session is created. Whoever listens gives it one synchronously (a request waiting for this
   * load); otherwise it is told there is none, and gets its batches once ready.
   */
  #onPrepared(isStarting: boolean): void {
    if (isStarting && this.#state === 'LOADING' && !this.#isRetiring) {
      this.#isAskingFirst = true;
      this.emit('prepared');
    }
    if (this.#prefetched === undefined) {
      this.#isAskingFirst = false;
      this.#post({ type: 'batch', batch: undefined });
    }
  }

  /** A pipelined handler's thread began a batch and waits for the answer: its next batch, or none. */
  #onStarted(batchId: number): void {
    const batch = this.#prefetched;
    if (!batch || batch.id !== batchId || !this.isAlive) {
      // Never leave the thread waiting for an answer to a start report.
      this.#post({ type: 'batch', batch: undefined });
      return;
    }
    this.#prefetched = undefined;
    this.#start(batch);
    this.#isReplyDue = true;
    this.emit('started', batch.jobs);
    if (this.#isReplyDue) {
      this.#isReplyDue = false;
      this.#post({ type: 'batch', batch: undefined });
    }
  }

  #start(batch: Batch): void {
    this.#running = batch;
    batch.startedAt = performance.now();
    const size = batch.jobs.length;
    for (const job of batch.jobs) {
      const t = job.timings;
      t.dispatchedAt = batch.startedAt;
      t.workerId = this.id;
      t.batchSize = size;
    }
    this.#armTimer(batch);
  }

  #armTimer(batch: Batch): void {
    clearTimeout(this.#timer);
    const { label, responseTimeoutMs } = this.#options;
    // 504 rather than TorchServe's 500 "Worker died.": the request did not crash anything, it
    // ran out of time; a gateway-timeout status tells clients and load balancers exactly that.
    this.#timer = setTimeout(() => {
      this.#fail(
        createServeError.MARINA_ERR_RESPONSE_TIMEOUT(
          `${label} did not answer within responseTimeout (${responseTimeoutMs / 1000} s) for a batch of ${batch.jobs.length}; worker ${this.id} was stopped and is being replaced. Raise responseTimeout, or make the model faster (fewer workers with more threads, smaller batches)`,
          { details: { responseTimeoutMs, batchSize: batch.jobs.length } },
        ),
      );
    }, responseTimeoutMs);
  }

  #onResult(result: BatchResult): void {
    const batch = this.#running;
    if (!batch || batch.id !== result.batchId) return;
    this.#running = undefined;
    clearTimeout(this.#timer);
    this.#timer = undefined;
    if (this.isAlive && this.#prefetched === undefined) this.#state = 'READY';
    const inferenceMs = performance.now() - batch.startedAt;
    this.#settle(batch, result, inferenceMs);
    // A thread that does not report starts runs its prefetched batch right after this one, unless
    // settling this one already gave the idle worker a batch that started at once (a model with
    // priority levels prefetches only its highest level, so the worker may finish with nothing
    // prefetched, be given a lower-level batch, and then a higher one behind it): the thread runs
    // batches in the order it got them, so the prefetched one starts when that one is answered.
    const next = this.#prefetched;
    if (next && this.#running === undefined && !this.#reportsStarts && this.isAlive) {
      this.#prefetched = undefined;
      this.#start(next);
      this.emit('started', next.jobs);
    }
  }

  /** Answers a finished batch's jobs. */
  #settle(batch: Batch, result: BatchResult, inferenceMs: number): void {
    if (!result.ok) {
      const error = new MarinaError(result.error.code, result.error.message, result.error.statusCode);
      for (const job of batch.jobs) job.reject(error);
      this.emit('finished', { jobs: batch.jobs, reason: batch.reason, inferenceMs, isOk: false });
      return;
    }
    const { items } = result;
    for (let i = 0; i < items.length; i++) {
      const item = items[i]!;
      const job = batch.jobs[i]!;
      if (result.stages) job.timings.stages = result.stages;
      job.timings.handlerMs = result.handlerMs;
      if (item.ok) {
        const { body } = item;
        const headers = item.headers ?? {};
        job.resolve(
          typeof body === 'string'
            ? new TextJobResult(item.statusCode, body, item.contentType, headers)
            : {
                statusCode: item.statusCode,
                body: Buffer.from(body.buffer, body.byteOffset, body.byteLength),
                contentType: item.contentType,
                headers,
              },
        );
      } else {
        job.reject(
          new MarinaError(item.error.code, item.error.message, item.error.statusCode, {
            details: item.headers ? { headers: item.headers } : undefined,
          }),
        );
      }
    }
    this.emit('finished', {
      jobs: batch.jobs,
      reason: batch.reason,
      inferenceMs,
      isOk: true,
      ...(result.stages ? { stages: result.stages } : {}),
    });
  }

  #endIfRetired(): void {
    if (!this.#isRetiring || !this.isAlive || this.#running !== undefined || this.#prefetched !== undefined) return;
    this.#state = 'UNLOADING';
    if (this.#isRecycling && this.#isRecyclable && this.#options.spareThreads?.wants(this.#options.maxHeapMb)) {
      this.#post({ type: 'recycle' });
      // A thread that does not answer (it never should: it only releases its sessions) is ended.
      this.#recycleTimer = setTimeout(() => this.#terminate(), RECYCLE_TIMEOUT_MS);
      this.#recycleTimer.unref?.();
      return;
    }
    this.#terminate();
  }

  /** The thread left its model (`recycle`): it is handed to the spare threads, and this worker has ended. */
  #onRecycled(): void {
    const thread = this.#thread;
    // Too late (the recycle timed out and the thread is being terminated): it ends as any other.
    if (!thread || this.#hasExited || this.#state !== 'UNLOADING' || this.#isTerminated) return;
    clearTimeout(this.#recycleTimer);
    this.#detach?.();
    this.#wasRecycled = this.#options.spareThreads?.offer(thread, this.#options.maxHeapMb) === true;
    // Not taken (the spares are full): the thread ends, and this worker with it.
    const ended = this.#wasRecycled
      ? Promise.resolve()
      : thread.terminate().then(
          () => undefined,
          () => undefined,
        );
    void ended.then(() => {
      this.#hasExited = true;
      this.#markExited();
      this.emit('exit');
    });
  }

  #terminate(): void {
    this.#isTerminated = true;
    if (!this.#thread || this.#hasExited) return;
    // terminate() cannot interrupt a native run(), and a run that returns into a terminated thread
    // aborts the process (native-calls.ts): with a call outstanding the thread is asked to exit,
    // which it does when the call returns ('exit' then).
    if (mayTerminateNow(this.#nativeCalls)) void this.#thread.terminate().catch(() => undefined);
    else this.#post({ type: 'exit' });
  }

  #fail(error: MarinaError): void {
    if (this.#state === 'FAILED' || this.#state === 'UNLOADING') return;
    const wasAlive = this.isAlive;
    this.#state = 'FAILED';
    this.#isAskingFirst = false;
    clearTimeout(this.#timer);
    this.#timer = undefined;
    const running = this.#running;
    const unstarted = this.#prefetched?.jobs ?? [];
    this.#running = undefined;
    this.#prefetched = undefined;
    this.#terminate();
    if (running) {
      for (const job of running.jobs) job.reject(error);
      this.emit('finished', {
        jobs: running.jobs,
        reason: running.reason,
        inferenceMs: performance.now() - running.startedAt,
        isOk: false,
      });
    }
    if (wasAlive) this.emit('failed', error, unstarted);
    // A first batch given while it loaded: the load failed before it began.
    else if (unstarted.length > 0) this.emit('returned', unstarted);
  }
}

/** How long a thread told to leave its model may take to say it has (it releases its sessions: milliseconds). */
const RECYCLE_TIMEOUT_MS = 5000;

/** A body up to this size that the worker decodes as JSON or text goes over as a string (see prepareValue). */
const TEXT_BODY_BYTES = 64 * 1024;

/**
 * How one input value crosses to the thread. A small body the worker would decode as JSON or
 * text anyway goes as its UTF-8 string when it is valid UTF-8 (a string is cloned as one copy;
 * an ArrayBuffer costs the HTTP thread about a microsecond more each, which is most of a tiny
 * model's hand-off). Other bytes go as their own bytes: a view into a bigger buffer (small
 * Buffers share an 8 KiB pool slab) is copied first, as the structured clone would copy the
 * whole slab. Never transferred: a prefetched batch whose worker dies before starting it goes
 * back to the queue and must still hold its inputs (the copy costs microseconds for an image body).
 */
function prepareValue(value: unknown, decoding: BodyDecoding): unknown {
  if (!(value instanceof Uint8Array)) return value;
  if (decoding !== undefined && value.byteLength <= TEXT_BODY_BYTES && isUtf8(value))
    return Buffer.from(value.buffer, value.byteOffset, value.byteLength).toString('utf8');
  return value.byteOffset !== 0 || value.byteLength !== value.buffer.byteLength ? new Uint8Array(value) : value;
}

/** The headers a built-in handler reads, or undefined when the request has none of them. */
function pickHeaders(headers: Record<string, string>, names: readonly string[]): Record<string, string> | undefined {
  let picked: Record<string, string> | undefined;
  for (const name of names) {
    const value = headers[name];
    if (value === undefined) continue;
    picked ??= {};
    picked[name] = value;
  }
  return picked;
}
