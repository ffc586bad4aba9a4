#!/usr/bin/env node
// Runs session-memory.mjs for each onnxruntime option variant, interleaved, `repeats` times, each in
// a fresh process with MALLOC_MMAP_THRESHOLD_=1048576 (unless --no-threshold), and prints a Markdown
// table: PSS with 1 and 2 workers, the extra worker's PSS, and batch-1 latency (median of medians,
// with the spread of the per-repeat medians), plus the latency ratio to the first variant.
//
// Usage: node session-memory-sweep.mjs <folder with inline/model.onnx and external/model.onnx> [repeats=2] [runs=10] [--no-threshold] [--only=name,name]
// e.g.   node session-memory-sweep.mjs ~/.cache/marina/bench/resnet-152-v1 3 10
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const args = process.argv.slice(2);
const flags = new Set(args.filter((a) => a.startsWith('--')));
const [folder, repeatsArg = '2', runsArg = '10'] = args.filter((a) => !a.startsWith('--'));
const only = [...flags]
  .find((f) => f.startsWith('--only='))
  ?.slice('--only='.length)
  .split(',');
const job = fileURLToPath(new URL('./session-memory.mjs', import.meta.url));
const inline = path.join(folder, 'inline', 'model.onnx');
const external = path.join(folder, 'external', 'model.onnx');
if (!existsSync(inline) || !existsSync(external))
  throw new Error(`${folder} must hold inline/model.onnx and external/model.onnx`);

const variants = [
  { name: 'all, inline (current default)', model: inline, variant: { graphOptimizationLevel: 'all' } },
  { name: 'all, external', model: external, variant: { graphOptimizationLevel: 'all' } },
  { name: 'extended, inline', model: inline, variant: { graphOptimizationLevel: 'extended' } },
  { name: 'extended, external', model: external, variant: { graphOptimizationLevel: 'extended' } },
  { name: 'basic, external', model: external, variant: { graphOptimizationLevel: 'basic' } },
  {
    name: 'all, external, disable_prepacking',
    model: external,
    variant: { graphOptimizationLevel: 'all', configEntries: { 'session.disable_prepacking': '1' } },
  },
  {
    name: 'all, inline, disable_prepacking',
    model: inline,
    variant: { graphOptimizationLevel: 'all', configEntries: { 'session.disable_prepacking': '1' } },
  },
  {
    name: 'all, external, use_env_allocators',
    model: external,
    variant: { graphOptimizationLevel: 'all', configEntries: { 'session.use_env_allocators': '1' } },
  },
  {
    name: 'all, external, arena off',
    model: external,
    variant: { graphOptimizationLevel: 'all', enableCpuMemArena: false },
  },
  {
    name: 'all, external, mem pattern off',
    model: external,
    variant: { graphOptimizationLevel: 'all', enableMemPattern: false },
  },
  {
    name: 'all, external, arena + pattern off',
    model: external,
    variant: { graphOptimizationLevel: 'all', enableCpuMemArena: false, enableMemPattern: false },
  },
  {
    name: 'all, external, NchwcTransformer off',
    model: external,
    variant: {
      graphOptimizationLevel: 'all',
      configEntries: { 'optimization.disable_specified_optimizers': 'NchwcTransformer' },
    },
  },
  {
    name: 'extended, external, arena off',
    model: external,
    variant: { graphOptimizationLevel: 'extended', enableCpuMemArena: false },
  },
  {
    name: 'extended, external, disable_prepacking',
    model: external,
    variant: { graphOptimizationLevel: 'extended', configEntries: { 'session.disable_prepacking': '1' } },
  },
].filter((v) => !only || only.some((name) => v.name.includes(name)));

const env = { ...process.env };
if (flags.has('--no-threshold')) delete env.MALLOC_MMAP_THRESHOLD_;
else env.MALLOC_MMAP_THRESHOLD_ = '1048576';

const median = (values) => {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
};
const results = new Map(variants.map((v) => [v.name, []]));
for (let repeat = 0; repeat < Number(repeatsArg); repeat++) {
  for (const { name, model, variant } of variants) {
    try {
      const out = execFileSync(process.execPath, [job, model, JSON.stringify(variant), runsArg], {
        env,
        encoding: 'utf8',
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      results.get(name).push(JSON.parse(out.trim().split('\n').at(-1)));
    } catch (error) {
      results.get(name).push({
        error: String(error.stderr ?? error.message)
          .trim()
          .split('\n')
          .slice(-2)
          .join(' '),
      });
    }
    process.stderr.write(`repeat ${repeat + 1}: ${name}\n`);
  }
}

const fmtRange = (values, digits = 0) => {
  const m = median(values).toFixed(digits);
  return values.length > 1 ? `${m} (${Math.min(...values).toFixed(digits)}–${Math.max(...values).toFixed(digits)})` : m;
};
const lines = [
  `MALLOC_MMAP_THRESHOLD_=${env.MALLOC_MMAP_THRESHOLD_ ?? 'unset'}; ${repeatsArg} repeats, ${runsArg} batch-1 runs each, 1 intra-op thread per session; median (min–max of repeats)`,
  '',
  '| variant | PSS 1 worker MB | PSS 2 workers MB | extra worker MB | batch-1 p50 ms | × first |',
  '|---|---:|---:|---:|---:|---:|',
];
let baseLatency;
for (const { name } of variants) {
  const ok = results.get(name).filter((r) => !r.error);
  if (ok.length === 0) {
    lines.push(`| ${name} | failed: ${results.get(name)[0].error.slice(0, 160)} | | | | |`);
    continue;
  }
  const latencies = ok.map((r) => median(r.runMs));
  baseLatency ??= median(latencies);
  lines.push(
    `| ${name} | ${fmtRange(ok.map((r) => r.pssAfterOneMb))} | ${fmtRange(ok.map((r) => r.pssAfterTwoMb))} | ${fmtRange(ok.map((r) => r.extraWorkerPssMb))} | ${fmtRange(latencies)} | ${(median(latencies) / baseLatency).toFixed(2)}× |`,
  );
}
process.stdout.write(`${lines.join('\n')}\n`);
