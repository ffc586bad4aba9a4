import { Pool } from 'undici';
import { benchErrors } from './errors.ts';

export interface LoadOptions {
  /** Base URL of the server, e.g. http://127.0.0.1:8080. */
  origin: string;
  /** Request path, e.g. /predictions/resnet-18. */
  path: string;
  /** Request body, sent as is (a raw JPEG for the image classifier). */
  body: Buffer;
  /** Content-Type of the body. Default application/octet-stream. */
  contentType?: string;
  /** Extra request headers (e.g. Inference-Header-Content-Length for v2 binary bodies). */
  headers?: Record<string, string>;
  /** Requests in flight at once (a closed loop: each finished request starts the next). */
  concurrency: number;
  /** Measured requests. The run stops at this count unless `durationMs` is set and reached first. */
  requests: number;
  /** Stop early once this long has passed (ms); undefined means run all `requests`. */
  durationMs?: number;
  /** Unmeasured requests sent first at the same concurrency, to warm connections, workers and caches. Default 0. */
  warmupRequests?: number;
  /** Called after each measured request with the count done so far. */
  onProgress?: (done: number) => void;
  /** A response header to keep from each successful measured request (e.g. `server-timing`), in `LoadResult.headerValues`. */
  collectHeader?: string;
  /** A pool to send through, kept open afterwards (a caller that measures in several blocks keeps one connection); default: a pool of its own per call, closed at the end. */
  pool?: Pool;
}

export interface LoadResult {
  /** Latency of each successful measured request, ms, in completion order. */
  latenciesMs: number[];
  /** Wall time of the measured phase, ms. */
  wallMs: number;
  /** Successful measured requests per second. */
  throughputPerSec: number;
  /** Measured requests that failed (non-2xx or connection error). */
  errors: number;
  /** First failure seen, for the report. */
  firstError: string | undefined;
  /** The `collectHeader` of each successful measured request that had it; empty without `collectHeader`. */
  headerValues: string[];
}

/**
 * Drives a closed-loop load (`concurrency` virtual clients, each sending its next request as
 * soon as the last one returns) against one URL and records per-request latency, in the manner
 * of Triton's perf_analyzer. Uses one undici Pool with a connection per client (keep-alive,
 * no pipelining), so the client stays cheap next to the server on a small machine.
 *
 * @throws MARINA_ERR_BENCH_REQUESTS_FAILED when every measured request failed.
 */
export async function runLoad(options: LoadOptions): Promise<LoadResult> {
  const pool =
    options.pool ??
    new Pool(options.origin, { connections: options.concurrency, pipelining: 1, keepAliveTimeout: 30_000 });
  const headers = { 'content-type': options.contentType ?? 'application/octet-stream', ...options.headers };
  let firstError: string | undefined;
  const headerValues: string[] = [];
  let isRecording = false;

  const sendOne = async (): Promise<boolean> => {
    try {
      const response = await pool.request({ method: 'POST', path: options.path, body: options.body, headers });
      // Read as bytes, as a client of a binary tensor would: decoding a 1 MB binary answer as
      // UTF-8 text costs the client about 10 ms here, which is the client's time, not the server's.
      const bytes = await response.body.arrayBuffer();
      if (response.statusCode >= 200 && response.statusCode < 300) {
        const value =
          options.collectHeader && isRecording ? response.headers[options.collectHeader.toLowerCase()] : undefined;
        if (typeof value === 'string') headerValues.push(value);
        return true;
      }
      firstError ??= `HTTP ${response.statusCode}: ${Buffer.from(bytes, 0, Math.min(300, bytes.byteLength)).toString('utf8')}`;
    } catch (error) {
      firstError ??= (error as Error).message;
    }
    return false;
  };

  const runPhase = async (count: number, durationMs: number | undefined, record: boolean) => {
    const latenciesMs: number[] = [];
    let started = 0;
    let errors = 0;
    const startMs = performance.now();
    const client = async () => {
      while (started < count && (durationMs === undefined || performance.now() - startMs < durationMs)) {
        started += 1;
        const t0 = performance.now();
        const isOk = await sendOne();
        if (!record) continue;
        if (isOk) latenciesMs.push(performance.now() - t0);
        else errors += 1;
        options.onProgress?.(latenciesMs.length + errors);
      }
    };
    await Promise.all(Array.from({ length: Math.max(1, options.concurrency) }, client));
    return { latenciesMs, errors, wallMs: performance.now() - startMs };
  };

  try {
    if ((options.warmupRequests ?? 0) > 0) await runPhase(options.warmupRequests!, undefined, false);
    firstError = undefined;
    isRecording = true;
    const { latenciesMs, errors, wallMs } = await runPhase(options.requests, options.durationMs, true);
    if (latenciesMs.length === 0 && options.requests > 0) {
      throw benchErrors.create.MARINA_ERR_BENCH_REQUESTS_FAILED(
        `all ${errors} requests to ${options.origin}${options.path} failed (first: ${firstError ?? 'no response'}); check the server log in the run's output folder`,
      );
    }
    return {
      latenciesMs,
      wallMs,
      throughputPerSec: wallMs > 0 ? latenciesMs.length / (wallMs / 1000) : 0,
      errors,
      firstError,
      headerValues,
    };
  } finally {
    if (!options.pool) await pool.close();
  }
}
