import { readFileSync, readdirSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';

/** Peak and mean resource use of a set of processes over a measured window. */
export interface ResourceUsage {
  /** Highest CPU use between two samples, in percent of one core (200 = two cores busy). */
  peakCpuPercent: number;
  /** Mean CPU use over the window, in percent of one core. */
  meanCpuPercent: number;
  /** Highest sum of resident set sizes of all sampled processes at one instant, bytes. */
  peakRssBytes: number;
  /** Highest sum of proportional set sizes (shared pages split between sharers), bytes; 0 unless `isPssSampled`. */
  peakPssBytes: number;
  /** RSS sum at the last sample, bytes (steady state after a run). */
  lastRssBytes: number;
  /** PSS sum at the last sample, bytes; 0 unless `isPssSampled`. */
  lastPssBytes: number;
  samples: number;
}

export interface ProcessSamplerOptions {
  /** Returns the pids to sample now; called at every tick (the set may change, as with job processes). */
  getPids: () => readonly number[];
  /** Sampling period, ms. Default 100. */
  intervalMs?: number;
  /** Also read /proc/<pid>/smaps_rollup for PSS (costs a few ms per sample on a large process). Default false. */
  isPssSampled?: boolean;
}

export interface ProcessSampler {
  /** Takes one sample now (also done every `intervalMs` until stopped). */
  sample(): void;
  /** Stops sampling, takes a last sample and returns the summary. */
  stop(): ResourceUsage;
}

/** Clock ticks per second for /proc/<pid>/stat times; 100 on every Linux this runs on. */
const CLOCK_TICKS_PER_SEC = 100;

function readText(path: string): string | undefined {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return undefined; // the process exited between listing and reading
  }
}

/** utime + stime of a process (all its threads, ended ones included), in clock ticks. */
export function readCpuTicks(pid: number): number | undefined {
  const stat = readText(`/proc/${pid}/stat`);
  if (stat === undefined) return undefined;
  // The command name is in parentheses and may hold spaces; the fields after it are fixed.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return Number(fields[11]) + Number(fields[12]);
}

/** Time on CPU of all of a process's threads so far, ns (/proc/<pid>/task/<tid>/schedstat); 0 once it has exited. */
export function readCpuNs(pid: number): number {
  let tids: string[];
  try {
    tids = readdirSync(`/proc/${pid}/task`);
  } catch {
    return 0;
  }
  let total = 0;
  for (const tid of tids) {
    const schedstat = readText(`/proc/${pid}/task/${tid}/schedstat`);
    if (schedstat !== undefined) total += Number(schedstat.slice(0, schedstat.indexOf(' ')));
  }
  return total;
}

/**
 * Waits until `pids` together use less than `maxCpuShare` of one core over a `windowMs` window,
 * or `timeoutMs` has passed; returns whether they went quiet. onnxruntime's pool threads spin for
 * about 50 ms after a run (allow_spinning, its default), and a spinning process slows another's
 * run by a quarter on 2 cores (measured: two own-time processes taking turns ran 142-166 ms per
 * image with no pause between turns, 117-128 ms with this wait, 115-121 ms with spinning off).
 * `readCpu` (default readCpuNs) reads a process's CPU time in ns.
 */
export async function waitForQuiet(
  getPids: () => readonly number[],
  options: { windowMs?: number; maxCpuShare?: number; timeoutMs?: number; readCpu?: (pid: number) => number } = {},
): Promise<boolean> {
  const windowMs = options.windowMs ?? 10;
  const maxCpuShare = options.maxCpuShare ?? 0.1;
  const deadline = performance.now() + (options.timeoutMs ?? 2_000);
  const readCpu = options.readCpu ?? readCpuNs;
  const total = () => getPids().reduce((sum, pid) => sum + readCpu(pid), 0);
  let before = total();
  let beforeMs = performance.now();
  while (beforeMs < deadline) {
    await sleep(windowMs);
    const now = total();
    const nowMs = performance.now();
    if (now - before < (nowMs - beforeMs) * 1e6 * maxCpuShare) return true;
    before = now;
    beforeMs = nowMs;
  }
  return false;
}

function readKbField(text: string | undefined, field: string): number {
  if (text === undefined) return 0;
  const match = new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(text);
  return match ? Number(match[1]) * 1024 : 0;
}

/** Resident set size of a process, bytes (0 when it has exited). */
export function readRssBytes(pid: number): number {
  return readKbField(readText(`/proc/${pid}/status`), 'VmRSS');
}

/** Proportional set size of a process, bytes (0 when it has exited). */
function readPssBytes(pid: number): number {
  return readKbField(readText(`/proc/${pid}/smaps_rollup`), 'Pss');
}

/**
 * A process and all its descendants. This kernel has no /proc/<pid>/task/<tid>/children,
 * so the parent links of every process are read once per call.
 */
export function listProcessTree(rootPid: number): number[] {
  const childrenOf = new Map<number, number[]>();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const stat = readText(`/proc/${entry}/stat`);
    if (stat === undefined) continue;
    const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
    const list = childrenOf.get(ppid) ?? [];
    list.push(Number(entry));
    childrenOf.set(ppid, list);
  }
  const tree: number[] = [];
  const stack = [rootPid];
  while (stack.length > 0) {
    const pid = stack.pop()!;
    tree.push(pid);
    stack.push(...(childrenOf.get(pid) ?? []));
  }
  return tree;
}

/**
 * Samples CPU and memory of a changing set of processes from /proc every `intervalMs`
 * until `stop()`. CPU of a process that exits between two samples is lost for that
 * interval, so peaks for short-lived jobs are a lower bound.
 */
export function startProcessSampler(options: ProcessSamplerOptions): ProcessSampler {
  const intervalMs = options.intervalMs ?? 100;
  const lastTicks = new Map<number, number>();
  const startedAtMs = performance.now();
  let lastAtMs = startedAtMs;
  let totalTicks = 0;
  const usage: ResourceUsage = {
    peakCpuPercent: 0,
    meanCpuPercent: 0,
    peakRssBytes: 0,
    peakPssBytes: 0,
    lastRssBytes: 0,
    lastPssBytes: 0,
    samples: 0,
  };

  const sample = (): void => {
    const nowMs = performance.now();
    let deltaTicks = 0;
    let rssBytes = 0;
    let pssBytes = 0;
    for (const pid of options.getPids()) {
      const ticks = readCpuTicks(pid);
      if (ticks === undefined) continue;
      deltaTicks += ticks - (lastTicks.get(pid) ?? ticks);
      lastTicks.set(pid, ticks);
      rssBytes += readRssBytes(pid);
      if (options.isPssSampled) pssBytes += readPssBytes(pid);
    }
    const elapsedMs = nowMs - lastAtMs;
    if (usage.samples > 0 && elapsedMs > intervalMs / 2) {
      usage.peakCpuPercent = Math.max(
        usage.peakCpuPercent,
        (deltaTicks / CLOCK_TICKS_PER_SEC / (elapsedMs / 1000)) * 100,
      );
    }
    totalTicks += deltaTicks;
    lastAtMs = nowMs;
    usage.samples += 1;
    usage.peakRssBytes = Math.max(usage.peakRssBytes, rssBytes);
    usage.peakPssBytes = Math.max(usage.peakPssBytes, pssBytes);
    usage.lastRssBytes = rssBytes;
    usage.lastPssBytes = pssBytes;
  };

  sample();
  const timer = setInterval(sample, intervalMs);
  return {
    sample,
    stop(): ResourceUsage {
      clearInterval(timer);
      sample();
      const windowMs = lastAtMs - startedAtMs;
      usage.meanCpuPercent = windowMs > 0 ? (totalTicks / CLOCK_TICKS_PER_SEC / (windowMs / 1000)) * 100 : 0;
      return { ...usage };
    },
  };
}
