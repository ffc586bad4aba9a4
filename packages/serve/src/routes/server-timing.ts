import type { PredictTimingsMs } from '../registry/model-registry.ts';

/**
 * The `Server-Timing` header of a prediction (W3C Server Timing; browsers' dev tools and curl -v
 * show it): `queue`, then the handler's stages `preprocess` (waiting for decoding and
 * preprocessing), `inference` and `postprocess` where the handler has them, else `handler` (the
 * handler's whole time, measured in the worker thread), and `total` from arrival to the response. Durations in ms, 2 decimals.
 */
export function serverTimingHeader(timings: PredictTimingsMs, totalMs: number): string {
  // A request that waited for its model to load says so: its queue time includes the load. A
  // model with priority levels names the level the request waited at.
  const where = timings.waitedForLoad ? 'job queue, waiting for the model to load' : 'job queue';
  const queue =
    timings.priority === undefined
      ? `queue;dur=${ms(timings.queueMs)};desc="${where}", `
      : `queue;dur=${ms(timings.queueMs)};desc="${where}, priority ${timings.priority}", priority;desc="${timings.priority}", `;
  const total = `total;dur=${ms(totalMs)};desc="total"`;
  const { stages } = timings;
  if (stages) {
    return `${queue}preprocess;dur=${ms(stages.preprocessWaitMs)};desc="decode and preprocess", inference;dur=${ms(stages.inferenceMs)};desc="model", postprocess;dur=${ms(stages.postprocessMs)};desc="postprocess", ${total}`;
  }
  // Measured in the worker thread: the main thread learns of the start only when the thread reports it.
  return `${queue}handler;dur=${ms(timings.handlerMs ?? timings.workerMs)};desc="handler", ${total}`;
}

/**
 * The priority level a request was answered at (models with more than one level), for the access
 * log; set by the routes, read when the response is logged.
 */
export const answeredPriority = new WeakMap<object, number>();

/** A duration in the header: ms with 2 decimals, never negative. */
function ms(value: number): string {
  return Math.max(0, value).toFixed(2);
}
