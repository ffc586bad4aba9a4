/**
 * The JobQueue's priority levels as pure logic (explicit clock values, no timers): batch order by
 * level, the anti-starvation turn, per-level maxQueueSize, deadlines and the 'delay' action, and
 * removal of a job whose client went away.
 */
import { describe, expect, it } from 'vitest';
import { createServeError } from '../src/errors.ts';
import { Job } from '../src/scheduling/job.ts';
import { JobQueue, STARVATION_LIMIT } from '../src/scheduling/job-queue.ts';
import { formatAccessMessage } from '../src/logging/server-logs.ts';
import { serverTimingHeader } from '../src/routes/server-timing.ts';
import { resolveQueueSettings, scheduleOf, requestSchedulingOf } from '../src/scheduling/queue-policy.ts';
import { isMarinaError, type MarinaError } from '@marina/errors';

/** The MarinaError `run` throws; fails the test when it returns or throws anything else. */
function marinaErrorOf(run: () => unknown): MarinaError {
  try {
    run();
  } catch (error) {
    if (isMarinaError(error)) return error;
    throw error;
  }
  throw new Error('expected a MarinaError, nothing was thrown');
}

const expired = (job: Job) => createServeError.MARINA_ERR_CLIENT_TIMEOUT(`expired ${job.requestId}`);

function queueOf(levels: number, maxQueueSize = 0, capacity = 100) {
  return new JobQueue({
    capacity,
    label: "model 'm' version '1'",
    levels: Array.from({ length: levels }, () => ({ maxQueueSize })),
  });
}

function job(id: string, priority: number, extra: { deadline?: number; delayAt?: number } = {}): Job {
  return new Job({ requestId: id, input: {}, arrivedAt: 0, schedule: { priority, ...extra } });
}

const ids = (jobs: Job[]) => jobs.map((j) => j.requestId);

describe('JobQueue priority levels', () => {
  it('forms each batch from the highest non-empty level, without lower-level jobs riding along', () => {
    const q = queueOf(3);
    for (const j of [job('l1', 3), job('m1', 2), job('h1', 1), job('l2', 3), job('h2', 1)]) q.offer(j);
    expect(q.sizeOf(1)).toBe(2);
    expect(q.isNextBatchTopLevel).toBe(true);
    expect(q.batchable(3)).toBe(2);
    expect(ids(q.take(3))).toEqual(['h1', 'h2']);
    // Only the highest level's batch may go to a busy worker early (nothing can overtake it).
    expect(q.isNextBatchTopLevel).toBe(false);
    expect(ids(q.take(3))).toEqual(['m1']);
    expect(q.batchable(3)).toBe(2);
    expect(ids(q.take(3))).toEqual(['l1', 'l2']);
    expect(q.waiting).toBe(5);
    expect(q.batchable(3)).toBe(0);
  });

  it(`lets a level passed over ${STARVATION_LIMIT} batches in a row go first in the next one`, () => {
    const q = queueOf(2);
    q.offer(job('low', 2));
    for (let i = 0; i < STARVATION_LIMIT + 2; i++) q.offer(job(`h${i}`, 1));
    const order: string[] = [];
    while (q.size > 0) order.push(...ids(q.take(1)));
    expect(order.indexOf('low')).toBe(STARVATION_LIMIT);
    expect(order).toHaveLength(STARVATION_LIMIT + 3);
  });

  it("bounds each level by its maxQueueSize without touching the others'", () => {
    const q = queueOf(2, 1);
    q.offer(job('h1', 1));
    const error = marinaErrorOf(() => q.offer(job('h2', 1)));
    expect(error.code).toBe('MARINA_ERR_QUEUE_FULL');
    expect(error.message).toContain('priority 1');
    q.offer(job('l1', 2));
    expect(q.size).toBe(2);
  });

  it("answers expired jobs unrun at any place in any level, and moves a 'delay' job behind its level's others", () => {
    const q = queueOf(2);
    const late = job('late', 2, { deadline: 50 });
    for (const j of [job('a', 1, { delayAt: 10 }), job('b', 1), late, job('c', 2)]) q.offer(j);
    expect(q.nextDeadline()).toBe(10);
    expect(q.dropExpired(20, expired)).toBe(0);
    expect(q.nextDeadline()).toBe(50);
    expect(q.dropExpired(60, expired)).toBe(1);
    expect(late.isSettled).toBe(true);
    expect(q.nextDeadline()).toBe(Infinity);
    expect(ids(q.take(10))).toEqual(['b', 'a']);
    expect(ids(q.take(10))).toEqual(['c']);
  });

  it('removes a job whose client went away, and only a queued one', () => {
    const q = queueOf(1);
    const gone = job('gone', 1);
    q.offer(job('a', 1));
    q.offer(gone);
    q.offer(job('b', 1));
    const error = createServeError.MARINA_ERR_CLIENT_GONE('gone');
    expect(q.remove(gone, error)).toBe(true);
    expect(q.remove(gone, error)).toBe(false);
    expect(ids(q.take(10))).toEqual(['a', 'b']);
  });
});

describe('queue policies and request timeouts', () => {
  const settings = resolveQueueSettings({
    where: "model 'm'",
    yaml: {
      priorityLevels: 3,
      defaultPriorityLevel: 2,
      defaultQueuePolicy: { timeoutMs: 1000 },
      priorityQueuePolicy: { '1': { allowTimeoutOverride: false }, '3': { timeoutAction: 'delay', timeoutMs: 500 } },
    },
    json: {},
    clientTimeoutMs: 0,
  });

  it('resolves levels over the default policy', () => {
    expect(settings.levels.map((l) => [l.timeoutMs, l.timeoutAction, l.allowTimeoutOverride])).toEqual([
      [1000, 'reject', false],
      [1000, 'reject', true],
      [500, 'delay', true],
    ]);
  });

  it("applies a request's timeout when shorter and allowed, a gRPC deadline always, and 'delay' as a move", () => {
    expect(scheduleOf(settings, undefined, 0, 'm')).toEqual({ priority: 2, deadline: 1000 });
    expect(scheduleOf(settings, { timeoutMs: 200 }, 0, 'm')).toEqual({
      priority: 2,
      deadline: 200,
      isRequestDeadline: true,
    });
    expect(scheduleOf(settings, { timeoutMs: 5000 }, 0, 'm')).toEqual({ priority: 2, deadline: 1000 });
    expect(scheduleOf(settings, { priority: 1, timeoutMs: 200 }, 0, 'm')).toEqual({ priority: 1, deadline: 1000 });
    expect(scheduleOf(settings, { priority: 1, deadlineAt: 300 }, 0, 'm')).toEqual({
      priority: 1,
      deadline: 300,
      isRequestDeadline: true,
    });
    expect(scheduleOf(settings, { priority: 3 }, 0, 'm')).toEqual({ priority: 3, delayAt: 500 });
    expect(marinaErrorOf(() => scheduleOf(settings, { priority: 4 }, 0, 'm')).code).toBe('MARINA_ERR_PRIORITY_INVALID');
  });

  it('reads headers and OIP parameters (timeout in microseconds), and refuses what is not an integer', () => {
    expect(requestSchedulingOf({ 'x-marina-priority': '1', 'x-marina-timeout-ms': '250' })).toEqual({
      priority: 1,
      timeoutMs: 250,
    });
    expect(requestSchedulingOf({}, { priority: 2, timeout: 1500 })).toEqual({ priority: 2, timeoutMs: 1.5 });
    expect(requestSchedulingOf({ accept: '*/*' })).toBeUndefined();
    expect(marinaErrorOf(() => requestSchedulingOf({ 'x-marina-priority': 'high' })).code).toBe(
      'MARINA_ERR_PRIORITY_INVALID',
    );
    expect(marinaErrorOf(() => requestSchedulingOf({ 'x-marina-timeout-ms': '-5' })).code).toBe(
      'MARINA_ERR_TIMEOUT_INVALID',
    );
  });

  it('names the key and source of a bad setting', () => {
    const error = marinaErrorOf(() =>
      resolveQueueSettings({
        where: "model 'm'",
        yaml: {},
        json: { priorityLevels: 2, defaultPriorityLevel: 3 },
        clientTimeoutMs: 0,
      }),
    );
    expect(error.code).toBe('MARINA_ERR_MODEL_SETTINGS_INVALID');
    expect(error.message).toContain('defaultPriorityLevel from models JSON must be an integer from 1 to 2');
  });
});

describe('the level in logs and headers', () => {
  it('ends the access log line with the level and names it in Server-Timing, only for models with levels', () => {
    const entry = {
      client: '127.0.0.1:5000',
      method: 'POST',
      url: '/predictions/m',
      statusCode: 200,
      durationMs: 3,
      requestId: 'r',
    };
    expect(formatAccessMessage({ ...entry, priority: 2 })).toBe(
      '/127.0.0.1:5000 "POST /predictions/m HTTP/1.1" 200 3 priority=2',
    );
    expect(formatAccessMessage(entry)).toBe('/127.0.0.1:5000 "POST /predictions/m HTTP/1.1" 200 3');
    expect(serverTimingHeader({ queueMs: 1, workerMs: 2, priority: 1 }, 4)).toContain('priority;desc="1"');
    expect(serverTimingHeader({ queueMs: 1, workerMs: 2 }, 4)).not.toContain('priority');
  });
});
