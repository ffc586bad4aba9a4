import { mkdtemp, readFile, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runBench, type BenchResult } from '../src/index.ts';
import { meanServerTimings } from '../src/experiments/int8.ts';

describe('meanServerTimings', () => {
  it('averages each Server-Timing entry over the responses', () => {
    const means = meanServerTimings([
      'queue;dur=10.00;desc="job queue", preprocess;dur=2.00;desc="decode and preprocess", inference;dur=20.00;desc="model", total;dur=33.00;desc="total"',
      'queue;dur=30.00;desc="job queue", preprocess;dur=4.00;desc="decode and preprocess", inference;dur=22.00;desc="model", total;dur=57.00;desc="total"',
    ]);
    expect(means).toEqual({ queue: 20, preprocess: 3, inference: 21, total: 45 });
  });
});

// The int8 experiment in --quick mode (ResNet-18, generated, quantised by the real model-archiver, two real servers,
// the real ceiling child) on few requests: its STRUCTURE only. No number is asserted: the machine is shared, and
// speed targets belong to the bench's own run, not to a test.
describe('marina-bench --quick --experiments int8', () => {
  let dir: string;
  let cacheDir: string;
  let outDir: string;
  let result: BenchResult;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'marina-bench-int8-'));
    cacheDir = join(dir, 'cache');
    outDir = join(dir, 'results', 'run');
    ({ result } = await runBench({
      mode: 'quick',
      experiments: ['int8'],
      images: 12,
      concurrency: 6,
      outDir,
      cacheDir,
      serverTmpRoot: join(dir, 'servers-tmp'),
    }));
  }, 240_000);

  afterAll(async () => {
    // The servers' TMPDIRs (pid files, extraction and optimised-model caches) are inside `dir`, this file's own:
    // another bench test running beside it has its own, so neither server finds the other's pid file.
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('serves the fp32 and the int8 archive in both layouts (1 worker; a single-threaded worker per core), every request answered, and runs the int8 ceiling', () => {
    const rows = result.rows.filter((r) => r.experiment === 'int8');
    const workers = `${result.int8!.workers.config}`;
    expect(workers).toMatch(/^\d+ workers × 1 thread$/);
    expect(rows.map((r) => r.config)).toEqual([
      'fp32 server (resnet-18-external.mar), 1 worker, defaults',
      'int8 server (resnet-18-int8.mar), 1 worker, defaults',
      `fp32 server (resnet-18-external.mar), ${workers}`,
      `int8 server (resnet-18-int8.mar), ${workers}`,
      'int8 ceiling, batch 1',
      'int8 ceiling, batch 2',
      'int8 ceiling, batch 4',
      'int8 ceiling, batch 8',
    ]);
    for (const row of rows) {
      expect(row.images, row.config).toBeGreaterThan(0);
      expect(row.errors, `${row.config}: ${row.note}`).toBe(0);
      expect(Number.isFinite(row.throughputPerSec), row.config).toBe(true);
    }
    // Two rounds each, 12 requests per round, interleaved.
    expect(rows[0]!.images).toBe(24);
    expect(rows[1]!.images).toBe(24);
    expect(rows[2]!.images).toBe(24);
    expect(rows[3]!.images).toBe(24);
    expect(result.rows.every((r) => r.experiment === 'int8')).toBe(true);
  });

  it("summarises every server: rounds, PSS, Server-Timing stages and the archive's own agreement", () => {
    const s = result.int8!;
    expect(s).toBeDefined();
    expect(s.rounds).toBe(2);
    expect(s.fp32RoundsPerSec).toHaveLength(2);
    expect(s.int8RoundsPerSec).toHaveLength(2);
    for (const server of [s.workers.fp32, s.workers.int8]) {
      expect(server.roundsPerSec).toHaveLength(2);
      expect(server.pssMb).toBeGreaterThan(0);
      expect(server.stages.inference).toBeGreaterThan(0);
    }
    for (const value of [
      s.fp32PssMb,
      s.int8PssMb,
      s.fp32RssMb,
      s.int8RssMb,
      s.int8CeilingPerSec,
      s.int8Own.endToEndP50Ms,
      s.int8Own.inferP50Ms,
    ]) {
      expect(value).toBeGreaterThan(0);
    }
    for (const stages of [s.fp32Stages, s.int8Stages]) {
      expect(Object.keys(stages).sort()).toEqual(['inference', 'postprocess', 'preprocess', 'queue', 'total']);
      expect(stages.inference).toBeGreaterThan(0);
    }
    // The int8 model is the quantised file model-archiver wrote (a quarter of the fp32 weights' bytes or so).
    expect(s.int8ModelMb).toBeLessThan(s.fp32ModelMb);
    expect(s.agreement).toMatch(
      /^top1 \d\.\d{3}, lowest cosine 0\.\d{5} on 8 images by 4-fold, each calibrated on 6\+ \(auto calibration; \d+ nodes kept in fp32\)$/,
    );
    expect(s.quantizeCommand).toContain('--quantize int8 --calibration');
  });

  it('checks the int8 targets with measured values, the speed one per layout, and says where the time goes', async () => {
    const names = [
      'int8 server ≥ 2.8× the fp32 server',
      'int8 server ≥ 2.8× the fp32 server, one single-threaded worker per core',
      'int8 server ≥ 80% of the int8 ceiling',
      'int8 server uses less memory than fp32',
    ];
    for (const name of names) {
      const check = result.targets.find((t) => t.name === name);
      expect(check, name).toBeDefined();
      expect(typeof check!.isMet, name).toBe('boolean');
      expect(check!.target, name).toContain('set for ResNet-152; this run: resnet-18');
    }
    // Each layout's verdict is the median of its own paired rounds, int8 ÷ fp32 in the same configuration (nearest
    // rank: of two rounds, the lower).
    const s = result.int8!;
    const pairedMedian = (int8: number[], fp32: number[]) => Math.min(int8[0]! / fp32[0]!, int8[1]! / fp32[1]!);
    for (const [name, ratio] of [
      [names[0]!, pairedMedian(s.int8RoundsPerSec, s.fp32RoundsPerSec)],
      [names[1]!, pairedMedian(s.workers.int8.roundsPerSec, s.workers.fp32.roundsPerSec)],
    ] as const) {
      const check = result.targets.find((t) => t.name === name)!;
      expect(check.measured).toMatch(new RegExp(`^median of the paired rounds ${ratio.toFixed(2)}×`));
      expect(check.isMet).toBe(ratio >= 2.8);
    }
    const note = result.notes.find((n) => n.startsWith('int8: '));
    expect(note).toMatch(/Per image the int8 server took [\d.]+ ms of wall time/);
    expect(note).toMatch(/Decoding \+ preprocessing one 640×480 JPEG takes [\d.]+ ms/);
    const report = await readFile(join(outDir, 'report.md'), 'utf8');
    for (const name of names) expect(report).toContain(name);
    await stat(join(cacheDir, 'resnet-18-v1', 'model-store', 'resnet-18-int8.mar'));
  });
});
