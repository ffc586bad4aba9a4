/**
 * OTLP over HTTP for the export request bodies the span writer builds: one keep-alive agent, each
 * body posted whole with its Content-Length (`req.end(body)`), the answer judged by its status
 * and drained up to a bound. It does what the OpenTelemetry SDK's OTLP/HTTP export delegate
 * (otlp-exporter-base) did for Marina, with the same variables and the same retry rules, at about
 * 40% of its CPU per export: the delegate piped each body through a Readable (chunked transfer
 * encoding, stream machinery), parsed the URL and awaited the headers again for every export,
 * which cost a fast model about a microsecond per traced request.
 *
 * Variables (each also in its OTEL_EXPORTER_OTLP_TRACES_* form, which wins):
 * OTEL_EXPORTER_OTLP_TIMEOUT (ms, default 10 000: one export, retries included),
 * OTEL_EXPORTER_OTLP_HEADERS (`key=value,...`), OTEL_EXPORTER_OTLP_COMPRESSION (`gzip` or `none`),
 * OTEL_EXPORTER_OTLP_CERTIFICATE, _CLIENT_CERTIFICATE and _CLIENT_KEY (PEM files, for https).
 */
import { readFileSync } from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import { resolve as resolvePath } from 'node:path';
import { urlToHttpOptions } from 'node:url';
import { promisify } from 'node:util';
import { gzip } from 'node:zlib';
import { parseKeyPairsIntoRecord } from '@opentelemetry/core';
import { createServeError } from '../errors.ts';
import type { SpanTransport } from './span-batcher.ts';

/** How export requests are sent: from the OTEL_EXPORTER_OTLP_* variables (`otlpHttpSettingsFrom`). */
export interface OtlpHttpSettings {
  /** How long one export may take, retries included, ms. */
  timeoutMs: number;
  /** Sent with every export (an API key); Content-Type is Marina's own. */
  headers: Record<string, string>;
  compression: 'none' | 'gzip';
  /** PEM files' contents for https: the root certificates to trust, the client's certificate and key. */
  tls: { ca?: Buffer; cert?: Buffer; key?: Buffer };
}

/** The OTLP exporter specification's default timeout, ms. */
const DEFAULT_TIMEOUT_MS = 10_000;
/** Retries after the first attempt, and their backoff (± jitter): the SDK's (retrying-transport.ts in otlp-exporter-base). */
const RETRY_POLICY = { most: 5, firstBackoffMs: 1000, maxBackoffMs: 5000, multiplier: 1.5, jitter: 0.2 } as const;
/**
 * The most of a response that is read before its connection is closed: Marina judges an export by
 * its status and needs none of the body (an OTLP response is a few bytes, a partial-success note at
 * most), so a receiver that answers without end cannot hold memory or the socket.
 */
const MAX_RESPONSE_BYTES = 64 * 1024;
/** Statuses the OTLP specification says to retry. */
const RETRYABLE_STATUSES = new Set([429, 502, 503, 504]);
/** Network errors worth another try (the SDK's list): the receiver may be restarting. */
const RETRYABLE_NETWORK_ERRORS = new Set([
  'ECONNRESET',
  'ECONNREFUSED',
  'EPIPE',
  'ETIMEDOUT',
  'EAI_AGAIN',
  'ENOTFOUND',
  'ENETUNREACH',
  'EHOSTUNREACH',
]);

/**
 * The transport's settings from the environment, as the SDK's exporters read them: the traces
 * form of each variable wins over the general one.
 * @throws MARINA_ERR_TRACING_CONFIG_INVALID for a timeout that is not a positive number, a
 *   compression other than gzip or none, or a certificate variable naming a file that cannot be read.
 */
export function otlpHttpSettingsFrom(env: Readonly<Record<string, string | undefined>>): OtlpHttpSettings {
  const named = (suffix: string): [string, string] | undefined => {
    for (const name of [`OTEL_EXPORTER_OTLP_TRACES_${suffix}`, `OTEL_EXPORTER_OTLP_${suffix}`]) {
      const value = env[name]?.trim();
      if (value) return [name, value];
    }
    return undefined;
  };
  const invalid = (name: string, value: string, allowed: string) =>
    createServeError.MARINA_ERR_TRACING_CONFIG_INVALID(
      `${name}=${JSON.stringify(value.slice(0, 60))} is not supported; use ${allowed}, or unset it`,
      { details: { variable: name } },
    );
  let timeoutMs = DEFAULT_TIMEOUT_MS;
  const timeout = named('TIMEOUT');
  if (timeout) {
    timeoutMs = Number(timeout[1]);
    if (!Number.isFinite(timeoutMs) || timeoutMs <= 0) throw invalid(timeout[0], timeout[1], 'milliseconds above 0');
  }
  let compression: OtlpHttpSettings['compression'] = 'none';
  const compressionText = named('COMPRESSION');
  if (compressionText) {
    const value = compressionText[1].toLowerCase();
    if (value !== 'gzip' && value !== 'none') throw invalid(compressionText[0], compressionText[1], 'gzip or none');
    compression = value;
  }
  const file = (suffix: string): Buffer | undefined => {
    const path = named(suffix);
    if (!path) return undefined;
    try {
      return readFileSync(resolvePath(process.cwd(), path[1]));
    } catch {
      // The path is not echoed: the message may reach logs that should not show the server's files.
      throw createServeError.MARINA_ERR_TRACING_CONFIG_INVALID(
        `${path[0]} names a file Marina cannot read; give the path of a readable PEM file, or unset it`,
        { details: { variable: path[0] } },
      );
    }
  };
  return {
    timeoutMs,
    headers: {
      ...parseKeyPairsIntoRecord(env.OTEL_EXPORTER_OTLP_HEADERS),
      ...parseKeyPairsIntoRecord(env.OTEL_EXPORTER_OTLP_TRACES_HEADERS),
    },
    compression,
    tls: { ca: file('CERTIFICATE'), cert: file('CLIENT_CERTIFICATE'), key: file('CLIENT_KEY') },
  };
}

/** What one attempt came to: taken, worth another try (after the receiver's Retry-After, when it said), or lost. */
type Attempt = { kind: 'ok' } | { kind: 'retry'; afterMs: number | undefined } | { kind: 'failed' };

const OK: Attempt = { kind: 'ok' };
const FAILED: Attempt = { kind: 'failed' };
const RETRY: Attempt = { kind: 'retry', afterMs: undefined };

/** Retry-After in ms (delay seconds or an HTTP date), or undefined when absent or unreadable. */
function retryAfterMs(header: string | undefined): number | undefined {
  const text = header?.trim();
  if (!text) return undefined;
  const seconds = Number(text);
  if (Number.isFinite(seconds)) return Math.max(0, seconds * 1000);
  const at = Date.parse(text);
  return Number.isNaN(at) ? undefined : Math.max(0, at - Date.now());
}

/**
 * Posts each export body to `url` (…/v1/traces). `send` resolves true when the receiver took the
 * body, false when it was lost: a status other than 2xx that is not worth retrying, or no success
 * within the timeout (429/502/503/504 and network errors are retried with backoff, or after the
 * receiver's Retry-After, while time is left). It never rejects. `shutdown` stops retries, aborts
 * the exports in flight (they resolve false) and closes the agent's sockets.
 */
export function otlpHttpTransport(options: {
  url: string;
  contentType: string;
  settings: OtlpHttpSettings;
  /** Sockets the agent may open at once: the batcher's exports in flight. */
  maxSockets: number;
}): SpanTransport {
  return new OtlpHttpTransport(options.url, options.contentType, options.settings, options.maxSockets);
}

class OtlpHttpTransport implements SpanTransport {
  readonly #settings: OtlpHttpSettings;
  readonly #target: http.RequestOptions;
  readonly #request: typeof http.request;
  readonly #agent: http.Agent;
  readonly #headers: Record<string, string>;
  /** Requests on the wire and retries waiting: what `shutdown` ends. */
  readonly #requests = new Set<http.ClientRequest>();
  readonly #waits = new Map<NodeJS.Timeout, () => void>();
  #isShutDown = false;

  constructor(url: string, contentType: string, settings: OtlpHttpSettings, maxSockets: number) {
    this.#settings = settings;
    const parsed = new URL(url);
    const isHttps = parsed.protocol === 'https:';
    // Parsed once: host, port, path and any user:password of the URL.
    this.#target = { ...urlToHttpOptions(parsed), method: 'POST' };
    this.#request = isHttps ? https.request : http.request;
    this.#agent = isHttps
      ? new https.Agent({ keepAlive: true, maxSockets, ...settings.tls })
      : new http.Agent({ keepAlive: true, maxSockets });
    this.#headers = {
      ...settings.headers,
      'user-agent': 'marina-otlp-exporter',
      'content-type': contentType,
      ...(settings.compression === 'gzip' ? { 'content-encoding': 'gzip' } : {}),
    };
  }

  async send(body: Uint8Array): Promise<boolean> {
    if (this.#isShutDown) return false;
    const deadline = performance.now() + this.#settings.timeoutMs;
    let payload = body;
    if (this.#settings.compression === 'gzip') {
      try {
        payload = await gzipAsync(body);
      } catch {
        return false;
      }
    }
    let backoffMs: number = RETRY_POLICY.firstBackoffMs;
    for (let retries = 0; ; retries++) {
      const left = deadline - performance.now();
      if (this.#isShutDown || left <= 0) return false;
      const attempt = await this.#attempt(payload, left);
      if (attempt.kind !== 'retry') return attempt.kind === 'ok';
      if (retries === RETRY_POLICY.most) return false;
      const jittered = Math.min(
        backoffMs * (1 + (Math.random() * 2 - 1) * RETRY_POLICY.jitter),
        RETRY_POLICY.maxBackoffMs,
      );
      backoffMs *= RETRY_POLICY.multiplier;
      const waitMs = attempt.afterMs ?? jittered;
      if (waitMs >= deadline - performance.now()) return false;
      await this.#wait(waitMs);
    }
  }

  async shutdown(): Promise<void> {
    this.#isShutDown = true;
    for (const [timer, wake] of this.#waits) {
      clearTimeout(timer);
      wake();
    }
    this.#waits.clear();
    for (const req of this.#requests) req.destroy();
    this.#agent.destroy();
  }

  #wait(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.#waits.delete(timer);
        resolve();
      }, ms);
      // A retry waiting must not keep the process alive on its own; shutdown wakes it.
      timer.unref();
      this.#waits.set(timer, resolve);
    });
  }

  #attempt(payload: Uint8Array, timeoutMs: number): Promise<Attempt> {
    return new Promise((resolve) => {
      let outcome: Attempt | undefined;
      let isSettled = false;
      let timer: NodeJS.Timeout | undefined;
      const settle = (attempt: Attempt) => {
        if (isSettled) return;
        isSettled = true;
        clearTimeout(timer);
        this.#requests.delete(req);
        resolve(attempt);
      };
      const req = this.#request(
        {
          ...this.#target,
          agent: this.#agent,
          headers: { ...this.#headers, 'content-length': payload.byteLength },
        },
        (res) => {
          const status = res.statusCode ?? 0;
          outcome =
            status >= 200 && status < 300
              ? OK
              : RETRYABLE_STATUSES.has(status)
                ? { kind: 'retry', afterMs: retryAfterMs(res.headers['retry-after']) }
                : FAILED;
          const answered = outcome;
          let read = 0;
          res.on('data', (chunk: Buffer) => {
            read += chunk.length;
            if (read > MAX_RESPONSE_BYTES) {
              res.destroy();
              settle(answered);
            }
          });
          res.on('end', () => settle(answered));
          // The status decides, however the body ends (cut short, or closed for being too long).
          res.on('error', () => settle(answered));
          res.on('close', () => settle(answered));
        },
      );
      this.#requests.add(req);
      timer = setTimeout(() => {
        req.destroy();
        settle(outcome ?? RETRY);
      }, timeoutMs);
      timer.unref();
      req.on('error', (error: NodeJS.ErrnoException) => {
        if (this.#isShutDown) settle(FAILED);
        else settle(outcome ?? (RETRYABLE_NETWORK_ERRORS.has(error.code ?? '') ? RETRY : FAILED));
      });
      req.on('close', () => settle(outcome ?? (this.#isShutDown ? FAILED : RETRY)));
      req.end(payload);
    });
  }
}

const gzipAsync = promisify(gzip) as (body: Uint8Array) => Promise<Buffer>;
