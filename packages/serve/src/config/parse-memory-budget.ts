import { readFileSync } from 'node:fs';
import os from 'node:os';
import { configError } from './config-errors.ts';

const UNITS: Readonly<Record<string, number>> = {
  '': 1,
  b: 1,
  k: 1e3,
  kb: 1e3,
  m: 1e6,
  mb: 1e6,
  g: 1e9,
  gb: 1e9,
  t: 1e12,
  tb: 1e12,
  ki: 1024,
  kib: 1024,
  mi: 1024 ** 2,
  mib: 1024 ** 2,
  gi: 1024 ** 3,
  gib: 1024 ** 3,
  ti: 1024 ** 4,
  tib: 1024 ** 4,
};

/**
 * The memory the machine gives this process: the RAM, or the cgroup's limit (cgroup v2
 * `memory.max`, v1 `memory.limit_in_bytes`) when it is lower, as in a container.
 */
function machineMemoryBytes(options: { readFile?: (path: string) => string } = {}): number {
  const read = options.readFile ?? ((path: string) => readFileSync(path, 'utf8'));
  let limit = os.totalmem();
  for (const path of ['/sys/fs/cgroup/memory.max', '/sys/fs/cgroup/memory/memory.limit_in_bytes']) {
    try {
      const n = Number(read(path).trim());
      if (Number.isFinite(n) && n > 0 && n < limit) limit = n;
    } catch {
      // Not in a cgroup of that version: the RAM is the limit.
    }
  }
  return limit;
}

/**
 * `model_memory_budget`: bytes with an optional unit (`3GB`, `2.5GiB`, `800M`; K/M/G/T are powers
 * of 1000, Ki/Mi/Gi/Ti of 1024, as Kubernetes writes them) or a share of the machine's memory
 * (`60%`, see machineMemoryBytes). The schema has checked the shape already.
 * @throws MARINA_ERR_CONFIG_VALUE_INVALID for 0 bytes or a share above 100%.
 */
export function parseMemoryBudget(options: { value: string; origin: string; machineBytes?: number }): number {
  const match = /^\s*([0-9]+(?:\.[0-9]+)?)\s*(%|[KkMmGgTt]i?[Bb]?|[Bb])?\s*$/.exec(options.value);
  const amount = Number(match?.[1]);
  const unit = (match?.[2] ?? '').toLowerCase();
  let bytes: number;
  if (unit === '%') {
    if (!(amount > 0 && amount <= 100))
      throw configError.MARINA_ERR_CONFIG_VALUE_INVALID(
        `${options.origin}: model_memory_budget=${options.value.trim()} must be a share above 0% and at most 100% of the machine's memory`,
      );
    bytes = ((options.machineBytes ?? machineMemoryBytes()) * amount) / 100;
  } else {
    bytes = amount * (UNITS[unit] ?? Number.NaN);
  }
  bytes = Math.floor(bytes);
  if (!(bytes > 0))
    throw configError.MARINA_ERR_CONFIG_VALUE_INVALID(
      `${options.origin}: model_memory_budget=${options.value.trim().slice(0, 40)} is not a size above 0; write bytes with a unit (3GB, 2.5GiB) or a share (60%)`,
    );
  return bytes;
}
