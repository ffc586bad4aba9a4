/**
 * Finished spans, batched into export requests and sent, off the request's way: a span is written
 * into the current request body when it ends (see otlp-span-writer.ts); a body is sent when it
 * holds `maxExportBatchSize` spans or `scheduledDelayMs` after its first span. Bounded, as the
 * SDK's batch processor: at most `maxQueueSize` spans wait (written or in bodies not yet sent) and
 * `maxConcurrentExports` bodies are in flight; past that a span is dropped (counted), so a slow or
 * dead collector costs a fixed amount of memory and never blocks a request.
 */
import type { SpanRecord, SpanWriter } from './otlp-span-writer.ts';

/** Where export request bodies go. */
export interface SpanTransport {
  /** Sends one export request; resolves true when the receiver took it, false when it was lost (never rejects). */
  send(body: Uint8Array, spanCount: number): Promise<boolean>;
  /** Releases the transport's connections; exports still in flight are given up (they resolve false). */
  shutdown(): Promise<void>;
}

/** One export body and how many spans it holds. */
interface ExportBatch {
  body: Uint8Array;
  count: number;
}

/** OTEL_TRACES_EXPORTER=console: each export request's OTLP/JSON body, one line on stdout. */
export function consoleTransport(write: (line: string) => void = (line) => process.stdout.write(line)): SpanTransport {
  return {
    send: async (body) => {
      write(`${Buffer.from(body).toString('utf8')}\n`);
      return true;
    },
    shutdown: async () => {},
  };
}

export interface SpanBatcherOptions {
  writer: SpanWriter;
  transport: SpanTransport;
  /** Spans that may wait to be sent, written or in bodies queued (the SDK's maxQueueSize). */
  maxQueueSize: number;
  /** Spans per export request. */
  maxExportBatchSize: number;
  /** How long a span may wait for its body to fill, ms. */
  scheduledDelayMs: number;
  /** Export requests in flight at once. */
  maxConcurrentExports: number;
  /**
   * Told when spans are lost (dropped, or in an export that failed): at the first loss, then at
   * most once every LOSS_REPORT_INTERVAL_MS, with the totals so far.
   */
  onLoss?: (counts: Readonly<SpanBatcherCounts>) => void;
}

/** How often a batcher reports lost spans at most, ms: a dead collector must not flood the log. */
const LOSS_REPORT_INTERVAL_MS = 60_000;

/** What the batcher did with the spans it was given. */
export interface SpanBatcherCounts {
  /** Spans in export requests the receiver took. */
  exported: number;
  /** Spans in export requests that failed (the receiver refused, or could not be reached). */
  failed: number;
  /** Spans dropped because the queue was full (or the batcher shut down). */
  dropped: number;
}

export class SpanBatcher {
  readonly #options: SpanBatcherOptions;
  readonly #queued: ExportBatch[] = [];
  #queuedSpans = 0;
  readonly #inFlight = new Set<Promise<void>>();
  #timer: NodeJS.Timeout | undefined;
  #isShutDown = false;
  readonly #counts: SpanBatcherCounts = { exported: 0, failed: 0, dropped: 0 };
  #lossReportedAt = Number.NEGATIVE_INFINITY;
  #lossReported = 0;

  constructor(options: SpanBatcherOptions) {
    this.#options = options;
  }

  get counts(): Readonly<SpanBatcherCounts> {
    return this.#counts;
  }

  /** Writes a finished span into the current export request, or drops it when the queue is full. */
  add(span: SpanRecord): void {
    const { writer } = this.#options;
    if (this.#isShutDown || this.#queuedSpans + writer.count >= this.#options.maxQueueSize) {
      this.#counts.dropped++;
      this.#reportLoss();
      return;
    }
    writer.add(span);
    if (writer.count >= this.#options.maxExportBatchSize) this.#seal();
    else if (this.#timer === undefined) {
      this.#timer = setTimeout(() => {
        this.#timer = undefined;
        this.#seal();
      }, this.#options.scheduledDelayMs);
      this.#timer.unref();
    }
  }

  /** Sends every span written so far; resolves once each export request has been answered (or failed). */
  async forceFlush(): Promise<void> {
    this.#seal();
    while (this.#inFlight.size > 0) await Promise.all([...this.#inFlight]);
  }

  /**
   * Sends what is left and stops taking spans; waits at most `timeoutMs` for the receiver (spans
   * still unsent then are lost: a dead collector must not hold a server's exit).
   */
  async shutdown(timeoutMs: number): Promise<void> {
    const flushed = this.forceFlush();
    this.#isShutDown = true;
    let timer: NodeJS.Timeout | undefined;
    const deadline = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, timeoutMs);
    });
    await Promise.race([flushed.catch(() => undefined), deadline]);
    clearTimeout(timer);
    // Past the deadline, exports still in flight (a collector that does not answer, retries) are given up
    // and the transport's sockets closed: nothing of tracing outlives the server.
    await this.#options.transport.shutdown();
  }

  #reportLoss(): void {
    const lost = this.#counts.dropped + this.#counts.failed;
    const now = performance.now();
    if (!this.#options.onLoss || lost === this.#lossReported || now - this.#lossReportedAt < LOSS_REPORT_INTERVAL_MS)
      return;
    this.#lossReportedAt = now;
    this.#lossReported = lost;
    this.#options.onLoss({ ...this.#counts });
  }

  #seal(): void {
    if (this.#timer !== undefined) {
      clearTimeout(this.#timer);
      this.#timer = undefined;
    }
    const { writer } = this.#options;
    const count = writer.count;
    if (count === 0) return;
    this.#queued.push({ body: writer.take(), count });
    this.#queuedSpans += count;
    this.#pump();
  }

  #pump(): void {
    while (this.#inFlight.size < this.#options.maxConcurrentExports && this.#queued.length > 0) {
      const batch = this.#queued.shift()!;
      this.#queuedSpans -= batch.count;
      const sent: Promise<void> = this.#options.transport.send(batch.body, batch.count).then(
        (isOk) => this.#settle(sent, batch.count, isOk),
        () => this.#settle(sent, batch.count, false),
      );
      this.#inFlight.add(sent);
    }
  }

  #settle(sent: Promise<void>, count: number, isOk: boolean): void {
    if (isOk) this.#counts.exported += count;
    else {
      this.#counts.failed += count;
      this.#reportLoss();
    }
    this.#inFlight.delete(sent);
    this.#pump();
  }
}
