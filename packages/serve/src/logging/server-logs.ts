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
import {
  createWriteStream,
  fstatSync,
  mkdirSync,
  openSync,
  renameSync,
  rmSync,
  writeSync,
  type WriteStream,
} from 'node:fs';
import { join } from 'node:path';
import { boundText, capLogLine } from '../bounded-text.ts';

/** The defaults of log rotation and line capping (TorchServe's log4j2.xml: 100 MB, 5 files). */
export const DEFAULT_LOG_LIMITS: Readonly<LogLimits> = Object.freeze({
  maxLineBytes: 4096,
  maxFileBytes: 100 * 1024 * 1024,
  maxBackupFiles: 5,
});

/** How large log lines and files may grow. */
export interface LogLimits {
  /** log_max_line_bytes: longest line written, bytes (a longer one is cut, with a marker). Default 4096. */
  maxLineBytes: number;
  /** log_max_file_bytes: a file this large is rolled over. Default 100 MiB. */
  maxFileBytes: number;
  /** log_max_backup_files: rolled-over files kept per log (`<file>.1` is the newest). 0 keeps none. Default 5. */
  maxBackupFiles: number;
}

export type LogLevel = 'debug' | 'info' | 'warn' | 'error';

export type LogFileName = 'access_log.log' | 'ts_log.log' | 'model_log.log' | 'ts_metrics.log' | 'model_metrics.log';

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

/** How long a log line may wait in memory before it is written, ms. */
const LOG_FLUSH_INTERVAL_MS = 50;
/** The buffer of one file's lines not written yet: written at once when full (the bound on what waits in memory). */
const LOG_BUFFER_BYTES = 64 * 1024;

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
  const streams = new Map<LogFileName, WriteStream>();
  const fds = new Map<LogFileName, number>();
  /** Bytes in each open file (its size when opened plus what was handed to its stream since). */
  const sizes = new Map<LogFileName, number>();
  const pathOf = (file: LogFileName) =>
    join(file === 'ts_metrics.log' || file === 'model_metrics.log' ? metricsLogDir : logDir, file);
  let isClosed = false;
  const readyDirs = new Set<string>();
  /** Files that could not be opened: their lines are dropped without trying again on every line. */
  const unwritable = new Set<LogFileName>();

  const streamOf = (file: LogFileName): WriteStream | undefined => {
    let stream = streams.get(file);
    if (!stream) {
      if (unwritable.has(file)) return undefined;
      const dir = file === 'ts_metrics.log' || file === 'model_metrics.log' ? metricsLogDir : logDir;
      if (!readyDirs.has(dir)) {
        try {
          mkdirSync(dir, { recursive: true });
        } catch {
          unwritable.add(file);
          return undefined; // An unwritable LOG_LOCATION loses the log lines, never the server (as TorchServe).
        }
        readyDirs.add(dir);
      }
      // Opened synchronously: the files exist once createServerLogs returns (TorchServe's tests look for them right after start-up).
      let fd: number;
      try {
        fd = openSync(join(dir, file), 'a');
        sizes.set(file, fstatSync(fd).size);
      } catch {
        unwritable.add(file);
        return undefined; // A read-only folder loses the lines of this file, never the server.
      }
      fds.set(file, fd);
      stream = createWriteStream('', { fd, flags: 'a' });
      // A full disk or a read-only folder must not crash the server: the line is lost, serving goes on.
      stream.on('error', () => undefined);
      streams.set(file, stream);
    }
    return stream;
  };
  // Lines are encoded into one buffer per file as they come, and written every
  // LOG_FLUSH_INTERVAL_MS, or at once when a buffer is full: under load, one write for hundreds of
  // requests' access lines. Each write is handed to one of libuv's pool threads, and waking a
  // sleeping thread costs the HTTP thread 15-30 µs (measured on a 2-core VM), more than a tiny
  // model's whole request when it happened once per turn of the event loop. Encoding at once lets
  // each line's string die young instead of outliving a garbage collection or two.
  const pending = new Map<LogFileName, { bytes: Buffer; used: number }>();
  let flushTimer: ReturnType<typeof setTimeout> | undefined;
  /**
   * Rolls `file` over: `<file>.N-1` → `<file>.N` … `<file>` → `<file>.1`, the oldest dropped; the
   * old stream finishes its queued writes into what is now `<file>.1` (its descriptor follows the
   * rename), and the next line opens a fresh `<file>`. Renames only: no copy, no compression.
   */
  const rotate = (file: LogFileName) => {
    const stream = streams.get(file);
    streams.delete(file);
    fds.delete(file);
    sizes.delete(file);
    stream?.end();
    const path = pathOf(file);
    try {
      if (limits.maxBackupFiles === 0) rmSync(path, { force: true });
      else {
        rmSync(`${path}.${limits.maxBackupFiles}`, { force: true });
        for (let n = limits.maxBackupFiles - 1; n >= 1; n--) {
          try {
            renameSync(`${path}.${n}`, `${path}.${n + 1}`);
          } catch {
            // No such backup yet.
          }
        }
        renameSync(path, `${path}.1`);
      }
    } catch {
      // A folder that refuses the renames keeps growing the one file rather than losing lines.
    }
  };
  const writeToFile = (file: LogFileName, chunk: Buffer | string) => {
    const stream = streamOf(file);
    if (!stream) return;
    stream.write(chunk);
    const size = (sizes.get(file) ?? 0) + (typeof chunk === 'string' ? Buffer.byteLength(chunk) : chunk.length);
    sizes.set(file, size);
    // A single line larger than the limit (log_max_line_bytes above log_max_file_bytes) gets a file of its own.
    if (size >= limits.maxFileBytes) rotate(file);
  };
  const flushFile = (file: LogFileName) => {
    const buffered = pending.get(file);
    if (!buffered || buffered.used === 0) return;
    // The stream keeps the bytes until they are written: the next lines go to a new buffer.
    writeToFile(file, buffered.bytes.subarray(0, buffered.used));
    pending.delete(file);
  };
  const flush = () => {
    clearTimeout(flushTimer);
    flushTimer = undefined;
    for (const file of [...pending.keys()]) flushFile(file);
  };
  const write = (file: LogFileName, line: string) => {
    if (isClosed) return;
    const text = capLogLine(line, limits.maxLineBytes);
    // Roll over before the line that would take the file past its limit (lines wait in a buffer of
    // up to 64 KiB, so checking only after a write could let a file pass the limit by that much).
    const projected = (sizes.get(file) ?? 0) + (pending.get(file)?.used ?? 0);
    if (projected > 0 && projected + Buffer.byteLength(text) > limits.maxFileBytes) {
      flushFile(file);
      if (streams.has(file)) rotate(file);
    }
    // At most 3 bytes per UTF-16 unit: a line that may not fit goes after the buffer's lines.
    const maxBytes = text.length * 3;
    let buffered = pending.get(file);
    if (buffered && buffered.used + maxBytes > buffered.bytes.length) {
      flushFile(file);
      buffered = undefined;
    }
    if (maxBytes > LOG_BUFFER_BYTES) {
      writeToFile(file, text);
      return;
    }
    if (!buffered) {
      buffered = { bytes: Buffer.allocUnsafeSlow(LOG_BUFFER_BYTES), used: 0 };
      pending.set(file, buffered);
    }
    buffered.used += buffered.bytes.write(text, buffered.used, 'utf8');
    if (flushTimer === undefined) {
      flushTimer = setTimeout(flush, LOG_FLUSH_INTERVAL_MS);
      // Never keeps the process alive; close() writes what is left.
      flushTimer.unref();
    }
  };
  // A process that ends without close() (an uncaught error) still writes the lines gathered.
  const writeOnExit = () => {
    for (const [file, buffered] of pending) {
      const fd = fds.get(file);
      try {
        if (fd !== undefined) writeSync(fd, buffered.bytes, 0, buffered.used);
      } catch {
        // A full disk loses these lines, as it would any other.
      }
    }
  };
  process.once('exit', writeOnExit);
  for (const file of [
    'access_log.log',
    'ts_log.log',
    'model_log.log',
    'ts_metrics.log',
    'model_metrics.log',
  ] as LogFileName[])
    streamOf(file);

  return {
    logDir,
    metricsLogDir,
    access(entry) {
      write(
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
      write(
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
      write(
        'model_log.log',
        formatLogLine({ date, level, thread: requestId ?? 'W-marina', logger: 'MODEL_LOG', message }),
      );
      write(
        'ts_log.log',
        formatLogLine({
          date,
          level,
          thread: requestId ?? 'W-marina',
          logger: 'org.pytorch.serve.wlm.WorkerThread',
          message,
        }),
      );
    },
    metric(file, line) {
      write(file, `${formatIso8601(now())} - ${line}\n`);
    },
    async close() {
      if (isClosed) return;
      flush();
      isClosed = true;
      process.off('exit', writeOnExit);
      await Promise.all([...streams.values()].map((s) => new Promise<void>((resolve) => s.end(resolve))));
    },
  };
}

/** The fields of `value` that are set. */
function definedOf<T extends object>(value: T): Partial<T> {
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined)) as Partial<T>;
}
