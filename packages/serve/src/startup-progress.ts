/** One step of loading the start-up models, as startServer reports it through `onProgress`. */
export type StartupProgressEvent =
  | { phase: 'loading'; url: string; sizeBytes?: number }
  | { phase: 'loaded'; url: string; modelName: string; modelVersion: string; elapsedMs: number }
  | { phase: 'failed'; url: string; elapsedMs: number }
  /** Registered and not loaded: beyond model_memory_budget (it loads on its first request). */
  | { phase: 'registered'; url: string; modelName: string; modelVersion: string; elapsedMs: number };

export interface StartupProgressPrinter {
  onProgress(event: StartupProgressEvent): void;
  /** Clears the live line (on a terminal) and stops its timer. Idempotent. */
  stop(): void;
}

const TICK_MS = 200;

/**
 * Shows the start-up models loading. On a terminal, one live line with the models still loading
 * and the seconds so far, redrawn every 200 ms, and a line per model once it is ready. Elsewhere
 * (a log file), one line when a model starts loading and one when it is ready.
 */
export function createStartupProgress(options: {
  stream: NodeJS.WritableStream;
  isTty: boolean;
}): StartupProgressPrinter {
  const { stream, isTty } = options;
  const loading = new Map<string, { sizeBytes?: number }>();
  const startedAt = performance.now();
  let timer: NodeJS.Timeout | undefined;
  let hasLiveLine = false;
  const clearLive = () => {
    if (hasLiveLine) stream.write('\r\x1b[2K');
    hasLiveLine = false;
  };
  const drawLive = () => {
    if (loading.size === 0) return;
    const names = [...loading.entries()].map(
      ([url, { sizeBytes }]) => `${url}${sizeBytes === undefined ? '' : ` (${formatSize(sizeBytes)})`}`,
    );
    const reported = (stream as NodeJS.WriteStream).columns;
    const columns = reported !== undefined && reported >= 20 ? reported : 100;
    const text = `Loading and optimising ${names.join(', ')}: ${seconds(performance.now() - startedAt)}`;
    stream.write(`\r\x1b[2K${text.length > columns - 1 ? `${text.slice(0, columns - 2)}…` : text}`);
    hasLiveLine = true;
  };
  const stop = () => {
    if (timer) clearInterval(timer);
    timer = undefined;
    clearLive();
  };
  return {
    onProgress(event) {
      if (event.phase === 'loading') {
        loading.set(event.url, { ...(event.sizeBytes === undefined ? {} : { sizeBytes: event.sizeBytes }) });
        if (!isTty) {
          stream.write(
            `Loading model ${event.url}${event.sizeBytes === undefined ? '' : ` (${formatSize(event.sizeBytes)})`}...\n`,
          );
          return;
        }
        timer ??= setInterval(drawLive, TICK_MS).unref();
        drawLive();
        return;
      }
      loading.delete(event.url);
      clearLive();
      if (event.phase === 'loaded')
        stream.write(`Model ${event.modelName} (version ${event.modelVersion}) ready in ${seconds(event.elapsedMs)}\n`);
      if (event.phase === 'registered')
        stream.write(
          `Model ${event.modelName} (version ${event.modelVersion}) registered, not loaded: model_memory_budget is full; it loads on its first request\n`,
        );
      if (loading.size === 0) stop();
      else if (isTty) drawLive();
    },
    stop,
  };
}

function seconds(ms: number): string {
  return `${(ms / 1000).toFixed(1)} s`;
}

/** Decimal units, as marina-models and model-archiver print sizes. */
function formatSize(bytes: number): string {
  return bytes >= 1e6 ? `${(bytes / 1e6).toFixed(1)} MB` : `${(bytes / 1e3).toFixed(1)} kB`;
}
