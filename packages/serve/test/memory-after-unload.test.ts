/**
 * The memory comes back after an unload: a ResNet-18 (47 MB of weights, real onnxruntime
 * sessions in real worker threads) is loaded on demand and unloaded four times in a server process
 * of its own, started with the environment serve sets (MALLOC_MMAP_THRESHOLD_=1048576), and its
 * PSS is read from /proc/self/smaps_rollup at each step.
 *
 * Tolerances, and why:
 * - The first unload leaves onnxruntime's one-time cost in the process (its code pages, its
 *   global environment: 25–40 MB measured, see the onnxruntime-node facts), so the lowest unload
 *   may end up to 64 MB above where the process started, and the first up to 96 MB: glibc can
 *   keep freed memory in a thread's arena until a later cycle's thread reuses and frees it (a CI
 *   run: started at 160 MB, unloads ended at 230, 205, 206 and 176 MB).
 * - Later unloads end no more than 24 MB above where the first one ended, and none more than 24 MB
 *   above a lower one before it: no growth per cycle (without the threshold glibc kept about 5 MB
 *   more each cycle). On the machine this was written on they ended 2–13 MB below the first and
 *   within 5 MB of each other. A reading may drop by more, which is no growth: on a loaded machine
 *   the later two once ended 28 MB below the first two (205, 207, 178, 179 MB), memory of an
 *   ended thread given back late.
 * - Each unload gives back at least half of what the model's load and first request took.
 */
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { writeResnet, writeSampleJpeg } from '@marina/model-zoo';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { writeModelFolder, tempDir } from './helpers.ts';

const MB = 2 ** 20;
const mb = (bytes: number) => Math.round(bytes / MB);
const isLinux = existsSync('/proc/self/smaps_rollup');

describe.runIf(isLinux)('memory after an unload', () => {
  let dir: Awaited<ReturnType<typeof tempDir>>;

  beforeAll(async () => {
    dir = await tempDir('marina-memory-');
    await writeModelFolder({
      dir: join(dir.path, 'resnet18'),
      modelName: 'resnet18',
      handler: 'image_classifier',
      writeModel: (path) => writeResnet({ depth: 18, outputPath: path, seed: 18 }),
    });
    await writeSampleJpeg({ outputPath: join(dir.path, 'sample.jpg'), width: 320, height: 240 });
  });

  afterAll(async () => {
    await dir?.cleanup();
  });

  it('comes back close to where it was before the load, and does not grow with cycles', async () => {
    const child = spawn(
      process.execPath,
      [
        '--expose-gc',
        '--conditions=development',
        '--import',
        'tsx',
        new URL('./memory-cycles-child.ts', import.meta.url).pathname,
        join(dir.path, 'resnet18'),
        join(dir.path, 'sample.jpg'),
        '4',
        dir.path,
      ],
      { env: { ...process.env, MALLOC_MMAP_THRESHOLD_: '1048576' }, stdio: ['ignore', 'pipe', 'inherit'] },
    );
    let out = '';
    child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
    const code = await new Promise<number | null>((resolve) => child.on('exit', resolve));
    expect(code).toBe(0);
    const result = JSON.parse(out.trim().split('\n').pop()!) as {
      before: number;
      cycles: Array<{ status: number; loaded: number; residentBytes: number; unloaded: number }>;
    };
    const [first, ...later] = result.cycles;
    // Every reading, in MB, in each failure message: what the process did, not only which check failed.
    const seen = `before ${mb(result.before)} MB; per cycle [loaded, residentBytes, after unload]: ${JSON.stringify(result.cycles.map((c) => [mb(c.loaded), mb(c.residentBytes), mb(c.unloaded)]))}`;
    expect(
      result.cycles.map((c) => c.status),
      seen,
    ).toEqual([200, 200, 200, 200]);
    const laterUnloaded = later.map((cycle) => cycle.unloaded);
    expect(Math.min(first!.unloaded, ...laterUnloaded) - result.before, seen).toBeLessThan(64 * MB);
    expect(first!.unloaded - result.before, seen).toBeLessThan(96 * MB);
    expect(Math.max(...laterUnloaded), seen).toBeLessThan(first!.unloaded + 24 * MB);
    for (let i = 1; i < laterUnloaded.length; i++)
      expect(laterUnloaded[i]! - Math.min(...laterUnloaded.slice(0, i)), seen).toBeLessThan(24 * MB);
    for (const cycle of result.cycles) {
      const before = cycle === first ? result.before : first!.unloaded;
      expect(cycle.loaded - cycle.unloaded, seen).toBeGreaterThan((cycle.loaded - before) / 2);
      // describe's residentBytes was measured, not guessed: the load's growth (plus its first batch).
      expect(cycle.residentBytes, seen).toBeGreaterThan(20 * MB);
    }
  });
});
