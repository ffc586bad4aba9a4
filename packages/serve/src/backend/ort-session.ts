import * as ort from 'onnxruntime-node';

/** How a worker's sessions are configured; fixed when the worker starts. */
export interface SessionThreading {
  /** Intra-op threads for every session this worker creates. */
  intraOpNumThreads: number;
  /**
   * True when the threads of all workers together exceed the cores. Kept for describe/stats;
   * spinning is off in every case now (see createSessionOptions).
   */
  isOversubscribed: boolean;
}

/**
 * Session options every Marina worker uses (see onnxruntime-node facts: 'all' is 1.3–1.6x faster
 * than 'extended').
 *
 * Intra-op spinning is off: a server always has other work on its cores (HTTP on the main thread,
 * image decoding on libuv's pool for the next batch, other workers), and spinning pool threads
 * burn the core that work needs while waiting at each operator's barrier. Measured with
 * ResNet-18, 1 worker × 2 threads, 100 clients on the shared 2-core machine (same run, alternating):
 * 30.6 and 30.1 img/s spinning off against 18.0 and 28.5 spinning on.
 */
export function createSessionOptions(threading: SessionThreading): ort.InferenceSession.SessionOptions {
  return {
    graphOptimizationLevel: 'all',
    intraOpNumThreads: threading.intraOpNumThreads,
    interOpNumThreads: 1,
    executionMode: 'sequential',
    executionProviders: ['cpu'],
    extra: { session: { 'intra_op.allow_spinning': '0' } },
  };
}

/** Creates an ORT session for a model file with the worker's options (the implementation of `context.createSession`). */
export function createSession(modelPath: string, threading: SessionThreading): Promise<ort.InferenceSession> {
  return ort.InferenceSession.create(modelPath, createSessionOptions(threading));
}
