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

export type ToWorker =
  | { type: 'batch'; batchId: number; rows: Array<Record<string, unknown>>; requestIds: string[]; headers: Array<Record<string, string>> }
  | { type: 'stop' };

export type ItemResult =
  | { ok: true; statusCode: number; body: Uint8Array; contentType: string | undefined; headers: Record<string, string> }
  | { ok: false; error: ErrorPayload; headers: Record<string, string> };

export type FromWorker =
  | { type: 'ready'; heapBytes: number }
  | { type: 'init-failed'; error: ErrorPayload }
  | { type: 'result'; batchId: number; items: ItemResult[]; heapBytes: number; handlerMs: number }
  | { type: 'batch-failed'; batchId: number; error: ErrorPayload; heapBytes: number };
