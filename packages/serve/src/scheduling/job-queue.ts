import type { MarinaError } from '@marina/errors';
import { createServeError } from '../errors.ts';
import type { Job } from './job.ts';

/**
 * A model version's bounded queue (TorchServe's job_queue_size), and the one owner of its
 * waiting requests. A job is *waiting* from admission until its batch starts running in a
 * worker: either queued here, or taken into the one batch a busy worker holds ready for its
 * next run (its prefetched batch, being decoded while the current batch runs). Both count
 * against the capacity, and `waiting` is the number that admission, describe, the autoscaler
 * and the metrics all read.
 *
 * `offer` never blocks: a full queue is an immediate MARINA_ERR_QUEUE_FULL. Jobs of a prefetched
 * batch that never started come back to the front (`returnToFront`), oldest first.
 */
export class JobQueue {
  readonly capacity: number;
  readonly #label: string;
  /** A ring buffer of queued jobs; grows by doubling, never compacts by copying on poll. */
  #ring: Array<Job | undefined>;
  #head = 0;
  #count = 0;
  /** Jobs taken into prefetched batches that have not started yet. */
  #taken = 0;

  /** @param options.label e.g. "model 'resnet' version '1.0'", used in the queue-full message. */
  constructor(options: { capacity: number; label: string }) {
    this.capacity = options.capacity;
    this.#label = options.label;
    this.#ring = new Array(Math.max(4, Math.min(options.capacity, 1024)));
  }

  /** Jobs queued here now (not counting prefetched batches). */
  get size(): number {
    return this.#count;
  }

  /** Jobs admitted that have not started running: queued, or in a prefetched batch. */
  get waiting(): number {
    return this.#count + this.#taken;
  }

  get remainingCapacity(): number {
    return Math.max(0, this.capacity - this.waiting);
  }

  /** The oldest queued job, or undefined. */
  peek(): Job | undefined {
    return this.#count === 0 ? undefined : this.#ring[this.#head];
  }

  /**
   * Adds a job at the tail.
   * @throws MARINA_ERR_QUEUE_FULL (503) when `capacity` jobs are already waiting.
   */
  offer(job: Job): void {
    if (this.waiting >= this.capacity) {
      throw createServeError.MARINA_ERR_QUEUE_FULL(
        `${this.#label} is overloaded: its job queue is full (${this.capacity} requests waiting, job_queue_size/jobQueueSize = ${this.capacity}). ` +
          'Retry after the Retry-After delay, add workers with PUT /models/{name}?min_worker=N, or raise jobQueueSize.',
        { details: { jobQueueSize: this.capacity } },
      );
    }
    this.#grow();
    this.#ring[(this.#head + this.#count) % this.#ring.length] = job;
    this.#count++;
  }

  /** Removes and returns the oldest queued job, or undefined when empty. */
  poll(): Job | undefined {
    if (this.#count === 0) return undefined;
    const job = this.#ring[this.#head]!;
    this.#ring[this.#head] = undefined;
    this.#head = (this.#head + 1) % this.#ring.length;
    this.#count--;
    return job;
  }

  /**
   * Takes up to `max` of the oldest jobs for a worker's next batch. They stay `waiting` until
   * `markStarted` (the batch began running) or `returnToFront` (it never did).
   */
  take(max: number): Job[] {
    const jobs: Job[] = [];
    while (jobs.length < max && this.#count > 0) jobs.push(this.poll()!);
    this.#taken += jobs.length;
    return jobs;
  }

  /** A taken batch of `count` jobs started running: they are no longer waiting. */
  markStarted(count: number): void {
    this.#taken -= count;
  }

  /** Jobs of a taken batch that never started go back to the front, in their order, unless already answered. */
  returnToFront(jobs: readonly Job[]): void {
    this.#taken -= jobs.length;
    for (let i = jobs.length - 1; i >= 0; i--) {
      const job = jobs[i]!;
      if (job.isSettled) continue;
      this.#grow();
      this.#head = (this.#head - 1 + this.#ring.length) % this.#ring.length;
      this.#ring[this.#head] = job;
      this.#count++;
    }
  }

  /** Answers, without running them, the queued jobs at the head whose deadline has passed; returns how many. */
  dropExpired(now: number, error: () => MarinaError): number {
    let dropped = 0;
    for (
      let job = this.peek();
      job !== undefined && job.deadline !== undefined && job.deadline <= now;
      job = this.peek()
    ) {
      this.poll();
      job.reject(error());
      dropped++;
    }
    return dropped;
  }

  /** Removes every queued job and fails it with `error` (prefetched batches are their workers' to settle). */
  failAll(error: MarinaError): void {
    for (let job = this.poll(); job; job = this.poll()) job.reject(error);
  }

  #grow(): void {
    if (this.#count < this.#ring.length) return;
    const next: Array<Job | undefined> = new Array(this.#ring.length * 2);
    for (let i = 0; i < this.#count; i++) next[i] = this.#ring[(this.#head + i) % this.#ring.length];
    this.#ring = next;
    this.#head = 0;
  }
}
