/**
 * The worker thread: owns one handler and its onnxruntime-node session, runs one batch at a
 * time. `InferenceSession.run` blocks this thread, never the HTTP thread.
 */
import { sep } from 'node:path';
import { parentPort } from 'node:worker_threads';
import { getHeapStatistics } from 'node:v8';
import * as ort from 'onnxruntime-node';
import { isMarinaError } from '@marina/errors';
import {
  forgetOnnxGraphs,
  getBuiltinHandler,
  loadCustomHandler,
  rememberOnnxGraph,
  sessionSignature,
  type Handler,
  type HandlerContext,
  type ModelSignature,
  type RequestRow,
  warmUpImageDecoding,
} from '@marina/handlers';
import {
  createSession,
  optimizedModelCacheDir,
  readOrtModelSettings,
  resolveSessionModel,
  type SessionModel,
} from '../backend/ort-session.ts';
import { type SchedBatchOutcome, useSchedBatch, useSchedIdle } from './use-sched-batch.ts';
import { guardOnnxRuntimeCalls, useNativeCallGauge } from './native-calls.ts';
import { toJson } from './to-json.ts';
import { readWarmupSettings, warmUp, type WarmupReport } from './warm-up.ts';
import { keepSchedBatch, receiveAssignment, takeEarlySchedBatch, workerInit } from './worker-init.ts';
import type {
  BatchPayload,
  BatchResult,
  BodyDecoding,
  ErrorPayload,
  FromWorker,
  HandlerStagesMs,
  ItemResult,
  ToWorker,
  WorkerInit,
} from './worker-protocol.ts';

const port = parentPort!;
guardOnnxRuntimeCalls(ort);
// Stopped while an onnxruntime call was outstanding (native-calls.ts): the call has returned when
// this runs, whatever the thread was doing (loading, serving, waiting as a spare).
port.on('message', (message: ToWorker) => {
  if (message?.type === 'exit') process.exit(0);
});

let heapBytesCached = 0;
let heapBytesAt = -Infinity;

/** Heap + external bytes for describe's memoryUsage; re-read at most every 250 ms (getHeapStatistics is not free, and batches of a tiny model finish every few µs). */
function heapBytes(): number {
  const now = performance.now();
  if (now - heapBytesAt >= 250) {
    const h = getHeapStatistics();
    heapBytesCached = h.used_heap_size + h.external_memory;
    heapBytesAt = now;
  }
  return heapBytesCached;
}

function toPayload(error: unknown, fallbackCode: string, fallbackStatus: number, prefix = ''): ErrorPayload {
  if (isMarinaError(error))
    return { code: error.code, message: prefix + error.message, statusCode: error.statusCode, stack: error.stack };
  const e = error instanceof Error ? error : new Error(String(error));
  return { code: fallbackCode, message: prefix + e.message, statusCode: fallbackStatus, stack: e.stack };
}

function post(message: FromWorker): void {
  port.postMessage(message);
}

/**
 * A load failure as clients may read it (describe, a request's hint): onnxruntime's messages name
 * the file they read, a path on the server (the archive's extracted folder, the optimised-copy
 * cache), which no answer may quote. The path inside those folders stays: it says which file.
 */
function withoutServerPaths(payload: ErrorPayload): ErrorPayload {
  let message = payload.message;
  for (const [dir, name] of [
    [init.modelDir, 'the archive'],
    [optimizedModelCacheDir(), 'the optimised-copy cache'],
  ] as const) {
    if (!dir) continue;
    message = message.split(`${dir}${sep}`).join(`(${name}) `).split(dir).join(`(${name})`);
  }
  return { ...payload, message };
}

/** Structured-clone turns Buffers into Uint8Arrays; handlers expect Buffers as in TorchServe (bytes). */
function toBuffer(v: unknown): unknown {
  return v instanceof Uint8Array && !Buffer.isBuffer(v) ? Buffer.from(v.buffer, v.byteOffset, v.byteLength) : v;
}

/**
 * TorchServe's decode_input_request for a raw body: JSON parsed (bytes kept when it does not
 * parse), text/* as a string. A small body comes already as its text (valid UTF-8, so its bytes
 * are exactly the text's encoding).
 */
function decodeBody(body: unknown, decoding: BodyDecoding): unknown {
  if (decoding === undefined) return body;
  const text = typeof body === 'string' ? body : Buffer.isBuffer(body) ? body.toString('utf8') : undefined;
  if (text === undefined || decoding === 'text') return text ?? body;
  try {
    return JSON.parse(text);
  } catch {
    return Buffer.isBuffer(body) ? body : Buffer.from(text, 'utf8');
  }
}

function reviveRow(row: Record<string, unknown>, decoding: BodyDecoding): RequestRow {
  const out: RequestRow = {};
  for (const k in row) out[k] = toBuffer(row[k]);
  if (decoding !== undefined && 'body' in out) out.body = decodeBody(out.body, decoding);
  return out;
}

/**
 * A handler's bytes as they should cross to the main thread: a view into a bigger buffer (a
 * small Buffer lives in an 8 KiB pool slab) is copied first, as the structured clone would copy
 * the whole slab. Never transferred: the handler may keep the buffer (a cached answer).
 */
function ownBytes(bytes: Uint8Array): Uint8Array {
  return bytes.byteOffset === 0 && bytes.byteLength === bytes.buffer.byteLength ? bytes : new Uint8Array(bytes);
}

let handler: Handler;

/**
 * The model this thread serves, and what follows from it: set when runWorker starts, not when this
 * module is imported, so that a spare thread (spare-threads.ts) imports it while it waits for a model.
 */
let init: WorkerInit;
let baseContext: ReturnType<typeof createBaseContext>;

function createSessionSettings(init: WorkerInit) {
  return {
    threading: {
      intraOpNumThreads: init.intraOpNumThreads,
      allowSpinning: init.allowSpinningDefault,
      forceSpinningStop: init.forceSpinningStopDefault,
    },
    ort: readOrtModelSettings(init.modelYamlConfig),
    cacheOptimizedModelDefault: init.cacheOptimizedModelDefault,
  };
}

/** What the handler sets for each row of one batch through its context. */
interface BatchState {
  requestIds: string[];
  headers: Array<Record<string, string> | undefined> | undefined;
  statuses: Array<{ code: number; phrase?: string } | undefined>;
  contentTypes: Array<string | undefined>;
  responseHeaders: Array<Record<string, string> | undefined>;
}

function createBaseContext(init: WorkerInit) {
  const sessionSettings = createSessionSettings(init);
  // A built-in handler always opens the archive's model: the file its session is made from (the
  // optimised copy, checked on disk: a few file-system calls) is found while the handler is
  // created and prepared. A custom handler may open another file, or none: nothing is started for it.
  let early: Promise<SessionModel> | undefined =
    getBuiltinHandler(init.handler) && init.serializedFilePath
      ? resolveSessionModel(init.serializedFilePath, sessionSettings)
      : undefined;
  // Its failure is the session's, reported when the handler asks for it.
  early?.catch(() => undefined);
  return {
    modelName: init.modelName,
    modelVersion: init.modelVersion,
    manifest: init.manifest,
    modelDir: init.modelDir,
    serializedFilePath: init.serializedFilePath,
    batchSize: init.batchSize,
    modelYamlConfig: init.modelYamlConfig,
    systemProperties: {
      model_dir: init.modelDir,
      gpu_id: null,
      batch_size: init.batchSize,
      server_name: 'MMS',
      server_version: init.serverVersion,
      limit_max_image_pixels: init.limitMaxImagePixels,
    },
    intraOpNumThreads: init.intraOpNumThreads,
    maxResponseBytes: init.maxResponseBytes,
    async createSession(modelPath?: string) {
      const path = modelPath ?? init.serializedFilePath;
      if (!path)
        throw new Error(
          `model '${init.modelName}' has no serializedFile in its manifest, so createSession() needs a path`,
        );
      const resolved = path === init.serializedFilePath ? early : undefined;
      early = undefined;
      const session = await createSession(path, sessionSettings, resolved);
      sessions.push(session);
      // Warm-up makes synthetic inputs from the model the handler loaded first.
      firstSignature ??= sessionSignature(session);
      return session;
    },
  };
}

let firstSignature: ModelSignature | undefined;

/** The sessions this thread's handler created through its context: released when the thread leaves its model (recycle). */
const sessions: Array<Awaited<ReturnType<typeof createSession>>> = [];

/**
 * A context per batch: the prefetched batch's preprocess runs while this one is inferred, so per-row statuses and headers cannot live in one shared object.
 */
function createBatchContext(batch: BatchState): HandlerContext {
  // The fields one by one rather than a spread of baseContext: one object shape for every batch.
  return {
    modelName: baseContext.modelName,
    modelVersion: baseContext.modelVersion,
    manifest: baseContext.manifest,
    modelDir: baseContext.modelDir,
    serializedFilePath: baseContext.serializedFilePath,
    batchSize: baseContext.batchSize,
    modelYamlConfig: baseContext.modelYamlConfig,
    systemProperties: baseContext.systemProperties,
    intraOpNumThreads: baseContext.intraOpNumThreads,
    maxResponseBytes: baseContext.maxResponseBytes,
    createSession: baseContext.createSession,
    requestIds: batch.requestIds,
    getRequestHeader(index: number, name: string) {
      return batch.headers?.[index]?.[name.toLowerCase()];
    },
    setResponseStatus(code: number, phrase?: string, index?: number) {
      if (index === undefined) batch.statuses = batch.statuses.map(() => ({ code, phrase }));
      else batch.statuses[index] = { code, phrase };
    },
    setResponseContentType(index: number, contentType: string) {
      batch.contentTypes[index] = contentType;
    },
    setResponseHeader(index: number, name: string, value: string) {
      const headers = batch.responseHeaders[index] ?? {};
      batch.responseHeaders[index] = headers;
      headers[name] = value;
    },
  };
}

function serialise(batch: BatchState, item: unknown, index: number): ItemResult {
  const headers = batch.responseHeaders[index];
  if (item instanceof Error) {
    return { ok: false, error: toPayload(item, 'MARINA_ERR_HANDLER_FAILED', 503, 'Prediction failed: '), headers };
  }
  const status = batch.statuses[index];
  let contentType = batch.contentTypes[index];
  let body: Uint8Array | string;
  if (Buffer.isBuffer(item) || item instanceof Uint8Array) body = ownBytes(item);
  else if (typeof item === 'string') body = item;
  else {
    let json: string | undefined;
    try {
      json = toJson(item);
    } catch (error) {
      return {
        ok: false,
        error: {
          code: 'MARINA_ERR_HANDLER_OUTPUT_INVALID',
          message: `Unsupported model output data type: item ${index} cannot be serialised to JSON (${(error as Error).message})`,
          statusCode: 503,
        },
        headers,
      };
    }
    body = json ?? 'null';
    contentType ??= 'application/json';
  }
  return headers
    ? { ok: true, statusCode: status?.code ?? 200, body, contentType, headers }
    : { ok: true, statusCode: status?.code ?? 200, body, contentType };
}

/** A received batch; `preprocessed` is started as soon as it arrives when the handler has a separate preprocess. */
interface PendingBatch {
  message: BatchPayload;
  state: BatchState;
  context: HandlerContext;
  rows: RequestRow[];
  /** Settles with the preprocess output (or its error); never rejects. */
  preprocessed?: Promise<{ ok: true; value: unknown } | { ok: false; error: unknown }>;
}

/** Batches received and not started: at most one (the main thread sends one batch ahead). */
const pending: PendingBatch[] = [];
let isLooping = false;
/** Resolves when the main thread answers the last `started` report (with the next batch or with none). */
let onReply: (() => void) | undefined;

function receive(message: BatchPayload): void {
  const n = message.rows.length;
  const state: BatchState = {
    requestIds: message.requestIds,
    headers: message.headers,
    statuses: new Array(n).fill(undefined),
    contentTypes: new Array(n).fill(undefined),
    responseHeaders: new Array(n).fill(undefined),
  };
  const decodings = message.decodings;
  const rows = message.rows.map((row, i) => reviveRow(row, decodings?.[i]));
  const item: PendingBatch = { message, state, context: createBatchContext(state), rows };
  // Start preprocessing at once (image decoding runs on libuv's pool), so it overlaps with the
  // run() of the batch ahead of it, which blocks this thread but not the pool.
  if (isPipelined()) {
    const preprocess = handler.preprocess!.bind(handler);
    item.preprocessed = (async () => preprocess(item.rows, item.context))().then(
      (value) => ({ ok: true as const, value }),
      (error: unknown) => ({ ok: false as const, error }),
    );
  }
  pending.push(item);
}

/** True when the handler decodes in a separate, pipeline-safe preprocess that can overlap the previous batch's run(). */
function isPipelined(): boolean {
  return handler.isPipelineSafe === true && !handler.handle && handler.preprocess !== undefined;
}

/**
 * Runs batches one at a time, in the order they came. A pipelined handler reports each start to
 * the main thread (with the results finished before it, in one message) and waits for the answer,
 * the next batch or none, before running, so the next batch's decoding is under way on libuv's
 * pool while run() blocks this thread. Other handlers report only results, one message per batch.
 */
async function loop(): Promise<void> {
  isLooping = true;
  let results: BatchResult[] = [];
  try {
    while (pending.length > 0) {
      const item = pending.shift()!;
      if (!isPipelined()) {
        // No start report: the main thread starts the prefetched batch when the one before it is
        // answered (the thread runs them in order), so each batch costs one message back.
        port.postMessage({
          type: 'progress',
          results: [await runBatch(item)],
          startedBatchId: undefined,
          heapBytes: heapBytes(),
        } satisfies FromWorker);
        continue;
      }
      const reply = new Promise<void>((resolve) => (onReply = resolve));
      port.postMessage({
        type: 'progress',
        results,
        startedBatchId: item.message.batchId,
        heapBytes: heapBytes(),
      } satisfies FromWorker);
      results = [];
      await reply;
      results.push(await runBatch(item));
    }
  } finally {
    if (results.length > 0)
      port.postMessage({
        type: 'progress',
        results,
        startedBatchId: undefined,
        heapBytes: heapBytes(),
      } satisfies FromWorker);
    isLooping = false;
  }
}

async function runHandler(item: PendingBatch): Promise<{ output: unknown; stages?: HandlerStagesMs }> {
  const { rows, context } = item;
  if (handler.handle) return { output: await handler.handle(rows, context) };
  const started = performance.now();
  let pre: unknown = rows;
  if (item.preprocessed) {
    const settled = await item.preprocessed;
    if (!settled.ok) throw settled.error;
    pre = settled.value;
  } else if (handler.preprocess) {
    pre = await handler.preprocess(rows, context);
  }
  const preprocessed = performance.now();
  const inferred = handler.inference ? await handler.inference(pre, context) : pre;
  const inferenceDone = performance.now();
  const output = handler.postprocess ? await handler.postprocess(inferred, context) : inferred;
  return {
    output,
    stages: {
      preprocessWaitMs: preprocessed - started,
      inferenceMs: inferenceDone - preprocessed,
      postprocessMs: performance.now() - inferenceDone,
    },
  };
}

async function runBatch(item: PendingBatch): Promise<BatchResult> {
  const { message, state } = item;
  const batchId = message.batchId;
  const n = message.rows.length;
  const started = performance.now();
  let output: unknown;
  let stages: HandlerStagesMs | undefined;
  try {
    ({ output, stages } = await runHandler(item));
  } catch (error) {
    return { batchId, ok: false, error: toPayload(error, 'MARINA_ERR_HANDLER_FAILED', 503, 'Prediction failed: ') };
  }
  const handlerMs = performance.now() - started;
  if (!Array.isArray(output)) {
    return {
      batchId,
      ok: false,
      error: {
        code: 'MARINA_ERR_HANDLER_OUTPUT_INVALID',
        statusCode: 503,
        message: `Invalid model predict output: the handler of model '${init.modelName}' returned ${output === null ? 'null' : typeof output} instead of a list with one item per request`,
      },
    };
  }
  if (output.length !== n) {
    return {
      batchId,
      ok: false,
      error: {
        code: 'MARINA_ERR_HANDLER_RESULT_COUNT',
        statusCode: 503,
        message: `number of batch response mismatched: the handler of model '${init.modelName}' returned ${output.length} results for a batch of ${n} requests; return exactly one item per request, in order`,
      },
    };
  }
  return {
    batchId,
    ok: true,
    items: output.map((value, i) => serialise(state, value, i)),
    handlerMs,
    ...(stages ? { stages } : {}),
  };
}

/** One warm-up batch through the handler, the way a real batch runs; answers the handler's raw output. */
async function runWarmupBatch(rows: RequestRow[]): Promise<unknown> {
  const n = rows.length;
  const requestIds = rows.map((_, i) => `warmup-${i}`);
  const state: BatchState = {
    requestIds,
    headers: rows.map(() => ({})),
    statuses: new Array(n).fill(undefined),
    contentTypes: new Array(n).fill(undefined),
    responseHeaders: new Array(n).fill(undefined),
  };
  const message: BatchPayload = { batchId: 0, rows: [], requestIds, headers: state.headers };
  return (await runHandler({ message, state, context: createBatchContext(state), rows })).output;
}

/**
 * Says the handler is prepared and waits for the answer: the first batch (taken from the queue of
 * requests waiting for this load), or none. Nothing else is sent to a loading thread.
 */
function askForFirstBatch(): Promise<BatchPayload | undefined> {
  return new Promise((resolve) => {
    port.once('message', (message: ToWorker) => resolve(message.type === 'batch' ? message.batch : undefined));
    post({ type: 'prepared' });
  });
}

/**
 * What a spare thread (spare-threads.ts) does while it waits for a model, once it said it is
 * ready: decodes a generated image (warmUpImageDecoding), so that a cold request's decode in this
 * thread does not pay for the thread's first decode of that size.
 */
export function warmUpSpareThread(): Promise<void> {
  return warmUpImageDecoding();
}

export interface RunWorkerOptions {
  /**
   * Registers the import hooks an archive's own handler needs (worker-bootstrap.mjs). Called once,
   * just before a custom handler is imported: a built-in handler's worker never starts their thread.
   */
  registerHandlerImportHooks?: () => void;
}

/** The bootstrap's registration of the handler import hooks, until it has run (a recycled thread keeps it). */
let registerHandlerImportHooks: (() => void) | undefined;

/** Loads the handler, warms it up when model-config.yaml asks for it, reports ready, then serves batches until stopped. Called by worker-bootstrap.mjs. */
export async function runWorker(options: RunWorkerOptions = {}): Promise<void> {
  registerHandlerImportHooks ??= options.registerHandlerImportHooks;
  // A spare thread is given its model after it started (spare-threads.ts): read it through worker-init.
  init = workerInit();
  useNativeCallGauge(init.nativeCalls);
  baseContext = createBaseContext(init);
  // The graph the server read at registration: the handler's reads of it need not go to the file.
  if (init.onnxGraph) rememberOnnxGraph(init.onnxGraph);
  // First, so that onnxruntime's pool threads, started with the session, inherit the policy. A
  // shadow version's worker takes only the CPU nothing else wants (its copies yield to live work).
  // A spare thread took SCHED_BATCH while it waited (worker-init.ts); a shadow's worker goes on to SCHED_IDLE.
  const early = takeEarlySchedBatch();
  const scheduling = init.isBackground ? useSchedIdle() : (early ?? useSchedBatch());
  try {
    const builtin = getBuiltinHandler(init.handler);
    if (!builtin && registerHandlerImportHooks) {
      registerHandlerImportHooks();
      registerHandlerImportHooks = () => {};
    }
    handler = builtin ? builtin.create() : await loadCustomHandler({ handler: init.handler, modelDir: init.modelDir });
    const context = createBatchContext({
      requestIds: [],
      headers: [],
      statuses: [],
      contentTypes: [],
      responseHeaders: [],
    });
    // A handler that can decode before its session exists takes its first batch now: a request
    // that waits for this load has its image decoded on libuv's pool while the session is created.
    if ((await handler.prepare?.(context)) === true && isPipelined()) {
      const first = await askForFirstBatch();
      if (first) receive(first);
    }
    await handler.initialize?.(context);
  } catch (error) {
    post({
      type: 'init-failed',
      error: withoutServerPaths(
        toPayload(
          error,
          'MARINA_ERR_WORKER_START_FAILED',
          500,
          `model '${init.modelName}' version '${init.modelVersion}' failed to load: `,
        ),
      ),
    });
    return;
  }
  let warmup: WarmupReport | undefined;
  const warmupSettings = readWarmupSettings(init.modelYamlConfig, init.batchSize);
  if (warmupSettings) {
    try {
      warmup = await warmUp({
        settings: warmupSettings,
        modelDir: init.modelDir,
        handler: init.handler,
        signature: firstSignature,
        runBatch: runWarmupBatch,
      });
    } catch (error) {
      post({
        type: 'init-failed',
        error: withoutServerPaths(
          toPayload(
            error,
            'MARINA_ERR_WARMUP_FAILED',
            500,
            `model '${init.modelName}' version '${init.modelVersion}' failed to warm up: `,
          ),
        ),
      });
      return;
    }
  }
  post({
    type: 'ready',
    heapBytes: heapBytes(),
    reportsStarts: isPipelined(),
    ...(warmup ? { warmup } : {}),
    ...(scheduling.applied || scheduling.isOff
      ? {}
      : { schedulingProblem: scheduling.reason, ...(init.isBackground ? { isBackgroundProblem: true } : {}) }),
  });
  const onMessage = (message: ToWorker) => {
    if (message.type === 'recycle') {
      port.off('message', onMessage);
      void recycle(scheduling);
      return;
    }
    // 'exit' is the thread's own listener's (above).
    if (message.type !== 'batch') return;
    if (message.batch) receive(message.batch);
    const resolve = onReply;
    onReply = undefined;
    resolve?.();
    if (!isLooping && pending.length > 0) void loop();
  };
  port.on('message', onMessage);
  // The first batch, given while the handler was prepared, runs now.
  if (pending.length > 0) void loop();
}

/**
 * Leaves this thread's model and waits for the next, as a spare thread does (spare-threads.ts):
 * the sessions are released (onnxruntime frees their weights and arenas now, not at a later GC),
 * the handler and the model's graph are dropped, and the thread keeps what any model needs (its
 * imported modules, its scheduling policy, its decoder's warm code). A load given it skips a new
 * thread's start: 150–200 ms of CPU on 2 cores, most of a busy cold load. The main thread sends
 * `recycle` only to an idle worker of a built-in handler (no archive's code ran here).
 */
async function recycle(scheduling: SchedBatchOutcome): Promise<void> {
  const held = sessions.splice(0);
  await Promise.allSettled(held.map((session) => session.release()));
  pending.length = 0;
  onReply = undefined;
  firstSignature = undefined;
  forgetOnnxGraphs();
  keepSchedBatch(scheduling);
  const assigned = receiveAssignment();
  post({ type: 'recycled' });
  await assigned;
  await runWorker();
}
