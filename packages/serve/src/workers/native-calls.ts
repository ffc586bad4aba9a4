/**
 * Whether a worker thread is inside onnxruntime, shared with the main thread, so that stopping a
 * worker never terminates its thread in the middle of a native call.
 *
 * Why: `worker.terminate()` cannot interrupt onnxruntime-node's `run()` or `create()`; when the
 * call returns into the terminating thread, onnxruntime-node throws a C++ `Napi::Error` nothing
 * catches, and the whole process aborts ("terminate called after throwing an instance of
 * 'Napi::Error'"; reproduced by terminating a worker during a ResNet-50 run, and seen once in a
 * many-models bench run). Idle threads terminate safely. So a worker stopped while a call is
 * outstanding is asked to exit (`exit`), which it does as soon as the call returns, and no new
 * call starts once stopping was asked.
 *
 * The thread's import of onnxruntime-node counts too: terminated while the addon registers itself
 * (after its library was loaded), the process aborted the same way (gdb on the core:
 * `napi_register_module_v1` → `Napi::Error::ThrowAsJavaScriptException` → `std::terminate`). A
 * spare thread ended while it imported its modules did that (a probe of SpareThreads, after 700–800
 * spares ended at random moments; likely what brought down a bench run's server in session 13,
 * which left no core dump). worker-bootstrap.mjs counts the import (beginNativeImport,
 * endNativeImport) in the gauge it was started with, a new worker's or a spare's, and exits by
 * itself after an import during which it was stopped.
 *
 * The protocol is Dekker's with sequentially consistent atomics: the worker counts a call in
 * before it reads STOPPING; the main thread sets STOPPING before it reads the count. Either the
 * main thread sees the call (and asks the thread to exit) or the call sees STOPPING (and fails
 * before it enters onnxruntime).
 */

/** Slots of the shared Int32Array. */
const CALLS = 0;
const STOPPING = 1;

/** A fresh gauge for one worker (main thread): sent to its thread with its WorkerInit. */
export function newNativeCallGauge(): Int32Array {
  return new Int32Array(new SharedArrayBuffer(2 * Int32Array.BYTES_PER_ELEMENT));
}

/**
 * Main thread: marks the worker as stopping and says whether its thread may be terminated now
 * (no onnxruntime call outstanding, and none can start). False: post it `exit` instead.
 */
export function mayTerminateNow(gauge: Int32Array): boolean {
  Atomics.store(gauge, STOPPING, 1);
  return Atomics.load(gauge, CALLS) === 0;
}

/** Main thread: whether the worker's thread has an onnxruntime call outstanding now. */
export function hasNativeCall(gauge: Int32Array): boolean {
  return Atomics.load(gauge, CALLS) > 0;
}

/**
 * Worker thread (worker-bootstrap.mjs), before it imports the modules that load onnxruntime-node
 * and sharp: counts the import as a native call. False: the thread is already stopping; it must
 * exit without importing them.
 */
export function beginNativeImport(gauge: Int32Array | undefined): boolean {
  return gauge === undefined || enterCall(gauge);
}

/**
 * Worker thread, once the import is done. False: the thread was stopped meanwhile (the main thread
 * saw the import and asked it to exit rather than terminating it); it must exit now.
 */
export function endNativeImport(gauge: Int32Array | undefined): boolean {
  if (gauge === undefined) return true;
  Atomics.sub(gauge, CALLS, 1);
  return Atomics.load(gauge, STOPPING) === 0;
}

/**
 * Worker thread: counts a call in, unless the worker is stopping (false: nothing was counted).
 * The worker's half of the protocol above; leave with Atomics.sub once the call is over.
 */
function enterCall(gauge: Int32Array): boolean {
  Atomics.add(gauge, CALLS, 1);
  if (Atomics.load(gauge, STOPPING) === 0) return true;
  Atomics.sub(gauge, CALLS, 1);
  return false;
}

/**
 * Main thread: ends a worker thread that has no worker of its own (a spare) as Worker does its
 * thread: terminated when no native call or import is under way, else asked to exit, which it
 * does once that is over. Resolves once the thread has ended.
 */
export function endThreadSafely(
  thread: {
    terminate(): Promise<number>;
    postMessage(message: unknown): void;
    once(event: 'exit', listener: () => void): unknown;
    ref(): void;
  },
  gauge: Int32Array,
  hasExited: () => boolean,
): Promise<void> {
  if (hasExited()) return Promise.resolve();
  if (mayTerminateNow(gauge))
    return thread.terminate().then(
      () => undefined,
      () => undefined,
    );
  return new Promise((resolve) => {
    thread.once('exit', () => resolve());
    // Until it has exited it keeps the process alive: a process that ended meanwhile would
    // terminate it in the middle of that call.
    thread.ref();
    thread.postMessage({ type: 'exit' });
  });
}

/** The worker thread's gauge for its current model (a recycled thread gets a new one with its next model). */
let current: Int32Array | undefined;

export function useNativeCallGauge(gauge: Int32Array | undefined): void {
  current = gauge;
}

/** Thrown instead of entering onnxruntime once the worker is stopping. */
class WorkerStoppingError extends Error {
  constructor() {
    super('this worker is stopping: no new onnxruntime call starts');
    this.name = 'WorkerStoppingError';
  }
}

/** Counts `call` (a promise-returning onnxruntime call) in the gauge until it settles. */
function counted<T>(call: () => Promise<T>): Promise<T> {
  const gauge = current;
  if (gauge === undefined) return call();
  if (!enterCall(gauge)) return Promise.reject(new WorkerStoppingError());
  let pending: Promise<T>;
  try {
    pending = call();
  } catch (error) {
    Atomics.sub(gauge, CALLS, 1);
    throw error;
  }
  // onnxruntime-node enters native code after a setImmediate: the call counts until it settles.
  return Promise.resolve(pending).finally(() => Atomics.sub(gauge, CALLS, 1));
}

/** onnxruntime-node's InferenceSession as it is at run time: a class (its types show a factory). */
interface SessionClass {
  create: (...args: never[]) => Promise<unknown>;
  prototype: { run: (...args: never[]) => Promise<unknown> };
}

const guarded = new WeakSet<object>();

/**
 * Worker thread, once: every `InferenceSession.create` and `session.run` of this thread's
 * onnxruntime-node (the built-in handlers' and a custom handler's alike: its bare import resolves
 * to the same package) counts in the current gauge.
 */
export function guardOnnxRuntimeCalls(ort: { InferenceSession: unknown }): void {
  const session = ort.InferenceSession as SessionClass;
  if (guarded.has(session)) return;
  guarded.add(session);
  const create = session.create;
  session.create = function (this: unknown, ...args: never[]) {
    return counted(() => create.apply(this, args));
  };
  const run = session.prototype.run;
  session.prototype.run = function (this: unknown, ...args: never[]) {
    return counted(() => run.apply(this, args));
  };
}
