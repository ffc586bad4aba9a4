import type { PredictTimingsMs } from '../registry/model-registry.ts';

/**
 * The `Server-Timing` header of a prediction (W3C Server Timing; browsers' dev tools and curl -v
 * show it): `queue`, then the handler's stages `preprocess` (waiting for decoding and
 * preprocessing), `inference` and `postprocess` where the handler has them, else `handler` (the
 * handler's whole time, measured in the worker thread), and `total` from arrival to the response. Durations in ms, 2 decimals.
 */
export function serverTimingHeader(timings: PredictTimingsMs, totalMs: number): string {
  const entries: Array<[string, number, string]> = [['queue', timings.queueMs, 'job queue']];
  if (timings.stages) {
    entries.push(
      ['preprocess', timings.stages.preprocessWaitMs, 'decode and preprocess'],
      ['inference', timings.stages.inferenceMs, 'model'],
      ['postprocess', timings.stages.postprocessMs, 'postprocess'],
    );
  } else {
    // Measured in the worker thread: the main thread learns of the start only when the thread reports it.
    entries.push(['handler', timings.handlerMs ?? timings.workerMs, 'handler']);
  }
  entries.push(['total', totalMs, 'total']);
  return entries.map(([name, ms, description]) => `${name};dur=${Math.max(0, ms).toFixed(2)};desc="${description}"`).join(', ');
}
