import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import { boundText, capLogLine } from './bounded-text.ts';

/** How much of a request's target a request line quotes. */
const REQUEST_URL_CHARS = 1024;

export type LogLevel = 'info' | 'warn' | 'error';

export interface RequestLogOptions {
  /** The server's log (a terminal, or marina.log in the background). */
  log?: (level: LogLevel, message: string) => void;
  /** Every request goes to `log` (a terminal in front of the user); otherwise only the failed ones (status 400 and up). */
  isEveryRequestLogged?: boolean;
}

export interface RequestLog {
  /** Goes on every listener (skip-override: it sees the routes of every plugin on it, and 404s). */
  plugin: FastifyPluginAsync;
}

/** `2026-11-24T20:59:01.123Z WARN message`: a line of the server's terminal output (and of marina.log). */
export function formatTerminalLine(level: LogLevel, message: string, now: Date = new Date()): string {
  // The terminal and marina.log get the cap and redaction of the log files (without the newline the caller adds).
  return capLogLine(`${now.toISOString()} ${level.toUpperCase()} ${message}`, TERMINAL_LINE_BYTES);
}

/** Longest terminal line: log_max_line_bytes' default (the terminal's lines are formatted before any configuration is read). */
const TERMINAL_LINE_BYTES = 4096;

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
 * The request lines of the server's own log, the one a user watches (the terminal in the foreground,
 * marina.log in the background): each failed request (401, 404, 413, 5xx), or every request, with
 * its level, request id, status, duration and, for a failure, its MARINA_ERR code. TorchServe's
 * access_log.log (every request) is written by the server's log files (logging/server-logs.ts).
 */
export function createRequestLog(options: RequestLogOptions): RequestLog {
  const codes = new WeakMap<FastifyRequest, string>();

  const onSend = (
    request: FastifyRequest,
    reply: FastifyReply,
    payload: unknown,
    done: (error: null, payload: unknown) => void,
  ) => {
    if (reply.statusCode >= 400 && typeof payload === 'string') {
      const failure = describeFailure(reply.statusCode, payload);
      if (failure !== undefined) codes.set(request, failure);
    }
    done(null, payload);
  };

  const onResponse = (request: FastifyRequest, reply: FastifyReply, done: () => void) => {
    const statusCode = reply.statusCode;
    const durationMs = reply.elapsedTime;
    const url = boundText(request.raw.url ?? request.url, REQUEST_URL_CHARS);
    if (options.log && (statusCode >= 400 || options.isEveryRequestLogged)) {
      const level: LogLevel = statusCode >= 500 ? 'error' : statusCode >= 400 ? 'warn' : 'info';
      const code = codes.get(request);
      options.log(
        level,
        `[${request.id}] ${request.method} ${url} ${statusCode} ${durationMs.toFixed(1)} ms${code ? ` ${code}` : ''}`,
      );
    }
    done();
  };

  const plugin: FastifyPluginAsync = async (app) => {
    app.addHook('onSend', onSend);
    app.addHook('onResponse', onResponse);
  };
  (plugin as unknown as Record<symbol, boolean>)[Symbol.for('skip-override')] = true;

  return { plugin };
}
