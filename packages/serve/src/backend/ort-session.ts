import * as ort from 'onnxruntime-node';

/** How a worker's sessions are configured; fixed when the worker starts. */
export interface SessionThreading {
  /** Intra-op threads for every session this worker creates. */
  intraOpNumThreads: number;
  /**
   * True when the threads of all workers together exceed the cores: spinning threads would
   * then steal cores from other workers, so spinning is turned off (measured: it wins back
   * part of the 30–40% lost to oversubscription).
   */
  isOversubscribed: boolean;
}

/** Session options every Marina worker uses (see onnxruntime-node facts: 'all' is 1.3–1.6x faster than 'extended'). */
export function createSessionOptions(threading: SessionThreading): ort.InferenceSession.SessionOptions {
  return {
    graphOptimizationLevel: 'all',
    intraOpNumThreads: threading.intraOpNumThreads,
    interOpNumThreads: 1,
    executionMode: 'sequential',
    executionProviders: ['cpu'],
    ...(threading.isOversubscribed ? { extra: { session: { 'intra_op.allow_spinning': '0' } } } : {}),
  };
}

/** Creates an ORT session for a model file with the worker's options (the implementation of `context.createSession`). */
export function createSession(modelPath: string, threading: SessionThreading): Promise<ort.InferenceSession> {
  return ort.InferenceSession.create(modelPath, createSessionOptions(threading));
}
