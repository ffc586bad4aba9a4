import type { OnnxGraphFile } from '@marina/handlers';
import type { WarmupReport } from './warm-up.ts';

/**
 * Where a batch's time went inside the worker, ms: `preprocessWaitMs` is how long the worker
 * waited for preprocessing after it picked the batch up (0 when a pipelined preprocess had already
 * finished while the previous batch ran).
 */
export interface HandlerStagesMs {
  preprocessWaitMs: number;
  inferenceMs: number;
  postprocessMs: number;
}

/** Messages between a Worker (main thread) and its worker_thread (worker-main.ts). */

export interface WorkerInit {
  modelName: string;
  modelVersion: string;
  modelDir: string;
  manifest: Record<string, unknown>;
  /** Built-in handler name or custom handler file (`my_handler.js[:fn]`). */
  handler: string;
  serializedFilePath: string | undefined;
  batchSize: number;
  modelYamlConfig: Record<string, unknown>;
  intraOpNumThreads: number;
  /**
   * The worker serves a shadow version: its thread (and onnxruntime's pool it starts) runs at the
   * lowest CPU priority (SCHED_IDLE, else nice 19; see useSchedIdle), so shadow copies take only
   * spare CPU. Fixed for the thread's life: a version that stops being a shadow gets new workers.
   */
  isBackground: boolean;
  /** The server-wide default of `onnxruntime.cacheOptimizedModel` for models that do not set it (undefined: by size). */
  cacheOptimizedModelDefault: boolean | undefined;
  /** The server-wide default of `onnxruntime.allowSpinning` for models that do not set it (undefined: Marina's default). */
  allowSpinningDefault: boolean | undefined;
  /** The server-wide default of `onnxruntime.forceSpinningStop` for models that do not set it (undefined: Marina's default). */
  forceSpinningStopDefault: boolean | undefined;
  limitMaxImagePixels: boolean;
  /** max_response_size, bytes: handlers may refuse a larger answer before building it. */
  maxResponseBytes: number;
  serverVersion: string;
  /** The model's ONNX graph as the server read it at registration, so the handler need not read the file again (undefined: not kept). */
  onnxGraph?: OnnxGraphFile;
  /** Whether the thread is inside onnxruntime, shared with the main thread (native-calls.ts); set by Worker when it starts the thread. */
  nativeCalls?: Int32Array;
}

export interface ErrorPayload {
  code: string;
  message: string;
  statusCode: number;
  stack?: string;
}

/**
 * How the worker turns a row's raw `body` bytes into what the handler sees (TorchServe's
 * decode_input_request), done in the worker so the HTTP thread never parses a handler's JSON:
 * 'json': parsed (the bytes are kept when they do not parse); 'text': a UTF-8 string;
 * undefined: left as it is.
 */
export type BodyDecoding = 'json' | 'text' | undefined;

/** One batch as sent to the worker. */
export interface BatchPayload {
  batchId: number;
  /** A row's `body` with a decoding may come as its UTF-8 text instead of its bytes (a small body). */
  rows: Array<Record<string, unknown>>;
  requestIds: string[];
  /** Per row, the headers its handler may read (a built-in handler's few, every header for a custom one); absent when no row has any. */
  headers?: Array<Record<string, string> | undefined>;
  /** Per row; absent when no row needs decoding. */
  decodings?: BodyDecoding[];
}

/**
 * The main thread sends a worker at most one batch it has not started. Only a pipelined handler's
 * thread reports starts (`reportsStarts` in its ready message), each awaiting a reply (it holds
 * run() until its next batch is known), answered by exactly one `batch`
 * message: the worker's next batch, or `batch: undefined` when none is ready yet (a batch formed
 * later comes in a message of its own). Other threads report only results, and the main thread
 * counts a batch as started when it is given to an idle worker, or when the batch before it is
 * answered (the thread runs its batches in order).
 */
/**
 * `recycle`: the worker is idle and leaves its model (an eviction that makes room for a load): the
 * thread releases its sessions and handler and becomes a spare thread again (spare-threads.ts),
 * answering `recycled`. Sent only to a built-in handler's thread, which ran no archive's code.
 */
export type ToWorker =
  | { type: 'batch'; batch: BatchPayload | undefined }
  | { type: 'recycle' }
  /** Stopped while an onnxruntime call was outstanding: end the thread once it returns (native-calls.ts). */
  | { type: 'exit' };

/** A serialised item: `body` is bytes, or text (JSON the worker serialised, a string the handler returned), sent as a string because a small Buffer would drag its whole 8 KiB pool slab through the structured clone; `headers` only when the handler set some. */
export type ItemResult =
  | {
      ok: true;
      statusCode: number;
      body: Uint8Array | string;
      contentType: string | undefined;
      headers?: Record<string, string>;
    }
  | { ok: false; error: ErrorPayload; headers?: Record<string, string> };

export type BatchResult =
  | { batchId: number; ok: true; items: ItemResult[]; handlerMs: number; stages?: HandlerStagesMs }
  | { batchId: number; ok: false; error: ErrorPayload };

/**
 * `progress` carries the results finished since the last report and, when the worker has just
 * begun running its next batch, that batch's id: one message per batch under load.
 */
export type FromWorker =
  /** `schedulingProblem`: why the thread could not be put under SCHED_BATCH, or a shadow's under SCHED_IDLE or nice 19 (see use-sched-batch.ts); absent when it was, or when that is off. */
  | {
      type: 'ready';
      heapBytes: number;
      warmup?: WarmupReport;
      reportsStarts: boolean;
      schedulingProblem?: string;
      /** The problem was with the background priority of a shadow's worker (useSchedIdle), not SCHED_BATCH. */
      isBackgroundProblem?: true;
    }
  /**
   * The handler is prepared (Handler.prepare) and its session not created yet: the main thread
   * answers with one `batch` message, the first batch (it starts once the worker is ready) or none.
   */
  | { type: 'prepared' }
  | { type: 'init-failed'; error: ErrorPayload }
  /** The thread released its model after `recycle` and waits for an `assign`, like a spare that is ready. */
  | { type: 'recycled' }
  | { type: 'progress'; results: BatchResult[]; startedBatchId: number | undefined; heapBytes: number };
