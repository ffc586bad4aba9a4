import type { MarinaError } from '@marina/errors';
import { createServeError } from '../errors.ts';
import type { Job } from './job.ts';

/** How one priority level queues: Triton's queue policy, in camelCase and milliseconds. */
export interface LevelPolicy {
  /** Jobs queued at this level at most; 0: only the model's jobQueueSize bounds it. */
  maxQueueSize: number;
}

/**
 * A level passed over this many batches in a row while it had jobs queued goes first in the next
 * batch: strict priority otherwise, so a lower level gets at least one batch in
 * STARVATION_LIMIT + 1 however busy the levels above it are.
 */
export const STARVATION_LIMIT = 8;

/** A ring buffer of jobs: grows by doubling, never compacts by copying on poll. */
class JobRing {
  #ring: Array<Job | undefined>;
  #head = 0;
  #count = 0;

  constructor(initialSize: number) {
    this.#ring = new Array(Math.max(4, initialSize));
  }

  get length(): number {
    return this.#count;
  }

  at(i: number): Job {
    return this.#ring[(this.#head + i) % this.#ring.length]!;
  }

  push(job: Job): void {
    this.#grow();
    this.#ring[(this.#head + this.#count) % this.#ring.length] = job;
    this.#count++;
  }

  unshift(job: Job): void {
    this.#grow();
    this.#head = (this.#head - 1 + this.#ring.length) % this.#ring.length;
    this.#ring[this.#head] = job;
    this.#count++;
  }

  shift(): Job | undefined {
    if (this.#count === 0) return undefined;
    const job = this.#ring[this.#head]!;
    this.#ring[this.#head] = undefined;
    this.#head = (this.#head + 1) % this.#ring.length;
    this.#count--;
    return job;
  }

  /** Removes the jobs `drop` picks, keeping the others' order (a pass over the ring: rare, for expiry and cancellation). */
  removeWhere(drop: (job: Job) => boolean): Job[] {
    const removed: Job[] = [];
    let kept = 0;
    const n = this.#count;
    for (let i = 0; i < n; i++) {
      const job = this.at(i);
      if (drop(job)) removed.push(job);
      else this.#ring[(this.#head + kept++) % this.#ring.length] = job;
    }
    for (let i = kept; i < n; i++) this.#ring[(this.#head + i) % this.#ring.length] = undefined;
    this.#count = kept;
    return removed;
  }

  #grow(): void {
    if (this.#count < this.#ring.length) return;
    const next: Array<Job | undefined> = new Array(this.#ring.length * 2);
    for (let i = 0; i < this.#count; i++) next[i] = this.at(i);
    this.#ring = next;
    this.#head = 0;
  }
}

/** One priority level's jobs: those in their turn, then those whose timeout moved them back ('delay'), as Triton. */
interface Level {
  readonly policy: LevelPolicy;
  readonly main: JobRing;
  readonly delayed: JobRing;
  /** Batches formed in a row without a job of this level while it had some queued. */
  passedOver: number;
}

/**
 * A model version's bounded queue (TorchServe's job_queue_size), and the one owner of its
 * waiting requests. A job is *waiting* from admission until its batch starts running in a
 * worker: either queued here, or taken into the one batch a busy worker holds ready for its
 * next run (its prefetched batch, being decoded while the current batch runs). Both count
 * against the capacity, and `waiting` is the number that admission, describe, the autoscaler
 * and the metrics all read.
 *
 * Jobs queue by priority level (1 the highest; one level unless the model sets priorityLevels).
 * A batch is taken from the highest non-empty level, and holds that level's jobs only; a level
 * passed over STARVATION_LIMIT batches in a row while it had jobs goes first in the next one, so
 * no level waits for ever. Within a level, jobs go oldest first; a job whose level moved
 * it back (timeoutAction 'delay') goes after the level's others.
 *
 * `offer` never blocks: a full queue is an immediate MARINA_ERR_QUEUE_FULL. Jobs of a prefetched
 * batch that never started come back to the front (`returnToFront`), oldest first.
 */
export class JobQueue {
  readonly capacity: number;
  readonly #label: string;
  readonly #levels: Level[];
  #count = 0;
  /** Jobs taken into prefetched batches that have not started yet. */
  #taken = 0;
  /** Queued jobs with a deadline or a delay time: while none, nothing is scanned for expiry. */
  #timedCount = 0;
  /**
   * No queued job expires (or is moved back) before this: exact after each expiry pass, lowered as
   * timed jobs arrive. It may be early once a job has left, which costs one pass that finds nothing,
   * never a missed deadline; the scan then runs only when something is due, not on every pump.
   */
  #earliest = Infinity;

  /**
   * @param options.label e.g. "model 'resnet' version '1.0'", used in the queue-full message.
   * @param options.levels one policy per priority level, level 1 first; default one level without its own bound.
   */
  constructor(options: { capacity: number; label: string; levels?: readonly LevelPolicy[] }) {
    this.capacity = options.capacity;
    this.#label = options.label;
    const policies = options.levels && options.levels.length > 0 ? options.levels : [{ maxQueueSize: 0 }];
    this.#levels = policies.map((policy, i) => ({
      policy,
      main: new JobRing(i === 0 ? Math.min(options.capacity, 1024) : 4),
      delayed: new JobRing(4),
      passedOver: 0,
    }));
  }

  /** Priority levels (1 … levelCount). */
  get levelCount(): number {
    return this.#levels.length;
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

  /** Jobs queued at a priority level (1-based). */
  sizeOf(priority: number): number {
    const level = this.#levels[priority - 1];
    return level === undefined ? 0 : level.main.length + level.delayed.length;
  }

  /**
   * Adds a job at the tail of its level.
   * @throws MARINA_ERR_QUEUE_FULL (503) when `capacity` jobs are already waiting, or its level's maxQueueSize are queued.
   */
  offer(job: Job): void {
    if (this.waiting >= this.capacity) {
      throw createServeError.MARINA_ERR_QUEUE_FULL(
        `${this.#label} is overloaded: its job queue is full (${this.capacity} requests waiting, job_queue_size/jobQueueSize = ${this.capacity}). ` +
          'Retry after the Retry-After delay, add workers with PUT /models/{name}?min_worker=N, or raise jobQueueSize.',
        { details: { jobQueueSize: this.capacity } },
      );
    }
    const level = this.#levelOf(job);
    const max = level.policy.maxQueueSize;
    if (max > 0 && level.main.length + level.delayed.length >= max) {
      throw createServeError.MARINA_ERR_QUEUE_FULL(
        `${this.#label} is overloaded at priority ${job.priority}: ${max} requests of that level are queued (priorityQueuePolicy maxQueueSize = ${max}). ` +
          'Retry after the Retry-After delay, send it at another priority, or raise maxQueueSize.',
        { details: { priority: job.priority, maxQueueSize: max } },
      );
    }
    job.timings.queuedAt ??= performance.now();
    level.main.push(job);
    this.#count++;
    this.#noteTimed(job);
  }

  /** Removes and returns the next job by priority (without the anti-starvation turn), or undefined when empty. */
  poll(): Job | undefined {
    for (const level of this.#levels) {
      const job = this.#shift(level);
      if (job) return job;
    }
    return undefined;
  }

  /**
   * The level the next batch comes from: a level passed over STARVATION_LIMIT times while it had
   * jobs, else the highest non-empty one; undefined when nothing is queued.
   */
  #nextLevel(): Level | undefined {
    let highest: Level | undefined;
    for (const level of this.#levels) {
      if (this.#queuedIn(level) === 0) continue;
      if (level.passedOver >= STARVATION_LIMIT) return level;
      highest ??= level;
    }
    return highest;
  }

  /** How many jobs `take(max)` would return now: with priority levels, only the next batch's level counts. */
  batchable(max: number): number {
    if (this.#levels.length === 1) return Math.min(max, this.#count);
    const level = this.#nextLevel();
    return level === undefined ? 0 : Math.min(max, this.#queuedIn(level));
  }

  /**
   * True when the next batch would come from the highest level (1) and no starved level goes
   * first: no job queued later can go before it, so it may be handed to a busy worker early
   * (prefetched, its decoding overlapping the running batch). Always true with one level.
   */
  get isNextBatchTopLevel(): boolean {
    if (this.#levels.length === 1) return this.#count > 0;
    const level = this.#nextLevel();
    return level !== undefined && level === this.#levels[0];
  }

  /**
   * Takes up to `max` jobs for a worker's next batch. With priority levels a batch holds one
   * level's jobs: those of a level passed over STARVATION_LIMIT times, else of the highest
   * non-empty level. Unlike Triton, which fills a batch from the levels below, lower-level jobs
   * never ride along: on a CPU a batch's run grows with its size, so they would make the higher
   * request wait for their work. They stay `waiting` until `markStarted` (the batch began
   * running) or `returnToFront` (it never did).
   */
  take(max: number): Job[] {
    const jobs: Job[] = [];
    const levels = this.#levels;
    if (levels.length === 1) {
      const level = levels[0]!;
      while (jobs.length < max && this.#count > 0) jobs.push(this.#shift(level)!);
      this.#taken += jobs.length;
      return jobs;
    }
    const next = this.#nextLevel();
    if (next === undefined) return jobs;
    for (const level of levels) {
      if (level === next) level.passedOver = 0;
      else if (this.#queuedIn(level) > 0) level.passedOver++;
      else level.passedOver = 0;
    }
    while (jobs.length < max) {
      const job = this.#shift(next);
      if (!job) break;
      jobs.push(job);
    }
    this.#taken += jobs.length;
    return jobs;
  }

  /** A taken batch of `count` jobs started running: they are no longer waiting. */
  markStarted(count: number): void {
    this.#taken -= count;
  }

  /** Jobs of a taken batch that never started go back to the front of their levels, in their order, unless already answered. */
  returnToFront(jobs: readonly Job[]): void {
    this.#taken -= jobs.length;
    for (let i = jobs.length - 1; i >= 0; i--) {
      const job = jobs[i]!;
      if (job.isSettled) continue;
      this.#levelOf(job).main.unshift(job);
      this.#count++;
      this.#noteTimed(job);
    }
  }

  /** The earliest time a queued job expires or is moved back (possibly a little early, see #earliest); Infinity when none will. */
  nextDeadline(): number {
    return this.#timedCount === 0 ? Infinity : this.#earliest;
  }

  /**
   * Answers, without running them, the queued jobs whose deadline has passed (with `error(job)`),
   * and moves those whose delay time has passed behind their level's others. Returns how many were answered.
   */
  dropExpired(now: number, error: (job: Job) => MarinaError): number {
    if (this.#timedCount === 0 || now < this.#earliest) return 0;
    let dropped = 0;
    for (const level of this.#levels) {
      for (const ring of [level.main, level.delayed]) {
        for (const job of ring.removeWhere((j) => j.deadline !== undefined && j.deadline <= now)) {
          this.#forget(job);
          job.reject(error(job));
          dropped++;
        }
      }
      for (const job of level.main.removeWhere((j) => j.delayAt !== undefined && j.delayAt <= now)) {
        job.delayAt = undefined;
        if (job.deadline === undefined) this.#timedCount--;
        level.delayed.push(job);
      }
    }
    this.#earliest = Infinity;
    for (const level of this.#levels)
      for (const ring of [level.main, level.delayed])
        for (let i = 0; i < ring.length; i++) this.#noteTimed(ring.at(i), false);
    return dropped;
  }

  /** Removes a queued job (its client went away) and answers it with `error`; false when it is not queued here. */
  remove(job: Job, error: MarinaError): boolean {
    const level = this.#levelOf(job);
    const removed = [...level.main.removeWhere((j) => j === job), ...level.delayed.removeWhere((j) => j === job)];
    if (removed.length === 0) return false;
    this.#forget(job);
    job.reject(error);
    return true;
  }

  /** Removes every queued job and fails it with `error` (prefetched batches are their workers' to settle). */
  failAll(error: MarinaError): void {
    for (let job = this.poll(); job; job = this.poll()) job.reject(error);
  }

  #levelOf(job: Job): Level {
    return this.#levels[Math.min(Math.max(job.priority, 1), this.#levels.length) - 1]!;
  }

  #queuedIn(level: Level): number {
    return level.main.length + level.delayed.length;
  }

  #shift(level: Level): Job | undefined {
    const job = level.main.shift() ?? level.delayed.shift();
    if (job) this.#forget(job);
    return job;
  }

  /** Counts a timed job that joined the queue (`isNew`), and lowers #earliest to its times. */
  #noteTimed(job: Job, isNew = true): void {
    if (job.deadline === undefined && job.delayAt === undefined) return;
    if (isNew) this.#timedCount++;
    if (job.deadline !== undefined && job.deadline < this.#earliest) this.#earliest = job.deadline;
    if (job.delayAt !== undefined && job.delayAt < this.#earliest) this.#earliest = job.delayAt;
  }

  #forget(job: Job): void {
    this.#count--;
    if (job.deadline !== undefined || job.delayAt !== undefined) this.#timedCount--;
  }
}
