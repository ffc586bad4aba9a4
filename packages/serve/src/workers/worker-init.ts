import { parentPort, workerData } from 'node:worker_threads';
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
 * Waits for a spare thread's model: the `assign` message (spare-threads.ts' AssignMessage), which
 * workerInit answers from then on. It listens from the call, so call it before saying the thread is
 * ready. Used by a thread started as a spare (the bootstrap) and by one that left its model (recycle).
 */
export function receiveAssignment(): Promise<void> {
  const port = parentPort!;
  return new Promise((resolve) => {
    const onMessage = (message: { type?: string; init?: WorkerInit }) => {
      if (message?.type !== 'assign') return;
      port.off('message', onMessage);
      assigned = message.init as WorkerInit;
      resolve();
    };
    port.on('message', onMessage);
  });
}

/** The model this thread serves: the one a spare thread was given, else the one it was started with. */
export function workerInit(): WorkerInit {
  return assigned ?? (workerData as WorkerInit);
}
