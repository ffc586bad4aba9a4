// A worker thread's entry point. It runs from dist/workers/ (compiled code, beside worker-main.js)
// or, in a clone of the repository, from src/workers/ (beside worker-main.ts). worker_threads
// cannot load .ts on Node 20, so from src/ it registers tsx (and the 'development' condition for
// @marina/* imports) in this thread to load the worker's code, then unregisters tsx before any
// custom handler is imported, because tsx's loader breaks Node's own detection of ES-module
// syntax in a handler's plain .js file.
import { existsSync } from 'node:fs';
import { register as registerHooks } from 'node:module';
import { parentPort, workerData } from 'node:worker_threads';

// A spare thread (spare-threads.ts) imports worker-main and what it imports, says so, and waits
// for its model (worker-main reads it when runWorker starts).
const isSpare = workerData?.spare === true;
const isCompiled = existsSync(new URL('./worker-main.js', import.meta.url));
const ext = isCompiled ? '.js' : '.ts';
let unregister;
if (!isCompiled) {
  const { runSources } = await import('../../../../scripts/run-sources.mjs');
  unregister = runSources();
}
// Stopped while onnxruntime-node registers itself, a thread aborts the whole process: the import
// counts as a native call in the gauge the thread was started with (native-calls.ts), so the main
// thread asks it to exit instead of terminating it, and it exits here once the import is done.
const { beginNativeImport, endNativeImport } = await import(`./native-calls${ext}`);
if (!beginNativeImport(workerData?.nativeCalls)) process.exit(0);
const { runWorker, warmUpSpareThread } = await import(`./worker-main${ext}`);
if (!endNativeImport(workerData?.nativeCalls)) process.exit(0);
if (isSpare) {
  const { receiveAssignment, scheduleSpareThread } = await import(`./worker-init${ext}`);
  // What a worker does first that does not depend on its model, done while the spare waits: its
  // CPU policy (a chrt child process). A load given this thread then only creates its handler and session.
  scheduleSpareThread();
  const assigned = receiveAssignment();
  parentPort.postMessage({ type: 'spare-ready' });
  // Ready before this: a load that takes the thread meanwhile does not wait for it (never fails).
  if (workerData.isWarmedUp !== false) void warmUpSpareThread();
  await assigned;
}
await unregister?.();
await runWorker({ registerHandlerImportHooks });

/**
 * A custom handler lives in an extracted archive with no node_modules above it: let its bare
 * imports (sharp, onnxruntime-node) resolve to the packages Marina runs on, exactly as the
 * validator (@marina/archive's handler probe) resolves them, so what validates also serves. The
 * hooks only act where Node's own resolution fails. worker-main registers them just before it
 * imports an archive's handler, never for a built-in one: Node runs registered hooks on a thread
 * of their own, one per worker, and that thread cost each worker 8-10 MB of PSS, an OS thread and
 * 70-130 ms of CPU at its start (measured on 2 cores: four threads importing onnxruntime-node and
 * sharp, with and without the hooks). Registered after worker-main was imported, they also never
 * see Marina's own imports (through them, a cold load waited 6-9 ms for worker-main).
 */
function registerHandlerImportHooks() {
  registerHooks('@marina/archive/handler-import-hooks', import.meta.url, {
    data: { fallbackParentURLs: [import.meta.resolve('@marina/handlers/package.json')] },
  });
}
