/**
 * The host numbers behind TorchServe's system metrics (CPUUtilization, MemoryUsed,
 * MemoryAvailable, MemoryUtilization, DiskUsage, DiskUtilization, DiskAvailable), in its units:
 * percent, megabytes, gigabytes. Read synchronously from `os` and `fs.statfsSync`; one read is
 * reused for calls within `cacheMs`, so a scrape that asks for seven gauges reads once.
 */
import { readFileSync, statfsSync } from 'node:fs';
import os from 'node:os';

export interface SystemMetrics {
  /** Busy share of all cores since the previous read (since start-up on the first), percent. */
  cpuUtilizationPercent: number;
  memoryUsedMb: number;
  memoryAvailableMb: number;
  memoryUtilizationPercent: number;
  /** Undefined when the disk cannot be read (the gauges are then left out). */
  diskUsedGb: number | undefined;
  diskAvailableGb: number | undefined;
  diskUtilizationPercent: number | undefined;
}

const MB = 1024 * 1024;
const GB = 1024 * MB;

function cpuTimes(): { idle: number; total: number } {
  let idle = 0;
  let total = 0;
  for (const cpu of os.cpus()) {
    const t = cpu.times;
    idle += t.idle;
    total += t.user + t.nice + t.sys + t.idle + t.irq;
  }
  return { idle, total };
}

/** MemAvailable from /proc/meminfo (what psutil, and so TorchServe, reports), else os.freemem(). */
function availableMemoryBytes(): number {
  try {
    const match = /^MemAvailable:\s+(\d+) kB/m.exec(readFileSync('/proc/meminfo', 'utf8'));
    if (match) return Number(match[1]) * 1024;
  } catch {
    // Not Linux: fall through.
  }
  return os.freemem();
}

export function createSystemMetricsReader(options: { diskPath: string; cacheMs?: number }): { read(): SystemMetrics } {
  const cacheMs = options.cacheMs ?? 500;
  let previous = cpuTimes();
  let cached: { at: number; value: SystemMetrics } | undefined;
  return {
    read() {
      const now = Date.now();
      if (cached && now - cached.at < cacheMs) return cached.value;
      const current = cpuTimes();
      const total = current.total - previous.total;
      const idle = current.idle - previous.idle;
      // No time passed between two reads: report the load since start-up instead of 0/0.
      const cpu = total > 0 ? (1 - idle / total) * 100 : (1 - current.idle / Math.max(1, current.total)) * 100;
      previous = current;
      const totalMem = os.totalmem();
      const available = availableMemoryBytes();
      let disk: Pick<SystemMetrics, 'diskUsedGb' | 'diskAvailableGb' | 'diskUtilizationPercent'> = {
        diskUsedGb: undefined,
        diskAvailableGb: undefined,
        diskUtilizationPercent: undefined,
      };
      try {
        const fs = statfsSync(options.diskPath);
        const size = fs.blocks * fs.bsize;
        const free = fs.bfree * fs.bsize;
        const availableDisk = fs.bavail * fs.bsize;
        const used = size - free;
        disk = {
          diskUsedGb: used / GB,
          diskAvailableGb: availableDisk / GB,
          diskUtilizationPercent: size > 0 ? (used / (used + availableDisk)) * 100 : 0,
        };
      } catch {
        // Folder gone or not a local file system: leave the disk gauges out.
      }
      const value: SystemMetrics = {
        cpuUtilizationPercent: Math.max(0, Math.min(100, cpu)),
        memoryUsedMb: (totalMem - available) / MB,
        memoryAvailableMb: available / MB,
        memoryUtilizationPercent: ((totalMem - available) / totalMem) * 100,
        ...disk,
      };
      cached = { at: now, value };
      return value;
    },
  };
}
