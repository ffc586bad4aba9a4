import type { HandlerStagesMs } from '../workers/worker-protocol.ts';

/** Where a job's time went, performance.now() instants (tracing and the metrics read it). */
export interface JobTimings {
  /** performance.now() when the request arrived. */
  arrivedAt: number;
  /** When admission was over and the job entered its model version's queue; undefined until then. */
  queuedAt?: number;
  /** When its batch started running in a worker (not when it was handed over); undefined until then. */
  dispatchedAt: number | undefined;
  /** When the worker answered. */
  finishedAt: number | undefined;
  /** Where the worker spent the time of this job's batch, for handlers with separate stages. */
  stages?: HandlerStagesMs;
  /** The handler's time for this job's batch, measured in the worker thread. */
  handlerMs?: number;
  /** The worker that ran this job's batch, and the batch's size (traces). */
  workerId?: string;
  batchSize?: number;
  /** It arrived while its model version was not resident, and waited for the load. */
  waitedForLoad?: boolean;
}
