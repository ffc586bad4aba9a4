// worker_threads cannot load .ts on Node 20: register tsx in this thread to load the worker's
// code, then unregister it before any custom handler is imported, because tsx's loader breaks
// Node's own detection of ES-module syntax in a handler's plain .js file.
import { register } from 'tsx/esm/api';

const unregister = register();
const { runWorker } = await import('./worker-main.ts');
await unregister();
await runWorker();
