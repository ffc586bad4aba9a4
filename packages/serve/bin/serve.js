#!/usr/bin/env node
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { MALLOC_MMAP_THRESHOLD_BYTES } from './malloc-threshold.js';

// glibc reads MALLOC_MMAP_THRESHOLD_ only when the process starts; with it, memory onnxruntime frees
// after loading a model goes back to the OS (ResNet-152: 814 -> 460 MB PSS for one worker, measured).
// So `serve --foreground` without it (systemd, docker, the bench) runs itself once more with it set.
// The parent stays plain JavaScript (no tsx, no server code) so it costs little while it waits. Not on other OSes,
// not under an IPC channel (the background launcher sets the variable itself), not with
// MARINA_NO_REEXEC=1.
const FORWARDED_SIGNALS = ['SIGTERM', 'SIGINT', 'SIGHUP'];
const PARENT_PID_ENV = 'MARINA_REEXEC_PARENT_PID';

const isReexecNeeded =
  process.platform === 'linux' &&
  process.argv.includes('--foreground') &&
  process.env.MALLOC_MMAP_THRESHOLD_ === undefined &&
  process.env.MARINA_NO_REEXEC !== '1' &&
  !process.channel;

if (isReexecNeeded) {
  // A process group of its own, so a terminal's Ctrl-C reaches the server once (forwarded by this
  // parent), not twice: a second SIGINT means "exit without draining" to the server.
  const child = spawn(process.execPath, [...process.execArgv, ...process.argv.slice(1)], {
    stdio: 'inherit',
    detached: true,
    env: { ...process.env, MALLOC_MMAP_THRESHOLD_: MALLOC_MMAP_THRESHOLD_BYTES, [PARENT_PID_ENV]: String(process.pid) },
  });
  const forward = (signal) => child.kill(signal);
  for (const signal of FORWARDED_SIGNALS) process.on(signal, forward);
  child.on('error', (error) => {
    process.stderr.write(
      `could not start ${process.execPath} again with MALLOC_MMAP_THRESHOLD_ set (${error.message}); set MARINA_NO_REEXEC=1 to serve in this process.\n`,
    );
    process.exit(1);
  });
  child.on('exit', (code, signal) => {
    for (const name of FORWARDED_SIGNALS) process.off(name, forward);
    if (signal) process.kill(process.pid, signal);
    else process.exit(code ?? 1);
  });
} else {
  const parentPid = Number(process.env[PARENT_PID_ENV]);
  delete process.env[PARENT_PID_ENV];
  if (parentPid > 0) {
    // In its own process group the server would outlive a SIGKILLed parent (kill -9, docker kill,
    // an OOM kill): follow it instead, as one process would have.
    setInterval(() => {
      if (process.ppid !== parentPid) process.kill(process.pid, 'SIGKILL');
    }, 250).unref();
  }
  // The compiled server (dist/bin.js). In a clone of the repository, where src/ is present, the
  // TypeScript sources run instead, through tsx (MARINA_COMPILED=1 runs dist/ there too).
  if (existsSync(new URL('../src/bin.ts', import.meta.url)) && process.env.MARINA_COMPILED !== '1') {
    const { runSources } = await import('../../../scripts/run-sources.mjs');
    runSources();
    await import('../src/bin.ts');
  } else {
    await import('../dist/bin.js');
  }
}
