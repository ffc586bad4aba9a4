import { createServeError } from '../errors.ts';
import type { Job } from './job.ts';
import type { MarinaError } from '@marina/errors';

/**
 * A model version's bounded FIFO of jobs waiting for a worker (TorchServe's job_queue_size).
 * `offer` never blocks: a full queue is an immediate MARINA_ERR_QUEUE_FULL.
 */
export class JobQueue {
  readonly capacity: number;
  readonly #label: string;
  #jobs: Job[] = [];
  #head = 0;

  /** @param options.label e.g. "model 'resnet' version '1.0'", used in the queue-full message. */
  constructor(options: { capacity: number; label: string }) {
    this.capacity = options.capacity;
    this.#label = options.label;
  }

  get size(): number {
    return this.#jobs.length - this.#head;
  }

  get remainingCapacity(): number {
    return Math.max(0, this.capacity - this.size);
  }

  /**
   * Adds a job at the tail.
   * @throws MARINA_ERR_QUEUE_FULL (503) when `capacity` jobs are already waiting.
   */
  offer(job: Job): void {
    if (this.size >= this.capacity) {
      throw createServeError.MARINA_ERR_QUEUE_FULL(
        `${this.#label} is overloaded: its job queue is full (${this.capacity} requests waiting, job_queue_size/jobQueueSize = ${this.capacity}). ` +
          'Retry after the Retry-After delay, add workers with PUT /models/{name}?min_worker=N, or raise jobQueueSize.',
        { details: { jobQueueSize: this.capacity } },
      );
    }
    this.#jobs.push(job);
  }

  /** Removes and returns the oldest job, or undefined when empty. */
  poll(): Job | undefined {
    if (this.#head >= this.#jobs.length) return undefined;
    const job = this.#jobs[this.#head]!;
    this.#jobs[this.#head] = undefined as unknown as Job;
    this.#head++;
    // Compact now and then so the array does not grow without bound under steady load.
    if (this.#head > 1024 && this.#head * 2 > this.#jobs.length) {
      this.#jobs = this.#jobs.slice(this.#head);
      this.#head = 0;
    }
    return job;
  }

  /** Removes every waiting job and fails it with `error`. */
  failAll(error: MarinaError): void {
    for (let job = this.poll(); job; job = this.poll()) job.reject(error);
  }
}
