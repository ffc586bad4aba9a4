import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { afterEach, describe, expect, it } from 'vitest';
import { readCpuNs, waitForQuiet } from '../src/process-sampler.ts';

// Real child processes: one that spins until told to stop, one that sleeps.
describe('waitForQuiet', () => {
  const children: ChildProcess[] = [];
  const start = async (script: string) => {
    const child = spawn(process.execPath, ['-e', script], { stdio: ['pipe', 'pipe', 'inherit'] });
    children.push(child);
    await once(child.stdout!, 'data'); // it has started
    return child;
  };
  afterEach(() => {
    for (const child of children.splice(0)) child.kill('SIGKILL');
  });

  it('reads the CPU time of every thread of a process, which grows while it spins and is 0 once it has gone', async () => {
    // Spins in slices, checking stdin between them, so it stops as soon as it is told to.
    const busy = await start(
      "let stop = false; process.stdin.on('data', () => { stop = true; }); process.stdout.write('up'); const spin = () => { const end = Date.now() + 20; while (Date.now() < end); if (!stop) setImmediate(spin); }; spin();",
    );
    const first = readCpuNs(busy.pid!);
    // Wait on the state, not the clock: until it has used another 50 ms of CPU.
    while (readCpuNs(busy.pid!) - first < 50e6) await new Promise((resolve) => setImmediate(resolve));
    expect(readCpuNs(busy.pid!)).toBeGreaterThan(first);
    busy.stdin!.write('stop');
    // Once it stops spinning, it goes quiet.
    expect(await waitForQuiet(() => [busy.pid!], { timeoutMs: 60_000 })).toBe(true);
    busy.kill('SIGKILL');
    await once(busy, 'exit');
    expect(readCpuNs(busy.pid!)).toBe(0);
  });

  it('waits while the CPU time grows by more than the share allowed, and gives up at the timeout', async () => {
    // A reader that is not the machine's: the decision alone, whatever the scheduler does.
    let busyNs = 0;
    const alwaysBusy = () => (busyNs += 1e9); // a full second of CPU between any two reads
    expect(await waitForQuiet(() => [1], { windowMs: 1, timeoutMs: 50, readCpu: alwaysBusy })).toBe(false);
    expect(busyNs).toBeGreaterThan(2e9); // read at least twice after the first read
    let reads = 0;
    const busyThenIdle = () => (++reads <= 3 ? reads * 1e9 : 3e9);
    expect(await waitForQuiet(() => [1], { windowMs: 1, timeoutMs: 60_000, readCpu: busyThenIdle })).toBe(true);
    expect(reads).toBe(4); // quiet at the first window without growth: reads 3 and 4 are both 3e9
  });

  it('says an idle process is quiet', async () => {
    const idle = await start("process.stdout.write('up'); setInterval(() => {}, 1 << 30);");
    expect(await waitForQuiet(() => [idle.pid!], { timeoutMs: 60_000 })).toBe(true);
  });
});
