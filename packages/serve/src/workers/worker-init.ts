import { workerData } from 'node:worker_threads';
import { useSchedBatch, type SchedBatchOutcome } from './use-sched-batch.ts';
import type { WorkerInit } from './worker-protocol.ts';

let assigned: WorkerInit | undefined;
let early: SchedBatchOutcome | undefined;

/**
 * A spare thread takes SCHED_BATCH while it waits (useSchedBatch runs util-linux's chrt: a child
 * process, tens of ms), so a load that is given the thread does not wait for it. Called by the
 * bootstrap before the spare says it is ready.
 */
export function scheduleSpareThread(): void {
  early = useSchedBatch();
}

/**
 * A thread that left its model to become a spare again (worker-main's recycle) keeps the policy
 * it already runs under: the next model's runWorker takes it instead of running chrt again.
 */
export function keepSchedBatch(outcome: SchedBatchOutcome): void {
  early = outcome;
}

/** The outcome of scheduleSpareThread (or keepSchedBatch), once: undefined when this thread did not start as a spare. */
export function takeEarlySchedBatch(): SchedBatchOutcome | undefined {
  const outcome = early;
  early = undefined;
  return outcome;
}

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
