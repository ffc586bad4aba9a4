// worker_threads cannot load .ts on Node 20: register tsx in this thread to load the worker's
// code, then unregister it before any custom handler is imported, because tsx's loader breaks
// Node's own detection of ES-module syntax in a handler's plain .js file.
import { register as registerHooks } from 'node:module';
import { register } from 'tsx/esm/api';

const unregister = register();
const { runWorker } = await import('./worker-main.ts');
await unregister();
// A custom handler lives in an extracted archive with no node_modules above it: let its bare
// imports (sharp, onnxruntime-node) resolve to the packages Marina runs on, exactly as the
// validator (@marina/archive's handler probe) resolves them, so what validates also serves.
registerHooks('@marina/archive/handler-import-hooks', import.meta.url, {
  data: { fallbackParentURLs: [import.meta.resolve('@marina/handlers')] },
});
await runWorker();
