import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import os from 'node:os';

/** The machine a run came from, for the report's header. */
export interface MachineInfo {
  cpuModel: string;
  cores: number;
  memoryGb: number;
  nodeVersion: string;
  onnxruntimeVersion: string;
  sharpVersion: string;
  kernel: string;
  hostname: string;
  /**
   * The vector-instruction flags of /proc/cpuinfo that decide onnxruntime's CPU kernels (empty
   * when unknown): int8 runs much faster with VNNI (avx512_vnni, avx_vnni) than on AVX2 alone.
   * Optional: results written before it was recorded lack it.
   */
  cpuFlags?: string[];
}

/** The /proc/cpuinfo flags reported, in this order: those onnxruntime's MLAS dispatches on for fp32 and int8. */
const REPORTED_CPU_FLAGS = ['avx2', 'fma', 'avx512f', 'avx512bw', 'avx512_vnni', 'avx_vnni', 'amx_int8'] as const;

/** Whether the flags show VNNI, which onnxruntime's int8 kernels use; undefined when the flags are unknown. */
export function isVnniIn(flags: readonly string[] | undefined): boolean | undefined {
  if (flags === undefined || flags.length === 0) return undefined;
  return flags.includes('avx512_vnni') || flags.includes('avx_vnni');
}

/** "avx2, fma; no VNNI" for a report; '' when the flags are unknown. */
export function describeCpuFlags(flags: readonly string[] | undefined): string {
  const vnni = isVnniIn(flags);
  if (vnni === undefined) return '';
  return `${flags!.join(', ')}; ${vnni ? 'VNNI' : 'no VNNI'}`;
}

/**
 * A package's version from its package.json, found by walking up from its resolved entry (a
 * package whose `exports` leave out ./package.json, as sharp's do, cannot be required for it).
 */
function packageVersion(name: string): string {
  const require = createRequire(import.meta.url);
  try {
    return (require(`${name}/package.json`) as { version: string }).version;
  } catch {
    // fall through: look beside the entry point
  }
  try {
    let dir = dirname(require.resolve(name));
    for (let i = 0; i < 6; i++) {
      try {
        const json = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as { name?: string; version?: string };
        if (json.name === name && json.version) return json.version;
      } catch {
        // no package.json here
      }
      dir = dirname(dir);
    }
  } catch {
    // not installed
  }
  return 'unknown';
}

/** The flags of REPORTED_CPU_FLAGS that a /proc/cpuinfo text lists for its first processor. */
export function readCpuFlags(cpuinfo: string): string[] {
  const line = /^flags\s*:\s*(.*)$/m.exec(cpuinfo)?.[1];
  if (line === undefined) return [];
  const present = new Set(line.trim().split(/\s+/));
  return REPORTED_CPU_FLAGS.filter((flag) => present.has(flag));
}

/** Reads CPU model and flags (from /proc/cpuinfo), cores, memory and runtime versions. */
export function getMachineInfo(): MachineInfo {
  let cpuModel = os.cpus()[0]?.model ?? 'unknown';
  let cpuFlags: string[] = [];
  try {
    const cpuinfo = readFileSync('/proc/cpuinfo', 'utf8');
    const match = /^model name\s*:\s*(.+)$/m.exec(cpuinfo);
    if (match) cpuModel = match[1]!.trim();
    cpuFlags = readCpuFlags(cpuinfo);
  } catch {
    // not Linux: os.cpus() is good enough, and the flags stay unknown
  }
  return {
    cpuModel,
    cores: os.availableParallelism(),
    memoryGb: Math.round((os.totalmem() / 1024 ** 3) * 10) / 10,
    nodeVersion: process.version,
    onnxruntimeVersion: packageVersion('onnxruntime-node'),
    sharpVersion: packageVersion('sharp'),
    kernel: `${os.type()} ${os.release()}`,
    hostname: os.hostname(),
    cpuFlags,
  };
}
