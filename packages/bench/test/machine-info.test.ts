import { describe, expect, it } from 'vitest';
import type { Int8LayoutServer, Int8Summary } from '../src/bench-result.ts';
import { describeCpuFlags, getMachineInfo, isVnniIn, readCpuFlags } from '../src/machine-info.ts';
import { checkInt8Targets } from '../src/targets.ts';

// Two processors' worth of /proc/cpuinfo, trimmed: flags are read from the first.
const cpuinfo = (flags: string) =>
  `processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC\nflags\t\t: fpu sse sse2 ${flags} rdrand\n\nprocessor\t: 1\nflags\t\t: fpu\n`;

describe('machine info', () => {
  it('reports the vector flags onnxruntime dispatches on, in a fixed order, and says whether the CPU has VNNI', () => {
    const avx2 = readCpuFlags(cpuinfo('fma avx2 bmi2'));
    expect(avx2).toEqual(['avx2', 'fma']);
    expect(isVnniIn(avx2)).toBe(false);
    expect(describeCpuFlags(avx2)).toBe('avx2, fma; no VNNI');
    const zen4 = readCpuFlags(cpuinfo('avx512_vnni avx512bw avx2 fma avx512f'));
    expect(zen4).toEqual(['avx2', 'fma', 'avx512f', 'avx512bw', 'avx512_vnni']);
    expect(isVnniIn(zen4)).toBe(true);
    expect(isVnniIn(readCpuFlags(cpuinfo('avx2 avx_vnni')))).toBe(true);
    // Unknown (no flags line, or not Linux): neither yes nor no.
    expect(readCpuFlags('processor\t: 0\n')).toEqual([]);
    expect(isVnniIn([])).toBeUndefined();
    expect(describeCpuFlags(undefined)).toBe('');
  });

  it("reads this machine, sharp's version included (its package exports leave out package.json)", () => {
    const machine = getMachineInfo();
    expect(machine.sharpVersion).toMatch(/^\d+\.\d+\.\d+/);
    expect(machine.onnxruntimeVersion).toMatch(/^\d+\.\d+\.\d+/);
    expect(Array.isArray(machine.cpuFlags)).toBe(true);
  });
});

describe('int8 speed target', () => {
  /** A second-layout server whose three rounds all ran at `perSec`. */
  const layoutServer = (m: {
    perSec: number;
    pssMb: number;
    rssMb: number;
    meanCpuPercent: number;
    inferenceMs: number;
  }): Int8LayoutServer => ({
    perSec: m.perSec,
    roundsPerSec: [m.perSec, m.perSec, m.perSec],
    pssMb: m.pssMb,
    rssMb: m.rssMb,
    meanCpuPercent: m.meanCpuPercent,
    stages: { inference: m.inferenceMs, preprocess: 0.2, postprocess: 0.1 },
  });
  const summary: Int8Summary = {
    serverConfig: '1 worker, defaults',
    cores: 2,
    fp32ArchiveFileName: 'm.mar',
    int8ArchiveFileName: 'm-int8.mar',
    imagesPerRound: 100,
    rounds: 3,
    fp32PerSec: 4,
    int8PerSec: 8,
    fp32RoundsPerSec: [4, 4, 4],
    int8RoundsPerSec: [8, 8, 8],
    workers: {
      config: '2 workers × 1 thread',
      fp32: layoutServer({ perSec: 3.5, pssMb: 560, rssMb: 700, meanCpuPercent: 190, inferenceMs: 300 }),
      int8: layoutServer({ perSec: 10, pssMb: 340, rssMb: 500, meanCpuPercent: 195, inferenceMs: 100 }),
    },
    int8CeilingPerSec: 12,
    int8CeilingBatch1P50Ms: 95,
    int8CeilingBatch1PerSec: 10.5,
    int8Own: { endToEndP50Ms: 110, inferP50Ms: 99 },
    fp32PssMb: 430,
    int8PssMb: 300,
    fp32RssMb: 530,
    int8RssMb: 420,
    fp32MeanCpuPercent: 180,
    int8MeanCpuPercent: 177,
    fp32Stages: { inference: 240, preprocess: 0.2, postprocess: 0.1 },
    int8Stages: { inference: 120, preprocess: 0.2, postprocess: 0.1 },
    fp32ModelMb: 240.5,
    int8ModelMb: 61.6,
    agreement: 'top1 1.000',
    quantizeCommand: 'model-archiver --quantize int8',
  };

  it("puts onnxruntime's own int8 ÷ fp32 ratio and the CPU's VNNI beside a miss, without changing the verdict", () => {
    const [speed] = checkInt8Targets(summary, '', { fp32CeilingBatch1PerSec: 5.25, cpuFlags: ['avx2', 'fma'] });
    expect(speed!.isMet).toBe(false);
    expect(speed!.measured).toContain('= 2.00×');
    expect(speed!.explanation).toContain('short by 0.80×');
    expect(speed!.explanation).toContain(
      "onnxruntime alone on this CPU, batch 1: int8 10.50 vs fp32 5.25 img/s = 2.00× (the server's 2.00× is 100% of it)",
    );
    expect(speed!.explanation).toContain('this CPU has no VNNI (avx2, fma)');
  });

  it('says nothing of the kernels where the run did not measure the fp32 ceiling and the flags are unknown', () => {
    const [speed] = checkInt8Targets(summary);
    expect(speed!.explanation).toMatch(/^short by 0\.80×\. Per image the int8 server took/);
    const [met] = checkInt8Targets({ ...summary, int8PerSec: 12, int8RoundsPerSec: [12, 12, 12] }, '', {
      cpuFlags: ['avx2', 'avx512_vnni'],
    });
    expect(met!.isMet).toBe(true);
    expect(met!.explanation).toMatch(/^this CPU has VNNI \(avx2, avx512_vnni\)\. Same configuration per layout/);
  });

  it('judges the median of the paired rounds, so one disturbed fp32 round cannot make the pooled ratio pass', () => {
    // fp32's first round at half speed: pooled 10 ÷ 3 = 3.33×, rounds 5.0 / 2.5 / 2.5.
    const disturbed = {
      ...summary,
      fp32PerSec: 3,
      fp32RoundsPerSec: [2, 4, 4],
      int8PerSec: 10,
      int8RoundsPerSec: [10, 10, 10],
    };
    const [speed] = checkInt8Targets(disturbed);
    expect(speed!.isMet).toBe(false);
    expect(speed!.measured).toMatch(
      /^median of the paired rounds 2\.50× \(each round int8 ÷ fp32: 5\.00 \/ 2\.50 \/ 2\.50\); pooled 10\.00 vs 3\.00 img\/s = 3\.33×/,
    );
    expect(speed!.explanation).toContain('short by 0.30×');
  });

  it('judges each layout by its own paired rounds, and says which meets 2.8× and why from the measured numbers', () => {
    // Default layout: 8 ÷ 4 = 2.00× each round. Workers: rounds 10.5 ÷ 3.5 = 3.00, 3.00 and 10.5 ÷ 1.75 = 6.00, median 3.00.
    const layouts = {
      ...summary,
      workers: {
        ...summary.workers,
        fp32: { ...summary.workers.fp32, roundsPerSec: [3.5, 3.5, 1.75] },
        int8: { ...summary.workers.int8, perSec: 10.5, roundsPerSec: [10.5, 10.5, 10.5] },
      },
    };
    const [main, workers, , memory] = checkInt8Targets(layouts);
    expect(main!.name).toBe('int8 server ≥ 2.8× the fp32 server');
    expect(main!.isMet).toBe(false);
    expect(workers!.name).toBe('int8 server ≥ 2.8× the fp32 server, one single-threaded worker per core');
    expect(workers!.isMet).toBe(true);
    expect(workers!.target).toContain('both served by 2 workers × 1 thread');
    expect(workers!.measured).toMatch(
      /^median of the paired rounds 3\.00× \(each round int8 ÷ fp32: 3\.00 \/ 3\.00 \/ 6\.00\); pooled 10\.50 vs 3\.50 img\/s = 3\.00×.*PSS int8 340 MB, fp32 560 MB/,
    );
    for (const check of [main!, workers!])
      expect(check.explanation).toContain(
        'Same configuration per layout, int8 ÷ fp32 (median of the paired rounds): 1 worker, defaults 2.00× (misses 2.8×); 2 workers × 1 thread 3.00× (meets 2.8×).',
      );
    // Runs 240 ÷ 120 = 2.00× at 2 threads, 300 ÷ 100 = 3.00× at 1; CPU per image 1900 ÷ 3.5 = 542.9 ms vs 1950 ÷ 10.5 = 185.7 ms = 2.92×.
    expect(workers!.explanation).toContain(
      "2 workers × 1 thread (1 intra-op thread): the model's run 300.0 vs 100.0 ms = 3.00×, CPU per image 542.9 vs 185.7 ms = 2.92×",
    );
    expect(workers!.explanation).toContain("The CPU-per-image ratio is below the run's in 2 workers × 1 thread:");
    expect(workers!.explanation).toContain("int8's run gains more over fp32's at 1 thread (3.00×) than at 2 (2.00×)");
    expect(memory!.measured).toContain('2 workers × 1 thread: int8 340 MB vs fp32 560 MB');
    expect(memory!.isMet).toBe(true);
  });

  it('says how much CPU each server spent per image', () => {
    const [speed] = checkInt8Targets(summary);
    // fp32 180% of a core at 4 img/s = 450 ms per image; int8 177% at 8 img/s = 221.25 ms.
    expect(speed!.explanation).toContain('fp32 450.0 ms, int8 221.3 ms = 2.03×, at 1.80 and 1.77 cores busy');
  });
});
