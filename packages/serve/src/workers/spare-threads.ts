import { Worker as NodeWorker } from 'node:worker_threads';
import { endThreadSafely, newNativeCallGauge } from './native-calls.ts';

/** The bootstrap's word that a spare thread has imported the worker's modules and waits for its model. */
const SPARE_READY = 'spare-ready';

/** Sent to a spare thread to give it its model (`init`: the WorkerInit a new thread gets as workerData). */
export interface AssignMessage {
  type: 'assign';
  init: unknown;
}

export interface SpareThreadsOptions {
  bootstrapUrl: URL;
  /** The spare's V8 heap limit, MB (maxWorkerHeapMb): only a worker with the same limit takes it. */
  maxHeapMb: number;
  /**
   * Whether a load now would find room without evicting (default: always). When it would not, the
   * load evicts a model whose thread it takes (offer), so no spare is started or kept for it: an
   * idle thread holds 30–45 MB (measured) that a full budget does not have.
   */
  hasRoomForLoad?: () => boolean;
}

/**
 * The spare threads as a worker uses them: a thread to start on, and one to give back once it has
 * left its model (see Worker.retire's `isRecycled`).
 */
export interface SpareThreadPool {
  /** A ready spare thread with this heap limit, or undefined: start a thread of your own (see SpareThreads.take). */
  take(maxHeapMb: number): Promise<NodeWorker | undefined>;
  /** Whether a thread with this heap limit would be taken now: ask before telling a thread to leave its model. */
  wants(maxHeapMb: number): boolean;
  /** Takes the thread (it said `recycled`: it waits for an AssignMessage) as a spare; false: not taken, end it. */
  offer(thread: NodeWorker, maxHeapMb: number): boolean;
}

interface Spare {
  thread: NodeWorker;
  /** Resolves true once the thread has imported its modules, false when it died first. */
  ready: Promise<boolean>;
  /** Removes the spare's own listeners before the thread is handed over. */
  release(): void;
  /** Ends the thread, never in the middle of its import of onnxruntime-node (native-calls.ts); resolves once it has ended. */
  stop(): Promise<void>;
  /** Releases the spare and ends its thread (a spare no load will take). */
  end(): Promise<void>;
}

/**
 * One idle worker thread kept ready for the next model load: it has imported the worker's modules
 * (onnxruntime-node, sharp, the handlers), which is most of a new thread's start, so a load that
 * takes it only creates its session. Used when models come and go (model_memory_budget): a
 * ResNet-50 demand load measured 0.7–1.7 s on 2 busy cores, of which the session was 30–150 ms
 * and the thread's imports the rest. A spare holds a thread and its modules' memory (30–45 MB)
 * while it waits. A model evicted to make room gives its thread back (offer), and the load that
 * evicted it takes that one: while the budget is full no spare is started or kept (hasRoomForLoad).
 */
export class SpareThreads implements SpareThreadPool {
  readonly #options: SpareThreadsOptions;
  /** Started or recycled, the last one first taken; at most MAX_SPARES, one once the loads are done (prepare). */
  readonly #spares: Spare[] = [];
  #isClosed = false;
  #lastTakenAt = Number.NEGATIVE_INFINITY;

  constructor(options: SpareThreadsOptions) {
    this.#options = options;
  }

  /**
   * Starts the spare if there is none (at most one at a time). `isWarmedUp`: once ready, it decodes
   * a generated image (worker-main's warmUpSpareThread, 20–25 ms of CPU), so the first request of
   * the model it is given decodes faster; off for a spare started while loads come back to back
   * (take), where that CPU would go to every load.
   */
  prepare(options: { isWarmedUp?: boolean } = {}): void {
    if (this.#isClosed) return;
    // Threads recycled for loads that are done (an eviction freed more than one): one stays, or
    // none when the next load will evict a model and take its thread.
    const keep = this.#options.hasRoomForLoad?.() === false ? 0 : 1;
    while (this.#spares.length > keep) void this.#spares.shift()!.end();
    if (this.#spares.length >= keep) return;
    this.#start(options);
  }

  /** Starts a spare thread. */
  #start(options: { isWarmedUp?: boolean }): void {
    // The spare counts its import of onnxruntime-node here: ended during it, it exits once it is done (end).
    const gauge = newNativeCallGauge();
    const thread = new NodeWorker(this.#options.bootstrapUrl, {
      workerData: { spare: true, isWarmedUp: options.isWarmedUp ?? true, nativeCalls: gauge },
      stdout: false,
      stderr: false,
      resourceLimits: { maxOldGenerationSizeMb: this.#options.maxHeapMb },
    });
    let settle: (isReady: boolean) => void = () => undefined;
    const ready = new Promise<boolean>((resolve) => {
      settle = resolve;
    });
    const onMessage = (message: { type?: string }) => {
      if (message?.type === SPARE_READY) settle(true);
    };
    thread.on('message', onMessage);
    this.#add(
      thread,
      ready,
      () => {
        settle(false);
        thread.off('message', onMessage);
      },
      gauge,
    );
  }

  /**
   * Keeps `thread` as a spare until it is taken; `onGone`: it died first (or is being released: undo
   * your own listeners). `gauge`: the one a started spare counts its import in (a thread recycled
   * from a model has none: it imported its modules long ago and runs nothing while it waits).
   */
  #add(thread: NodeWorker, ready: Promise<boolean>, onGone: () => void, gauge?: Int32Array): void {
    let hasExited = false;
    const onExit = () => {
      hasExited = true;
    };
    thread.once('exit', onExit);
    const gone = () => {
      onGone();
      const at = this.#spares.indexOf(spare);
      if (at >= 0) this.#spares.splice(at, 1);
    };
    const spare: Spare = {
      thread,
      ready,
      // Every listener the spare added goes with it: a thread recycled from model to model comes
      // back here each time, and kept one more 'exit' listener (and the spare it closed over) for
      // each (Node warned of a leak at the eleventh, under Zipf traffic).
      release: () => {
        onGone();
        thread.off('error', gone);
        thread.off('exit', gone);
        thread.off('exit', onExit);
      },
      stop: () =>
        gauge
          ? endThreadSafely(thread, gauge, () => hasExited)
          : thread.terminate().then(
              () => undefined,
              () => undefined,
            ),
      end: () => {
        spare.release();
        return spare.stop();
      },
    };
    this.#spares.push(spare);
    thread.once('error', gone);
    thread.once('exit', gone);
    // A spare never keeps the process alive.
    thread.unref();
  }

  wants(maxHeapMb: number): boolean {
    return !this.#isClosed && maxHeapMb === this.#options.maxHeapMb && this.#spares.length < MAX_SPARES;
  }

  /**
   * A worker's thread that left its model (an eviction that makes room for a load) becomes a spare:
   * the load takes it (the last one first) instead of a thread that must be started, and nothing
   * ends. A thread that ran an archive's own handler code never comes here (Worker.#isRecyclable).
   */
  offer(thread: NodeWorker, maxHeapMb: number): boolean {
    if (!this.wants(maxHeapMb)) return false;
    this.#add(thread, Promise.resolve(true), () => undefined);
    return true;
  }

  /**
   * The spare thread, once it is ready (a spare still starting is waited for: it began before any
   * new thread would), when it has the heap limit asked for: the caller posts it an AssignMessage
   * and owns it from then on. With none prepared, one starts now and is handed over once ready.
   * The next starts here only when the last take was less than EAGER_WITHIN_MS ago; otherwise the
   * owner prepares it once the machine is less busy (the registry: after the load's first batch,
   * which a spare's imports, 150–200 ms of CPU, slowed on 2 cores). Undefined: start a thread of
   * your own.
   */
  async take(maxHeapMb: number): Promise<NodeWorker | undefined> {
    if (maxHeapMb !== this.#options.maxHeapMb || this.#isClosed) return undefined;
    const isEager = performance.now() - this.#lastTakenAt < EAGER_WITHIN_MS;
    this.#lastTakenAt = performance.now();
    if (this.#spares.length === 0) this.#start({ isWarmedUp: false });
    const spare = this.#spares.pop();
    if (!spare) return undefined;
    // Taken, it keeps the process alive like any worker: a load at start-up may wait for it before
    // anything else holds the event loop open.
    spare.thread.ref();
    const isReady = await spare.ready;
    spare.release();
    // Loads in quick succession (a stream of requests to models out of memory): the next one will
    // come before the machine is quiet, so its thread starts now rather than after this load's first
    // batch (back to back, cold requests took 172 ms at p50 this way against 221 ms, measured).
    if (isEager && this.#spares.length === 0 && this.#options.hasRoomForLoad?.() !== false)
      this.prepare({ isWarmedUp: false });
    if (!isReady || this.#isClosed) {
      void spare.stop();
      return undefined;
    }
    return spare.thread;
  }

  /** Ends the spares; no new one starts. */
  async close(): Promise<void> {
    this.#isClosed = true;
    await Promise.all(this.#spares.splice(0).map((spare) => spare.end()));
  }
}

/**
 * A take within this long of the previous one starts the next spare at once (see take): about two
 * spare starts (150–200 ms each on 2 cores). Further apart, a spare started after the load's first
 * batch is ready before the next load, and did not slow that batch.
 */
const EAGER_WITHIN_MS = 400;

/**
 * Spares held at once: the one kept for the next load and one recycled beside it (an eviction of
 * two models for one load recycles both: the second is ended). Beyond one, they go once the loads
 * are done (prepare).
 */
const MAX_SPARES = 2;
