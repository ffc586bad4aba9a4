import { readFileSync, readdirSync } from 'node:fs';

/** Linux scheduling policies as /proc reports them. */
export const SCHED_OTHER = 0;
export const SCHED_BATCH = 3;
export const SCHED_IDLE = 5;

/** Scheduling policy of each thread of this process (field 41 of /proc/self/task/<tid>/stat), by thread id. */
export function threadPolicies(): Map<number, number> {
  const policies = new Map<number, number>();
  for (const tid of readdirSync('/proc/self/task')) {
    try {
      const stat = readFileSync(`/proc/self/task/${tid}/stat`, 'utf8');
      policies.set(Number(tid), Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[38]));
    } catch {
      // the thread ended between listing and reading
    }
  }
  return policies;
}

/** The policies of the threads alive now that were not there in `before` (threads of earlier tests may still be ending). */
export const newThreadPolicies = (before: Map<number, number>): number[] =>
  [...threadPolicies()].filter(([tid]) => !before.has(tid)).map(([, policy]) => policy);
