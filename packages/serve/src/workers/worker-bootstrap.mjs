// worker_threads cannot load .ts on Node 20: register tsx in this thread, then load the worker.
import { register } from 'tsx/esm/api';

register();
await import('./worker-main.ts');
