import { createWriteStream, mkdirSync, type WriteStream } from 'node:fs';
import path from 'node:path';
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';

export type LogLevel = 'info' | 'warn' | 'error';

/** TorchServe's access log file name, in the log folder (LOG_LOCATION, default ./logs). */
export const ACCESS_LOG_FILE_NAME = 'access_log.log';

export interface RequestLogOptions {
  /** Appends one line per answered request here (TorchServe's access_log.log); none when undefined. */
  accessLogPath?: string;
  /** The server's log (a terminal, or marina.log in the background). */
  log?: (level: LogLevel, message: string) => void;
  /** Every request goes to `log` (a terminal in front of the user); otherwise only the failed ones (status 400 and up). */
  isEveryRequestLogged?: boolean;
}

export interface RequestLog {
  /** Goes on every listener (skip-override: it sees the routes of every plugin on it, and 404s). */
  plugin: FastifyPluginAsync;
  /** Flushes and closes the access log file. */
  close(): Promise<void>;
}

/** `2026-11-24T20:59:01.123Z WARN message`: the form of every line Marina's server logs. */
export function formatLogLine(level: LogLevel, message: string, now: Date = new Date()): string {
  return `${now.toISOString()} ${level.toUpperCase()} ${message}`;
}

/**
 * TorchServe's access log line (its Session.toString after log4j's `%d{ISO8601} - `):
 * `<time> - /<ip>:<port> "<METHOD> <uri> HTTP/<version>" <status> <ms>`, with Marina's request id
 * (the x-request-id header) appended.
 */
export function formatAccessLine(entry: { time: Date; remoteAddress: string | undefined; remotePort: number | undefined; method: string; url: string; httpVersion: string; statusCode: number; durationMs: number; requestId: string }): string {
  const remote = `/${entry.remoteAddress ?? '-'}:${entry.remotePort ?? 0}`;
  return `${entry.time.toISOString()} - ${remote} "${entry.method} ${entry.url} HTTP/${entry.httpVersion}" ${entry.statusCode} ${Math.round(entry.durationMs)} ${entry.requestId}`;
}

const marinaCodePattern = /"marinaCode":\s*"(MARINA_ERR_[A-Z0-9_]+)"/;

/** `CODE` of a Marina error body, and for a server error (5xx) its message too. */
function describeFailure(statusCode: number, payload: string): string | undefined {
  const code = marinaCodePattern.exec(payload)?.[1];
  if (code === undefined || statusCode < 500) return code;
  try {
    const message = (JSON.parse(payload) as { message?: unknown }).message;
    return typeof message === 'string' ? `${code}: ${message}` : code;
  } catch {
    return code;
  }
}

/**
 * The request log: every answered request (401, 404 and 413 included) as a line of the access log
 * file, and in the server's log with its level, request id, status, duration and, for a failure, its
 * MARINA_ERR code.
 */
export function createRequestLog(options: RequestLogOptions): RequestLog {
  let stream: WriteStream | undefined;
  if (options.accessLogPath) {
    mkdirSync(path.dirname(options.accessLogPath), { recursive: true });
    stream = createWriteStream(options.accessLogPath, { flags: 'a' });
    // A full disk must not take the server down: say so once and stop writing the file.
    stream.on('error', (error) => {
      options.log?.('error', `cannot write the access log ${options.accessLogPath}: ${error.message}; requests are no longer written there`);
      stream = undefined;
    });
  }
  const codes = new WeakMap<FastifyRequest, string>();

  const onSend = (request: FastifyRequest, reply: FastifyReply, payload: unknown, done: (error: null, payload: unknown) => void) => {
    if (reply.statusCode >= 400 && typeof payload === 'string') {
      const failure = describeFailure(reply.statusCode, payload);
      if (failure !== undefined) codes.set(request, failure);
    }
    done(null, payload);
  };

  const onResponse = (request: FastifyRequest, reply: FastifyReply, done: () => void) => {
    const statusCode = reply.statusCode;
    const durationMs = reply.elapsedTime;
    const url = request.raw.url ?? request.url;
    if (stream) {
      stream.write(`${formatAccessLine({ time: new Date(), remoteAddress: request.socket?.remoteAddress, remotePort: request.socket?.remotePort, method: request.method, url, httpVersion: request.raw.httpVersion ?? '1.1', statusCode, durationMs, requestId: request.id })}\n`);
    }
    if (options.log && (statusCode >= 400 || options.isEveryRequestLogged)) {
      const level: LogLevel = statusCode >= 500 ? 'error' : statusCode >= 400 ? 'warn' : 'info';
      const code = codes.get(request);
      options.log(level, `[${request.id}] ${request.method} ${url} ${statusCode} ${durationMs.toFixed(1)} ms${code ? ` ${code}` : ''}`);
    }
    done();
  };

  const plugin: FastifyPluginAsync = async (app) => {
    app.addHook('onSend', onSend);
    app.addHook('onResponse', onResponse);
  };
  (plugin as unknown as Record<symbol, boolean>)[Symbol.for('skip-override')] = true;

  return {
    plugin,
    close: () =>
      new Promise<void>((resolve) => {
        const open = stream;
        stream = undefined;
        if (!open) return resolve();
        open.end(() => resolve());
      }),
  };
}
