import type { InferenceSession } from 'onnxruntime-node';

/**
 * The handler contract, after TorchServe's (`initialize`, `preprocess`, `inference`,
 * `postprocess`, or one `handle`). A custom handler is a JavaScript ES module inside the
 * archive whose default export (or named exports) implement `Handler`, or a default export
 * that is a class / factory returning one.
 */

/** One request of a batch, as TorchServe hands it: `{ body }` for a raw body, one key per multipart/form field otherwise. */
export type RequestRow = Record<string, Buffer | string | unknown>;

/** Shape of one model input or output as reported by onnxruntime-node (`-1`/string = dynamic). */
export interface TensorSignature {
  name: string;
  /** ORT tensor type name, e.g. 'float32', 'int64'. */
  type: string;
  /** Dimensions; a string or -1 marks a dynamic dimension. Empty when unknown. */
  shape: ReadonlyArray<number | string>;
}

export interface ModelSignature {
  inputs: TensorSignature[];
  outputs: TensorSignature[];
}

/** What the server tells a handler at initialize time and with every batch. */
export interface HandlerContext {
  modelName: string;
  modelVersion: string;
  /** The parsed MAR-INF/MANIFEST.json. */
  manifest: Record<string, unknown>;
  /** Absolute path of the extracted archive folder. */
  modelDir: string;
  /** Absolute path of the manifest's serializedFile, when it has one. */
  serializedFilePath: string | undefined;
  /** The configured batch size (jobs per batch at most). */
  batchSize: number;
  /** model-config.yaml as parsed (every key, including those the server does not use). */
  modelYamlConfig: Record<string, unknown>;
  /** TorchServe's `context.system_properties`, same keys. */
  systemProperties: {
    model_dir: string;
    gpu_id: null;
    batch_size: number;
    server_name: string;
    server_version: string;
    limit_max_image_pixels: boolean;
  };
  /**
   * The server's max_response_size, bytes (undefined: no bound). The server refuses a larger answer
   * anyway; a handler can refuse earlier, before it builds the answer (the tensor handler does).
   */
  maxResponseBytes?: number;
  /** Intra-op threads this worker may use; handlers that make sessions must honour it. */
  intraOpNumThreads: number;
  /** Creates an onnxruntime-node session with the server's options (threads, optimisation level). Defaults to serializedFilePath. */
  createSession(modelPath?: string): Promise<InferenceSession>;
  /** Per-batch: the request id of each row. */
  requestIds: string[];
  /** Per-batch: a request header (lower-case name), or undefined. */
  getRequestHeader(index: number, name: string): string | undefined;
  /** Per-batch: set the HTTP status of one row (all rows when index is omitted). */
  setResponseStatus(code: number, phrase?: string, index?: number): void;
  setResponseContentType(index: number, contentType: string): void;
  setResponseHeader(index: number, name: string, value: string): void;
}

export interface Handler {
  /**
   * True when preprocess keeps no per-batch state in the handler (everything a batch needs
   * travels in preprocess's return value): the server then starts preprocessing batch k+1 as
   * soon as it arrives, while batch k is still in inference. Default false (TorchServe-style
   * handlers that store state on `self` in preprocess run strictly one stage after another).
   */
  isPipelineSafe?: boolean;
  /**
   * Optional: the part of initialize that needs no session (reading the model's graph, resolving
   * options). The worker calls it before initialize. When it returns true and the handler is
   * pipeline-safe, preprocess may run before initialize: the first batch of a model loaded on
   * demand is then decoded while initialize creates the session. initialize still runs before
   * inference and postprocess.
   */
  prepare?(context: HandlerContext): Promise<boolean> | boolean;
  initialize?(context: HandlerContext): Promise<void> | void;
  preprocess?(data: RequestRow[], context: HandlerContext): unknown;
  inference?(input: unknown, context: HandlerContext): unknown;
  postprocess?(output: unknown, context: HandlerContext): unknown[] | Promise<unknown[]>;
  /** When present, replaces preprocess → inference → postprocess. Must return one item per row. */
  handle?(data: RequestRow[], context: HandlerContext): unknown[] | Promise<unknown[]>;
}

/** A problem found when checking a model against a handler (used by the validator). */
export interface SignatureProblem {
  code: string;
  message: string;
  /** Default 'error' (the archive will not serve); 'warning' serves, but the user should hear about it. */
  severity?: 'error' | 'warning';
}

/** A handler that ships with Marina, addressed by name in the manifest's `handler`. */
export interface BuiltinHandler {
  name: string;
  description: string;
  create(): Handler;
  /**
   * The request headers (lower-case) the handler reads through `getRequestHeader`: the server
   * sends a built-in handler's worker only these (a custom handler gets every header, as in TorchServe).
   */
  requestHeaders: readonly string[];
  /**
   * Checks that a model's inputs and outputs fit this handler and that its model-config.yaml
   * `handler:` knobs resolve against them. A fixed batch dimension below `batchSize` is a
   * warning (see `fixedBatchWarning`). `classCount` is the number of names in
   * index_to_name.json when the archive has one. Returns [] when it fits.
   */
  checkSignature(
    signature: ModelSignature,
    options: { batchSize: number; modelYamlConfig: Record<string, unknown>; classCount?: number },
  ): SignatureProblem[];
}
