/**
 * Linux's SCHED_BATCH for a worker thread: the kernel treats the thread as CPU-bound and never
 * lets its wake-up preempt a running thread. A worker woken with a batch then waits for a free
 * core, or for the end of the running thread's time slice, instead of pushing the HTTP thread off
 * its core for the length of the batch. Its share of the CPU is unchanged (same nice value).
 *
 * Measured (2-core AMD EPYC, tensor model 2x+1, 32 clients, 1 worker × 1 thread, batch 8, six
 * alternating rounds against a bare fastify route): 18,709 against 15,399 req/s median, 56–65
 * against 68–87 µs of server CPU per request. Without it, each batch message cost the HTTP thread
 * 62–92 µs of wall time under that load, against 15–23 µs on a quiet machine.
 *
 * Node has no call for a thread's scheduling policy, so util-linux's `chrt` (present on Debian,
 * Ubuntu, RHEL and their container images) sets it for this thread's id. Threads the thread
 * starts afterwards, such as onnxruntime's intra-op pool, inherit the policy.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readlinkSync } from 'node:fs';
import { setPriority } from 'node:os';

/** Server-wide switch: '0' leaves worker threads under the default policy. On by default on Linux. */
export const WORKER_SCHED_BATCH_ENV = 'MARINA_WORKER_SCHED_BATCH';

/** Absolute paths only: the server never runs a `chrt` found through PATH. */
const CHRT_PATHS = ['/usr/bin/chrt', '/bin/chrt'];

/** Server-wide switch: '0' runs shadow versions' workers like every other worker. On by default. */
export const SHADOW_SCHED_IDLE_ENV = 'MARINA_SHADOW_SCHED_IDLE';

/** The nice value a background worker takes where SCHED_IDLE cannot be set (the lowest priority a thread can have). */
const BACKGROUND_NICE = 19;

/** What `useSchedBatch` did: applied, off by setting, or why it could not (for a warning). */
export type SchedBatchOutcome = { applied: true } | { applied: false; reason: string; isOff?: true };

/**
 * Puts the calling thread under SCHED_BATCH (call it first thing in a worker thread, before the
 * session creates its pool). Never throws: a machine without `chrt` or without /proc serves as
 * before, and the outcome says why.
 */
export function useSchedBatch(
  env: Record<string, string | undefined> = process.env,
  platform: NodeJS.Platform = process.platform,
): SchedBatchOutcome {
  if (env[WORKER_SCHED_BATCH_ENV] === '0')
    return { applied: false, reason: `${WORKER_SCHED_BATCH_ENV}=0`, isOff: true };
  if (platform !== 'linux')
    return { applied: false, reason: `SCHED_BATCH is Linux's (this is ${platform})`, isOff: true };
  return runChrt('--batch');
}

/** This thread's id (/proc/thread-self links to /proc/<pid>/task/<tid> of the thread that reads it). */
function currentThreadId(): number | { reason: string } {
  try {
    return Number(readlinkSync('/proc/thread-self').split('/').pop());
  } catch (error) {
    return { reason: `cannot read /proc/thread-self (${(error as Error).message})` };
  }
}

/** Runs util-linux's `chrt <policy> --pid 0 <this thread>`; never throws. */
function runChrt(policy: '--batch' | '--idle'): SchedBatchOutcome {
  const chrt = CHRT_PATHS.find((path) => existsSync(path));
  if (chrt === undefined) return { applied: false, reason: `util-linux's chrt is not at ${CHRT_PATHS.join(' or ')}` };
  const tid = currentThreadId();
  if (typeof tid !== 'number') return { applied: false, ...tid };
  try {
    execFileSync(chrt, [policy, '--pid', '0', String(tid)], {
      stdio: ['ignore', 'ignore', 'pipe'],
      timeout: 10_000,
    });
  } catch (error) {
    const stderr = (error as { stderr?: Buffer }).stderr?.toString().trim();
    return { applied: false, reason: `${chrt} failed: ${stderr || (error as Error).message}` };
  }
  return { applied: true };
}

/**
 * Puts the calling thread at the lowest CPU priority: Linux's SCHED_IDLE, under which it runs only
 * on a core that nothing else wants, and is pushed off it by any other thread that wakes. For the
 * workers of a shadow version: their copies then take only spare CPU, and never the live workers',
 * the HTTP thread's or another process's time. Threads it starts afterwards (onnxruntime's pool)
 * inherit it. Where SCHED_IDLE cannot be set (no `chrt`, or refused), the thread takes nice
 * 19 instead (a thread may always lower its own priority). A thread can never raise its priority
 * again without CAP_SYS_NICE, so a worker that stops being a shadow is replaced, not switched back.
 * Never throws.
 */
export function useSchedIdle(
  env: Record<string, string | undefined> = process.env,
  platform: NodeJS.Platform = process.platform,
): SchedBatchOutcome {
  if (env[SHADOW_SCHED_IDLE_ENV] === '0') return { applied: false, reason: `${SHADOW_SCHED_IDLE_ENV}=0`, isOff: true };
  // Elsewhere a priority is the whole process's: lowering it would slow the HTTP thread too.
  if (platform !== 'linux')
    return { applied: false, reason: `a thread's own priority is Linux's (this is ${platform})`, isOff: true };
  const idle = runChrt('--idle');
  if (idle.applied) return idle;
  try {
    // Linux's nice is per thread, and 0 names the calling thread.
    setPriority(0, BACKGROUND_NICE);
    return { applied: true };
  } catch (error) {
    return {
      applied: false,
      reason: `${idle.reason}; nice ${BACKGROUND_NICE} failed: ${(error as Error).message}`,
    };
  }
}
