import { readFileSync } from 'node:fs';
import { MarinaClientError } from './errors.ts';

/** What a prediction can be sent as: bytes (an image) as application/octet-stream, a string as text/plain, anything else as JSON. */
export type PredictInput = Uint8Array | ArrayBuffer | string | Record<string, unknown> | unknown[];

export interface MarinaClientOptions {
  /** The inference address, e.g. `http://127.0.0.1:8080`. Default `$MARINA_URL`, else `http://127.0.0.1:8080`. */
  url?: string;
  /** The inference key. Default `$MARINA_TOKEN`, else the `inference.key` of `keyFile`; none when neither is set (token authorization off). */
  token?: string;
  /** The server's key_file.json. Default `$MARINA_KEY_FILE`. Read once, when the client is created. */
  keyFile?: string;
  /** Per attempt, ms: the client gives up on an answer after this long. Default 120000 (TorchServe's default_response_timeout). */
  timeoutMs?: number;
  /** Retries of one request after a 503 with Retry-After (a full queue, a request that waited past clientTimeoutInMills, a server shutting down). Default 10. Nothing else is retried. */
  maxRetries?: number;
  /** Upper bound of one wait between retries, ms, whatever Retry-After says. Default 30000. */
  maxRetryDelayMs?: number;
  /** Called before each retry: which request, which attempt comes next, how long it waits and why. */
  onRetry?: (event: RetryEvent) => void;
}

export interface RetryEvent {
  model: string;
  /** The attempt about to be made (2 for the first retry). */
  attempt: number;
  delayMs: number;
  /** The error that the retry answers (code MARINA_ERR_QUEUE_FULL, for example). */
  error: MarinaClientError;
}

export interface PredictOptions {
  /** A model version; default the model's default version. */
  version?: string;
  /** Overrides the content type the input's kind implies. */
  contentType?: string;
  /** Aborts the request and any wait for a retry. */
  signal?: AbortSignal;
}

export interface PredictManyOptions extends PredictOptions {
  /** Requests in flight at once. Default 4. */
  concurrency?: number;
  /**
   * false (default): the first failure rejects the call and starts no further requests (those
   * in flight finish). true: never rejects for a request's failure; each slot holds
   * `{ ok: true, value }` or `{ ok: false, error }`.
   */
  settle?: boolean;
  /** Called as each prediction finishes, in completion order. */
  onResult?: (index: number, outcome: PredictOutcome) => void;
}

export type PredictOutcome = { ok: true; value: unknown } | { ok: false; error: MarinaClientError };

export interface MarinaClient {
  readonly url: string;
  /**
   * One prediction: POST /predictions/{model}[/{version}]. Resolves with the parsed JSON answer
   * (a `Buffer` when the answer is not JSON). Retries only a 503 that carries Retry-After.
   * @throws MarinaClientError with the server's code (MARINA_ERR_MODEL_NOT_FOUND, MARINA_ERR_QUEUE_FULL
   *   after the last retry, ...) or MARINA_ERR_CLIENT_RESPONSE_TIMEOUT / MARINA_ERR_CLIENT_CONNECTION_FAILED.
   */
  predict(model: string, input: PredictInput, options?: PredictOptions): Promise<unknown>;
  /**
   * Many predictions with at most `concurrency` in flight; results in the order of `inputs`.
   * `inputs` is read lazily, so a generator of file reads holds only `concurrency` inputs in memory.
   */
  predictMany(
    model: string,
    inputs: Iterable<PredictInput> | AsyncIterable<PredictInput>,
    options?: PredictManyOptions & { settle: true },
  ): Promise<PredictOutcome[]>;
  predictMany(
    model: string,
    inputs: Iterable<PredictInput> | AsyncIterable<PredictInput>,
    options?: PredictManyOptions,
  ): Promise<unknown[]>;
  /** GET /ping: true when the server answers `{"status":"Healthy"}`. Never retries. */
  ping(options?: { signal?: AbortSignal }): Promise<boolean>;
}

const TORCHSERVE_DEFAULT_RESPONSE_TIMEOUT_MS = 120_000;

function optionError(message: string): MarinaClientError {
  return new MarinaClientError('MARINA_ERR_CLIENT_OPTION_INVALID', message, { statusCode: 0 });
}

/** The inference key of a TorchServe/Marina key_file.json. */
function readInferenceKey(path: string): string {
  let parsed: unknown;
  try {
    parsed = JSON.parse(readFileSync(path, 'utf8'));
  } catch (error) {
    throw new MarinaClientError(
      'MARINA_ERR_CLIENT_KEY_FILE_INVALID',
      `cannot read the key file ${path}: ${(error as Error).message}; pass the server's key_file.json (it is written in the directory serve was started from)`,
      { statusCode: 0, cause: error },
    );
  }
  const key = (parsed as { inference?: { key?: unknown } } | null)?.inference?.key;
  if (typeof key !== 'string' || key.length === 0) {
    throw new MarinaClientError(
      'MARINA_ERR_CLIENT_KEY_FILE_INVALID',
      `the key file ${path} has no inference.key; pass the server's key_file.json`,
      { statusCode: 0 },
    );
  }
  return key;
}

/** Retry-After as seconds (delta-seconds or an HTTP date), undefined when absent or unreadable. */
function parseRetryAfter(value: string | null): number | undefined {
  if (value === null || value.trim() === '') return undefined;
  const seconds = Number(value);
  if (Number.isFinite(seconds) && seconds >= 0) return seconds;
  const date = Date.parse(value);
  return Number.isNaN(date) ? undefined : Math.max(0, (date - Date.now()) / 1000);
}

function encode(input: PredictInput, contentType: string | undefined): { body: BodyInit; contentType: string } {
  if (input instanceof Uint8Array)
    return { body: input as Uint8Array<ArrayBuffer>, contentType: contentType ?? 'application/octet-stream' };
  if (input instanceof ArrayBuffer)
    return { body: new Uint8Array(input), contentType: contentType ?? 'application/octet-stream' };
  if (typeof input === 'string') return { body: input, contentType: contentType ?? 'text/plain; charset=utf-8' };
  return { body: JSON.stringify(input), contentType: contentType ?? 'application/json' };
}

/** The error a non-2xx answer stands for: Marina's code from the body when there is one. */
async function errorFromResponse(response: Response, model: string, attempts: number): Promise<MarinaClientError> {
  const text = await response.text().catch(() => '');
  const retryAfterS = parseRetryAfter(response.headers.get('retry-after'));
  const requestId = response.headers.get('x-request-id') ?? undefined;
  let body: { message?: unknown; type?: unknown; marinaCode?: unknown; hint?: unknown } | undefined;
  try {
    body = JSON.parse(text) as typeof body;
  } catch {
    body = undefined;
  }
  // TorchServe's exact sentence, then Marina's guidance (the body's `hint`) where the server gave one.
  const message =
    (typeof body?.message === 'string' ? body.message : text.slice(0, 300) || response.statusText) +
    (typeof body?.hint === 'string' ? ` (${body.hint})` : '');
  const code = typeof body?.marinaCode === 'string' ? body.marinaCode : 'MARINA_ERR_CLIENT_HTTP_ERROR';
  return new MarinaClientError(code, `POST /predictions/${model}: ${response.status} ${message}`, {
    statusCode: response.status,
    type: typeof body?.type === 'string' ? body.type : undefined,
    retryAfterS,
    attempts,
    requestId,
  });
}

function abortableDelay(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal!.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/**
 * Creates a client for one Marina server's inference API.
 * @throws MARINA_ERR_CLIENT_OPTION_INVALID for a bad URL or limit; MARINA_ERR_CLIENT_KEY_FILE_INVALID for an unreadable key file.
 */
export function createMarinaClient(options: MarinaClientOptions = {}): MarinaClient {
  const url = (options.url ?? process.env.MARINA_URL ?? 'http://127.0.0.1:8080').replace(/\/+$/, '');
  if (!/^https?:\/\/[^/]+$/.test(url))
    throw optionError(`url must be an http(s) origin such as http://127.0.0.1:8080, got '${url}'`);
  const timeoutMs = options.timeoutMs ?? TORCHSERVE_DEFAULT_RESPONSE_TIMEOUT_MS;
  const maxRetries = options.maxRetries ?? 10;
  const maxRetryDelayMs = options.maxRetryDelayMs ?? 30_000;
  if (!(timeoutMs > 0)) throw optionError(`timeoutMs must be more than 0, got ${timeoutMs}`);
  if (!Number.isInteger(maxRetries) || maxRetries < 0)
    throw optionError(`maxRetries must be a whole number of 0 or more, got ${maxRetries}`);
  if (!(maxRetryDelayMs >= 0)) throw optionError(`maxRetryDelayMs must be 0 or more, got ${maxRetryDelayMs}`);
  const keyFile = options.keyFile ?? process.env.MARINA_KEY_FILE;
  const token = options.token ?? process.env.MARINA_TOKEN ?? (keyFile ? readInferenceKey(keyFile) : undefined);
  const authorization: Record<string, string> = token ? { authorization: `Bearer ${token}` } : {};

  /** One HTTP attempt; network failures and the per-attempt timeout become typed errors. */
  async function attempt(
    path: string,
    init: RequestInit,
    signal: AbortSignal | undefined,
    attempts: number,
  ): Promise<Response> {
    const timeout = AbortSignal.timeout(timeoutMs);
    try {
      return await fetch(`${url}${path}`, { ...init, signal: signal ? AbortSignal.any([signal, timeout]) : timeout });
    } catch (error) {
      if (signal?.aborted) throw signal.reason;
      if (timeout.aborted) {
        throw new MarinaClientError(
          'MARINA_ERR_CLIENT_RESPONSE_TIMEOUT',
          `${init.method} ${path}: no answer from ${url} within ${timeoutMs} ms (attempt ${attempts}); the server may still be running it`,
          { statusCode: 0, attempts, cause: error },
        );
      }
      const cause = (error as { cause?: { code?: string; message?: string } }).cause;
      throw new MarinaClientError(
        'MARINA_ERR_CLIENT_CONNECTION_FAILED',
        `${init.method} ${path}: cannot reach ${url} (${cause?.code ?? cause?.message ?? (error as Error).message}); is serve running there?`,
        { statusCode: 0, attempts, cause: error },
      );
    }
  }

  async function predict(model: string, input: PredictInput, predictOptions: PredictOptions = {}): Promise<unknown> {
    if (typeof model !== 'string' || model.length === 0) throw optionError('model must be a model name');
    const path = `/predictions/${encodeURIComponent(model)}${predictOptions.version ? `/${encodeURIComponent(predictOptions.version)}` : ''}`;
    const { body, contentType } = encode(input, predictOptions.contentType);
    for (let attempts = 1; ; attempts++) {
      const response = await attempt(
        path,
        { method: 'POST', body, headers: { 'content-type': contentType, ...authorization } },
        predictOptions.signal,
        attempts,
      );
      if (response.ok) {
        const type = response.headers.get('content-type') ?? '';
        const bytes = Buffer.from(await response.arrayBuffer());
        if (/^application\/json\b/i.test(type)) return JSON.parse(bytes.toString('utf8')) as unknown;
        if (/^text\//i.test(type)) return bytes.toString('utf8');
        return bytes;
      }
      const error = await errorFromResponse(response, model, attempts);
      // Only a 503 that says when to come back can succeed on a retry; everything else is final.
      const isRetryable = response.status === 503 && error.retryAfterS !== undefined;
      if (!isRetryable || attempts > maxRetries) throw error;
      // A little jitter, so clients turned away together do not all come back together.
      const delayMs = Math.min(maxRetryDelayMs, error.retryAfterS! * 1000 * (1 + Math.random() * 0.2));
      options.onRetry?.({ model, attempt: attempts + 1, delayMs, error });
      await abortableDelay(delayMs, predictOptions.signal);
    }
  }

  async function predictMany(
    model: string,
    inputs: Iterable<PredictInput> | AsyncIterable<PredictInput>,
    manyOptions: PredictManyOptions = {},
  ): Promise<unknown[]> {
    const concurrency = manyOptions.concurrency ?? 4;
    if (!Number.isInteger(concurrency) || concurrency < 1)
      throw optionError(`concurrency must be a whole number of 1 or more, got ${concurrency}`);
    const iterator =
      Symbol.asyncIterator in inputs
        ? inputs[Symbol.asyncIterator]()
        : (inputs as Iterable<PredictInput>)[Symbol.iterator]();
    const results: unknown[] = [];
    let next = 0;
    let firstError: MarinaClientError | undefined;
    let isDone = false;
    /** One slot of the pool: takes the next input as soon as its last request finished. */
    const runSlot = async () => {
      while (!isDone && firstError === undefined) {
        const item = await iterator.next();
        if (item.done) {
          isDone = true;
          return;
        }
        const index = next++;
        try {
          const value = await predict(model, item.value, manyOptions);
          results[index] = manyOptions.settle ? { ok: true, value } : value;
          manyOptions.onResult?.(index, { ok: true, value });
        } catch (error) {
          if (!(error instanceof MarinaClientError)) throw error;
          manyOptions.onResult?.(index, { ok: false, error });
          if (manyOptions.settle) results[index] = { ok: false, error };
          else firstError ??= error;
        }
      }
    };
    await Promise.all(Array.from({ length: concurrency }, runSlot));
    if (firstError) throw firstError;
    return results;
  }

  async function ping(pingOptions: { signal?: AbortSignal } = {}): Promise<boolean> {
    const response = await attempt('/ping', { method: 'GET', headers: authorization }, pingOptions.signal, 1);
    const text = await response.text();
    return response.ok && /"Healthy"/.test(text);
  }

  return { url, predict, predictMany: predictMany as MarinaClient['predictMany'], ping };
}
