import { workerData } from 'node:worker_threads';
import type { WorkerInit } from './worker-protocol.ts';

let assigned: WorkerInit | undefined;

/**
 * Gives a spare thread (started before any model was chosen for it, see spare-threads.ts) its
 * model: called by the bootstrap before it imports worker-main.
 */
export function assignWorkerInit(init: WorkerInit): void {
  assigned = init;
}

/** The model this thread serves: the one a spare thread was given, else the one it was started with. */
export function workerInit(): WorkerInit {
  return assigned ?? (workerData as WorkerInit);
}
