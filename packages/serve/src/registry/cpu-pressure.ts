/**
 * The machine's CPU pressure from Linux PSI (`/proc/pressure/cpu`, "some avg10"): the share of the
 * last 10 s in which at least one runnable task waited for a CPU. It sees contention from every
 * process on the machine, not only the server's own queues, so shadow copies can be shed when
 * the machine has no headroom although the live version's queue is momentarily empty.
 */
import { readFileSync } from 'node:fs';

/** Reads PSI at most once per `maxAgeMs`; undefined where the kernel has no PSI (the gate is then off). */
export function createCpuPressureReader(
  options: { path?: string; maxAgeMs?: number; now?: () => number } = {},
): () => number | undefined {
  const path = options.path ?? '/proc/pressure/cpu';
  const maxAgeMs = options.maxAgeMs ?? 1000;
  const now = options.now ?? (() => performance.now());
  let readAt = Number.NEGATIVE_INFINITY;
  let value: number | undefined;
  let isMissing = false;
  return () => {
    if (isMissing) return undefined;
    if (now() - readAt < maxAgeMs) return value;
    readAt = now();
    try {
      const match = /^some avg10=([\d.]+)/m.exec(readFileSync(path, 'utf8'));
      value = match ? Number(match[1]) : undefined;
    } catch {
      // No PSI here (older kernel, or a container without /proc/pressure): never read again.
      isMissing = true;
      value = undefined;
    }
    return value;
  };
}
