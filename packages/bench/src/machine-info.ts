import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
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
}

function packageVersion(name: string): string {
  try {
    const require = createRequire(import.meta.url);
    return (require(`${name}/package.json`) as { version: string }).version;
  } catch {
    return 'unknown';
  }
}

/** Reads CPU model (from /proc/cpuinfo), cores, memory and runtime versions. */
export function getMachineInfo(): MachineInfo {
  let cpuModel = os.cpus()[0]?.model ?? 'unknown';
  try {
    const match = /^model name\s*:\s*(.+)$/m.exec(readFileSync('/proc/cpuinfo', 'utf8'));
    if (match) cpuModel = match[1]!.trim();
  } catch {
    // not Linux: os.cpus() is good enough
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
  };
}
