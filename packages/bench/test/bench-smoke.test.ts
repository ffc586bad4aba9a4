import { existsSync, readFileSync } from 'node:fs';
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runBench, type BenchResult } from '../src/index.ts';
import { startOwnTimeSteps } from '../src/experiments/ceiling.ts';
import { LONE_CLIENT_BLOCK } from '../src/experiments/server-experiments.ts';
import { median } from '../src/stats.ts';

// Runs the whole bench in --smoke mode (tiny model, real server, real onnxruntime-node and sharp)
// and checks the reports exist and parse. The numbers themselves are never asserted: the machine is shared.
describe('marina-bench --smoke', () => {
  let dir: string;
  let result: BenchResult;
  let outDir: string;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'marina-bench-smoke-'));
    outDir = join(dir, 'results', 'run');
    ({ result } = await runBench({
      mode: 'smoke',
      outDir,
      cacheDir: join(dir, 'cache'),
      serverTmpRoot: join(dir, 'servers-tmp'),
    }));
  }, 240_000);

  afterAll(async () => {
    // The servers' TMPDIRs (pid files, extraction and optimised-model caches) are inside `dir`, this file's own:
    // another bench test running beside it has its own, so neither server finds the other's pid file.
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('measures every smoke experiment with successful requests', () => {
    const experiments = new Set(result.rows.map((r) => r.experiment));
    expect([...experiments].sort()).toEqual([
      'batched',
      'ceiling',
      'centralized',
      'decentralized',
      'overhead',
      'protocols',
      'sweep',
      'workers',
    ]);
    for (const row of result.rows) {
      expect(row.images, `${row.experiment} ${row.config}`).toBeGreaterThan(0);
      expect(row.errors, `${row.experiment} ${row.config}: ${row.note}`).toBe(0);
    }
  });

  it('gives its servers TMPDIRs under serverTmpRoot, never the shared $TMPDIR/marina-bench another bench run may be using', async () => {
    // The main server folder, and the second one the overhead experiment runs beside it.
    expect((await readdir(join(dir, 'servers-tmp'))).sort()).toEqual(['marina-bench', 'marina-bench-overhead-2']);
  });

  it('measures the lone client and the own time side by side, each lone request paired with an own-time run and a run of the control', () => {
    const pairs = result.references.loneClientPairs;
    expect(pairs).toHaveLength(Math.round(result.images / LONE_CLIENT_BLOCK) * LONE_CLIENT_BLOCK);
    for (const p of pairs) {
      expect(p.ownEndToEndMs).toBeGreaterThan(0);
      expect(p.ownInferMs).toBeLessThanOrEqual(p.ownEndToEndMs);
      expect(p.controlEndToEndMs).toBeGreaterThan(0);
      expect(p.controlInferMs).toBeLessThanOrEqual(p.controlEndToEndMs);
      // The server's run, from its Server-Timing header, lies inside the request's latency.
      expect(p.serverInferenceMs).toBeGreaterThan(0);
      expect(p.serverInferenceMs).toBeLessThan(p.loneMs);
    }
    const lone = result.rows.find((r) => r.experiment === 'batched' && r.concurrency === 1)!;
    expect(lone.images).toBe(pairs.length);
    expect(lone.errors).toBe(0);
    expect(lone.p50Ms).toBe(median(pairs.map((p) => p.loneMs)));
  });

  it('starts the own-time process in a session of its own, as the server, so the kernel groups neither side with the bench', async () => {
    const cache = join(dir, 'cache');
    const assetsFile = (await readdir(cache))
      .map((entry) => join(cache, entry, 'assets.json'))
      .find((path) => existsSync(path))!;
    const assets = JSON.parse(await readFile(assetsFile, 'utf8')) as { modelPath: string; imagePath: string };
    // /proc/<pid>/stat: after "(comm) " come state, ppid, pgrp and session.
    const session = (pid: number) => Number(readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ')[3]);
    const steps = await startOwnTimeSteps(assets.modelPath, assets.imagePath, 1);
    try {
      expect(session(steps.pid)).toBe(steps.pid);
      expect(session(steps.pid)).not.toBe(session(process.pid));
      const run = await steps.step();
      expect(run.inferMs).toBeGreaterThan(0);
      expect(run.inferMs).toBeLessThanOrEqual(run.endToEndMs);
    } finally {
      await steps.stop();
    }
  });

  it('writes a CSV with one line per row and the same columns on every line', async () => {
    const lines = (await readFile(join(outDir, 'results.csv'), 'utf8')).trim().split('\n');
    expect(lines[0]).toMatch(/^experiment,config,images,concurrency,throughputPerSec,p50Ms/);
    expect(lines).toHaveLength(result.rows.length + 1);
  });

  it('writes report.md with the machine, the table and every target', async () => {
    const report = await readFile(join(outDir, 'report.md'), 'utf8');
    expect(report).toContain(result.machine.cpuModel);
    expect(report).toContain('| experiment | configuration |');
    for (const target of result.targets) expect(report).toContain(target.name);
  });

  it('writes a chart and result.json, and mirrors them into latest/', async () => {
    const svg = await readFile(join(outDir, 'chart.svg'), 'utf8');
    expect(svg.startsWith('<svg')).toBe(true);
    expect(svg.trimEnd().endsWith('</svg>')).toBe(true);
    const json = JSON.parse(await readFile(join(dir, 'results', 'latest', 'result.json'), 'utf8')) as BenchResult;
    expect(json.rows).toHaveLength(result.rows.length);
  });
});
