import type { HandlerStagesMs } from '../registry/model-registry-api.ts';
import type { WarmupReport } from './warm-up.ts';

export type { HandlerStagesMs };

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
  isOversubscribed: boolean;
  limitMaxImagePixels: boolean;
  serverVersion: string;
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
  rows: Array<Record<string, unknown>>;
  requestIds: string[];
  headers: Array<Record<string, string>>;
  /** Per row; absent when no row needs decoding. */
  decodings?: BodyDecoding[];
}

/**
 * Several batches go in one message when the aggregator hands them out together: one
 * cross-thread wake-up instead of one per batch.
 */
export type ToWorker =
  | { type: 'batches'; batches: BatchPayload[] }
  | { type: 'stop' };

/** A serialised item: `body` is bytes, or text (JSON the worker serialised, a string the handler returned), sent as a string because a small Buffer would drag its whole 8 KiB pool slab through the structured clone. */
export type ItemResult =
  | { ok: true; statusCode: number; body: Uint8Array | string; contentType: string | undefined; headers: Record<string, string> }
  | { ok: false; error: ErrorPayload; headers: Record<string, string> };

export type BatchResult =
  | { batchId: number; ok: true; items: ItemResult[]; handlerMs: number; stages?: HandlerStagesMs }
  | { batchId: number; ok: false; error: ErrorPayload };

/** Results of batches finished back to back travel together, in order, like the batches did. */
export type FromWorker =
  | { type: 'ready'; heapBytes: number; warmup?: WarmupReport }
  | { type: 'init-failed'; error: ErrorPayload }
  | { type: 'results'; results: BatchResult[]; heapBytes: number };
