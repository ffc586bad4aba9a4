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
import { capLogLine } from '../bounded-text.ts';

/** TorchServe's five log files. */
export type LogFileName = 'access_log.log' | 'ts_log.log' | 'model_log.log' | 'ts_metrics.log' | 'model_metrics.log';

/** How large log lines and files may grow. */
export interface LogLimits {
  /** log_max_line_bytes: longest line written, bytes (a longer one is cut, with a marker). Default 4096. */
  maxLineBytes: number;
  /** log_max_file_bytes: a file this large is rolled over. Default 100 MiB. */
  maxFileBytes: number;
  /** log_max_backup_files: rolled-over files kept per log (`<file>.1` is the newest). 0 keeps none. Default 5. */
  maxBackupFiles: number;
}

/** How long a log line may wait in memory before it is written, ms. */
const LOG_FLUSH_INTERVAL_MS = 50;
/** The buffer of one file's lines not written yet: written at once when full (the bound on what waits in memory). */
const LOG_BUFFER_BYTES = 64 * 1024;

const LOG_FILES: readonly LogFileName[] = [
  'access_log.log',
  'ts_log.log',
  'model_log.log',
  'ts_metrics.log',
  'model_metrics.log',
];

/**
 * The open log files: one append stream per file, the lines buffered per file, the line cap and
 * the rotation. The one owner of the files' descriptors, sizes and buffers. A file that cannot be
 * opened (an unwritable LOG_LOCATION, a full disk) loses its lines, never the server, as TorchServe.
 */
export class LogFiles {
  readonly #logDir: string;
  readonly #metricsLogDir: string;
  readonly #limits: LogLimits;
  readonly #streams = new Map<LogFileName, WriteStream>();
  readonly #fds = new Map<LogFileName, number>();
  /** Bytes in each open file (its size when opened plus what was handed to its stream since). */
  readonly #sizes = new Map<LogFileName, number>();
  readonly #readyDirs = new Set<string>();
  /** Files that could not be opened: their lines are dropped without trying again on every line. */
  readonly #unwritable = new Set<LogFileName>();
  /**
   * Lines are encoded into one buffer per file as they come, and written every
   * LOG_FLUSH_INTERVAL_MS, or at once when a buffer is full: under load, one write for hundreds of
   * requests' access lines. Each write is handed to one of libuv's pool threads, and waking a
   * sleeping thread costs the HTTP thread 15-30 µs (measured on a 2-core VM), more than a tiny
   * model's whole request when it happened once per turn of the event loop. Encoding at once lets
   * each line's string die young instead of outliving a garbage collection or two.
   */
  readonly #pending = new Map<LogFileName, { bytes: Buffer; used: number }>();
  #flushTimer: ReturnType<typeof setTimeout> | undefined;
  #isClosed = false;
  // A process that ends without close() (an uncaught error) still writes the lines gathered.
  readonly #writeOnExit = () => {
    for (const [file, buffered] of this.#pending) {
      const fd = this.#fds.get(file);
      try {
        if (fd !== undefined) writeSync(fd, buffered.bytes, 0, buffered.used);
      } catch {
        // A full disk loses these lines, as it would any other.
      }
    }
  };

  /** Opens (creates) the five files at once: TorchServe's tests look for them right after start-up. */
  constructor(options: { logDir: string; metricsLogDir: string; limits: LogLimits }) {
    this.#logDir = options.logDir;
    this.#metricsLogDir = options.metricsLogDir;
    this.#limits = options.limits;
    process.once('exit', this.#writeOnExit);
    for (const file of LOG_FILES) this.#streamOf(file);
  }

  /** Appends a line (capped at log_max_line_bytes); it is written within LOG_FLUSH_INTERVAL_MS. */
  write(file: LogFileName, line: string): void {
    if (this.#isClosed) return;
    const text = capLogLine(line, this.#limits.maxLineBytes);
    // Roll over before the line that would take the file past its limit (lines wait in a buffer of
    // up to 64 KiB, so checking only after a write could let a file pass the limit by that much).
    const projected = (this.#sizes.get(file) ?? 0) + (this.#pending.get(file)?.used ?? 0);
    if (projected > 0 && projected + Buffer.byteLength(text) > this.#limits.maxFileBytes) {
      this.#flushFile(file);
      if (this.#streams.has(file)) this.#rotate(file);
    }
    // At most 3 bytes per UTF-16 unit: a line that may not fit goes after the buffer's lines.
    const maxBytes = text.length * 3;
    let buffered = this.#pending.get(file);
    if (buffered && buffered.used + maxBytes > buffered.bytes.length) {
      this.#flushFile(file);
      buffered = undefined;
    }
    if (maxBytes > LOG_BUFFER_BYTES) {
      this.#writeToFile(file, text);
      return;
    }
    if (!buffered) {
      buffered = { bytes: Buffer.allocUnsafeSlow(LOG_BUFFER_BYTES), used: 0 };
      this.#pending.set(file, buffered);
    }
    buffered.used += buffered.bytes.write(text, buffered.used, 'utf8');
    if (this.#flushTimer === undefined) {
      this.#flushTimer = setTimeout(() => this.#flush(), LOG_FLUSH_INTERVAL_MS);
      // Never keeps the process alive; close() writes what is left.
      this.#flushTimer.unref();
    }
  }

  /** Writes what is buffered and closes the files; later lines are dropped. Idempotent. */
  async close(): Promise<void> {
    if (this.#isClosed) return;
    this.#flush();
    this.#isClosed = true;
    process.off('exit', this.#writeOnExit);
    await Promise.all([...this.#streams.values()].map((s) => new Promise<void>((resolve) => s.end(resolve))));
  }

  #dirOf(file: LogFileName): string {
    return file === 'ts_metrics.log' || file === 'model_metrics.log' ? this.#metricsLogDir : this.#logDir;
  }

  #streamOf(file: LogFileName): WriteStream | undefined {
    const open = this.#streams.get(file);
    if (open) return open;
    if (this.#unwritable.has(file)) return undefined;
    const dir = this.#dirOf(file);
    if (!this.#readyDirs.has(dir)) {
      try {
        mkdirSync(dir, { recursive: true });
      } catch {
        this.#unwritable.add(file);
        return undefined; // An unwritable LOG_LOCATION loses the log lines, never the server (as TorchServe).
      }
      this.#readyDirs.add(dir);
    }
    // Opened synchronously: the files exist once the constructor returns.
    let fd: number;
    try {
      fd = openSync(join(dir, file), 'a');
      this.#sizes.set(file, fstatSync(fd).size);
    } catch {
      this.#unwritable.add(file);
      return undefined; // A read-only folder loses the lines of this file, never the server.
    }
    this.#fds.set(file, fd);
    const stream = createWriteStream('', { fd, flags: 'a' });
    // A full disk or a read-only folder must not crash the server: the line is lost, serving goes on.
    stream.on('error', () => undefined);
    this.#streams.set(file, stream);
    return stream;
  }

  /**
   * Rolls `file` over: `<file>.N-1` → `<file>.N` … `<file>` → `<file>.1`, the oldest dropped; the
   * old stream finishes its queued writes into what is now `<file>.1` (its descriptor follows the
   * rename), and the next line opens a fresh `<file>`. Renames only: no copy, no compression.
   */
  #rotate(file: LogFileName): void {
    const stream = this.#streams.get(file);
    this.#streams.delete(file);
    this.#fds.delete(file);
    this.#sizes.delete(file);
    stream?.end();
    const path = join(this.#dirOf(file), file);
    const { maxBackupFiles } = this.#limits;
    try {
      if (maxBackupFiles === 0) rmSync(path, { force: true });
      else {
        rmSync(`${path}.${maxBackupFiles}`, { force: true });
        for (let n = maxBackupFiles - 1; n >= 1; n--) {
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
  }

  #writeToFile(file: LogFileName, chunk: Buffer | string): void {
    const stream = this.#streamOf(file);
    if (!stream) return;
    stream.write(chunk);
    const size = (this.#sizes.get(file) ?? 0) + (typeof chunk === 'string' ? Buffer.byteLength(chunk) : chunk.length);
    this.#sizes.set(file, size);
    // A single line larger than the limit (log_max_line_bytes above log_max_file_bytes) gets a file of its own.
    if (size >= this.#limits.maxFileBytes) this.#rotate(file);
  }

  #flushFile(file: LogFileName): void {
    const buffered = this.#pending.get(file);
    if (!buffered || buffered.used === 0) return;
    // The stream keeps the bytes until they are written: the next lines go to a new buffer.
    this.#writeToFile(file, buffered.bytes.subarray(0, buffered.used));
    this.#pending.delete(file);
  }

  #flush(): void {
    clearTimeout(this.#flushTimer);
    this.#flushTimer = undefined;
    for (const file of [...this.#pending.keys()]) this.#flushFile(file);
  }
}
