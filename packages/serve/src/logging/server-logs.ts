/**
 * TorchServe's log files under LOG_LOCATION (default `logs/`), in its log4j2 layout
 * `%d{ISO8601} [%-5p] %t %c - %m`, so the tools that read TorchServe's logs read these:
 * - `access_log.log`: one line per answered request, every status (401, 404, 413 too):
 *   `2026-01-01T12:00:00,123 [INFO ] <requestId> ACCESS_LOG - /127.0.0.1:51234 "GET /ping HTTP/1.1" 200 3`
 *   (client, method, path, status, duration in ms); the thread slot carries the request id.
 * - `ts_log.log`: the server's own messages (start-up, models, autoscaler, snapshots, 5xx answers).
 * - `model_log.log`: messages about models and their workers (loads, failures, restarts).
 * - `ts_metrics.log` / `model_metrics.log` under METRICS_LOCATION (default `logs/`), created at start-up as
 *   TorchServe's log4j2 creates them; written to with metrics_mode=log (see metrics/log-metrics.ts).
 * Lines are appended through one write stream per file, every 50 ms (sooner when 64 KiB gathered); close() flushes them.
 * Every line is capped (log_max_line_bytes, with a marker giving its length) and credentials in URLs
 * are redacted; a file that reaches log_max_file_bytes is rolled over to `<file>.1` … `<file>.N`
 * (log_max_backup_files), as TorchServe's log4j2 RollingFile (100 MB, 5 files) does.
 */
import { boundText } from '../bounded-text.ts';
import { LogFiles, type LogLimits } from './log-files.ts';

/** The defaults of log rotation and line capping (TorchServe's log4j2.xml: 100 MB, 5 files). */
export const DEFAULT_LOG_LIMITS: Readonly<LogLimits> = Object.freeze({
  maxLineBytes: 4096,
  maxFileBytes: 100 * 1024 * 1024,
  maxBackupFiles: 5,
});

export type LogLevel = 'debug' | 'info' | 'warn' | 'error';

export interface AccessLogEntry {
  /** `ip:port` of the client. */
  client: string;
  method: string;
  /** The request target as sent (path and query). */
  url: string;
  statusCode: number;
  durationMs: number;
  requestId: string;
  /** The priority level the request waited at, for a model with more than one (appended as `priority=N`). */
  priority?: number;
}

export interface ServerLogs {
  /** The folder of access_log.log, ts_log.log and model_log.log (LOG_LOCATION). */
  readonly logDir: string;
  /** The folder of ts_metrics.log and model_metrics.log (METRICS_LOCATION). */
  readonly metricsLogDir: string;
  access(entry: AccessLogEntry): void;
  /** A server message in ts_log.log; `requestId` goes in the thread slot when the line is about a request. */
  ts(level: LogLevel, message: string, requestId?: string): void;
  /** A model message in model_log.log (and ts_log.log, as TorchServe's root logger also gets them). */
  model(level: LogLevel, message: string, requestId?: string): void;
  /** A raw line (already `Name.Unit:value|#dims|#hostname:…,timestamp:…`) in ts_metrics.log or model_metrics.log. */
  metric(file: 'ts_metrics.log' | 'model_metrics.log', line: string): void;
  /** Flushes and closes every file. Idempotent. */
  close(): Promise<void>;
}

const pad = (n: number, width = 2) => String(n).padStart(width, '0');

/** The formatted date up to the second of the last call (a line per request is written many times a second). */
let lastSecond = Number.NaN;
let lastSecondText = '';

/** log4j2's `%d{ISO8601}`: `yyyy-MM-dd'T'HH:mm:ss,SSS`, local time. */
export function formatIso8601(date: Date): string {
  const second = Math.floor(date.getTime() / 1000);
  if (second !== lastSecond) {
    lastSecond = second;
    lastSecondText = `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())}T${pad(date.getHours())}:${pad(date.getMinutes())}:${pad(date.getSeconds())},`;
  }
  return lastSecondText + pad(date.getMilliseconds(), 3);
}

/** One line in TorchServe's layout `%d{ISO8601} [%-5p] %t %c - %m`. */
export function formatLogLine(options: {
  date: Date;
  level: LogLevel;
  thread: string;
  logger: string;
  message: string;
}): string {
  const level = options.level.toUpperCase().padEnd(5, ' ');
  // One event, one line: a message with newlines (a stack) keeps them escaped so every line has time and level.
  const message = options.message.includes('\n') ? options.message.replace(/\r?\n/g, '\\n') : options.message;
  return `${formatIso8601(options.date)} [${level}] ${options.thread} ${options.logger} - ${message}\n`;
}

/** TorchServe's access log message: `/ip:port "METHOD path HTTP/1.1" status durationMs`. */
export function formatAccessMessage(entry: AccessLogEntry, maxUrlChars = 1024): string {
  const line = `/${entry.client} "${entry.method} ${boundText(entry.url, maxUrlChars)} HTTP/1.1" ${entry.statusCode} ${Math.round(entry.durationMs)}`;
  return entry.priority === undefined ? line : `${line} priority=${entry.priority}`;
}

/**
 * Opens TorchServe's log files at once (TorchServe's tests expect them right after start-up):
 * access_log.log, ts_log.log and model_log.log in `logDir`; ts_metrics.log and model_metrics.log
 * in `metricsLogDir` (default `logDir`). Folders are created when missing.
 */
export function createServerLogs(options: {
  logDir: string;
  metricsLogDir?: string;
  now?: () => Date;
  /** Line cap and rotation; DEFAULT_LOG_LIMITS for what is not given. */
  limits?: Partial<LogLimits>;
}): ServerLogs {
  const { logDir } = options;
  const metricsLogDir = options.metricsLogDir ?? logDir;
  const now = options.now ?? (() => new Date());
  const limits: LogLimits = { ...DEFAULT_LOG_LIMITS, ...definedOf(options.limits ?? {}) };
  const files = new LogFiles({ logDir, metricsLogDir, limits });
  return {
    logDir,
    metricsLogDir,
    access(entry) {
      files.write(
        'access_log.log',
        formatLogLine({
          date: now(),
          level: 'info',
          thread: entry.requestId,
          logger: 'ACCESS_LOG',
          // A quarter of the line cap (1024 characters by default): the line keeps its status and time.
          message: formatAccessMessage(entry, Math.floor(limits.maxLineBytes / 4)),
        }),
      );
    },
    ts(level, message, requestId) {
      files.write(
        'ts_log.log',
        formatLogLine({
          date: now(),
          level,
          thread: requestId ?? 'main',
          logger: 'org.pytorch.serve.ModelServer',
          message,
        }),
      );
    },
    model(level, message, requestId) {
      const date = now();
      const thread = requestId ?? 'W-marina';
      files.write('model_log.log', formatLogLine({ date, level, thread, logger: 'MODEL_LOG', message }));
      files.write(
        'ts_log.log',
        formatLogLine({ date, level, thread, logger: 'org.pytorch.serve.wlm.WorkerThread', message }),
      );
    },
    metric(file, line) {
      files.write(file, `${formatIso8601(now())} - ${line}\n`);
    },
    close: () => files.close(),
  };
}

/** The fields of `value` that are set. */
function definedOf<T extends object>(value: T): Partial<T> {
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined)) as Partial<T>;
}
