// A worker thread's entry point. It runs from dist/workers/ (compiled code, beside worker-main.js)
// or, in a clone of the repository, from src/workers/ (beside worker-main.ts). worker_threads
// cannot load .ts on Node 20, so from src/ it registers tsx (and the 'development' condition for
// @marina/* imports) in this thread to load the worker's code, then unregisters tsx before any
// custom handler is imported, because tsx's loader breaks Node's own detection of ES-module
// syntax in a handler's plain .js file.
import { existsSync } from 'node:fs';
import { register as registerHooks } from 'node:module';

let runWorker;
if (existsSync(new URL('./worker-main.js', import.meta.url))) {
  ({ runWorker } = await import('./worker-main.js'));
} else {
  const { runSources } = await import('../../../../scripts/run-sources.mjs');
  const unregister = runSources();
  ({ runWorker } = await import('./worker-main.ts'));
  await unregister();
}
// A custom handler lives in an extracted archive with no node_modules above it: let its bare
// imports (sharp, onnxruntime-node) resolve to the packages Marina runs on, exactly as the
// validator (@marina/archive's handler probe) resolves them, so what validates also serves.
registerHooks('@marina/archive/handler-import-hooks', import.meta.url, {
  data: { fallbackParentURLs: [import.meta.resolve('@marina/handlers/package.json')] },
});
await runWorker();
