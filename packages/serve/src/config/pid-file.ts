import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';

/**
 * What the launcher records about a running server. The file's first line is the bare pid,
 * as TorchServe's `.model_server.pid`; the second is this JSON, for `--stop`.
 */
export interface PidFileContent {
  pid: number;
  /** key_file.json of that server, removed by --stop. */
  keyFilePath?: string;
  /** The background log, when started with --start. */
  logFile?: string;
}

/**
 * `<os.tmpdir()>/.marina_server.pid`: one server per machine user as with TorchServe, so
 * `serve --stop` needs no configuration. Set TMPDIR to run an isolated second server (tests do).
 */
export function pidFilePath(): string {
  return path.join(os.tmpdir(), '.marina_server.pid');
}

export function writePidFile(content: PidFileContent): void {
  writeFileSync(pidFilePath(), `${content.pid}\n${JSON.stringify(content)}\n`, { mode: 0o600 });
}

/** The recorded server, or undefined when there is no pid file or it is unreadable. */
export function readPidFile(): PidFileContent | undefined {
  let text: string;
  try {
    text = readFileSync(pidFilePath(), 'utf8');
  } catch {
    return undefined;
  }
  const [pidLine, jsonLine] = text.split('\n');
  const pid = Number(pidLine?.trim());
  if (!Number.isInteger(pid) || pid <= 0) return undefined;
  try {
    return { ...(JSON.parse(jsonLine ?? '') as PidFileContent), pid };
  } catch {
    return { pid };
  }
}

/** Removes the pid file; with `onlyIfPid`, only when it still names that process. */
export function removePidFile(options: { onlyIfPid?: number } = {}): void {
  if (options.onlyIfPid !== undefined && readPidFile()?.pid !== options.onlyIfPid) return;
  rmSync(pidFilePath(), { force: true });
}

/**
 * True when `pid` is alive and, where /proc exists, is a Marina server (its command line has
 * `--foreground`), so a pid reused by another program after a crash is not taken for the server.
 */
export function isServerProcessAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
  try {
    const commandLine = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
    return commandLine.includes('--foreground');
  } catch {
    return true;
  }
}
