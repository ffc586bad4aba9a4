import { cp, mkdir, rm, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import type { BenchResult } from '../bench-result.ts';
import { describeCpuFlags } from '../machine-info.ts';
import { formatCsv } from './format-csv.ts';
import { formatMarkdownTable } from './format-table.ts';
import { renderChartSvg } from './render-chart-svg.ts';
import { formatManyModelsSection, renderManyModelsSvg } from '../experiments/many-models.ts';

/** Paths of the files one run writes. */
export interface ReportFiles {
  outDir: string;
  csvPath: string;
  markdownPath: string;
  chartPath: string;
  jsonPath: string;
  /** The copy in `<parent of outDir>/latest`. */
  latestDir: string;
}

const fmt = (v: number, digits = 1) => (Number.isFinite(v) ? v.toFixed(digits) : 'n/a');

/** report.md: machine, run parameters, the table, targets met/missed (with why), memory, notes. */
export function formatMarkdownReport(result: BenchResult): string {
  const m = result.machine;
  const lines: string[] = [];
  lines.push(`# Marina bench: ${result.model} (${result.mode} run)`, '');
  lines.push(`![chart](chart.svg)`, '');
  lines.push('## Machine', '');
  const flags = describeCpuFlags(m.cpuFlags);
  lines.push(
    `- CPU: ${m.cpuModel}, ${m.cores} cores${flags ? ` (${flags})` : ''}; memory ${m.memoryGb} GB; ${m.kernel}; host ${m.hostname}`,
  );
  lines.push(`- Node ${m.nodeVersion}, onnxruntime-node ${m.onnxruntimeVersion}, sharp ${m.sharpVersion}`);
  lines.push(
    `- Started ${result.startedAt}, took ${fmt(result.durationSec, 0)} s; model ${result.model} (${fmt(result.modelSizeMb, 0)} MB on disk); ${result.images} requests per server experiment at ${result.concurrency} clients`,
  );
  lines.push(
    `- The machine may be shared: figures vary by up to about 30% between runs, so compare ratios measured in one run.`,
    '',
  );
  lines.push('## Results', '');
  lines.push(formatMarkdownTable(result.rows), '');
  lines.push(
    `Ratios are to the ceiling's best batch size and to the best decentralized cap, both measured in this run. CPU is in % of one core (${m.cores * 100}% = all cores). RSS is of the server process tree, or the sum over live job processes for decentralized runs.`,
    '',
  );
  lines.push(
    `Model's own time for one image at ${m.cores} threads (decode + preprocess + run, in one process): p50 ${fmt(result.references.ownEndToEndP50Ms)} ms, of which the run alone ${fmt(result.references.ownInferP50Ms)} ms. Overhead model (tensor 2x+1), per request: ${fmt(result.references.tinyOwnEndToEndP50Ms, 3)} ms parse + run + serialise (run ${fmt(result.references.tinyOwnInferP50Ms, 3)} ms).`,
    '',
  );
  lines.push('## Targets', '');
  lines.push('| target | threshold | measured | result |', '|---|---|---|---|');
  for (const t of result.targets) {
    const verdict = t.isMet === undefined ? 'not measured' : t.isMet ? '**met**' : '**missed**';
    lines.push(`| ${t.name} | ${t.target} | ${t.measured} | ${verdict} |`);
  }
  lines.push('');
  const missed = result.targets.filter((t) => t.isMet === false || (t.isMet && t.explanation));
  if (missed.length > 0) {
    lines.push('### Why', '');
    for (const t of missed) lines.push(`- **${t.name}**: ${t.explanation}`);
    lines.push('');
  }
  if (result.memory.length > 0) {
    lines.push('## Memory', '');
    lines.push('| variant | RSS MB (peak) | PSS MB (at rest) |', '|---|---:|---:|');
    for (const v of result.memory) lines.push(`| ${v.label} | ${fmt(v.rssMb, 0)} | ${fmt(v.pssMb, 0)} |`);
    lines.push(
      '',
      `Model size: ${fmt(result.modelSizeMb, 0)} MB. An extra worker's cost is the 2-worker figure minus the 1-worker figure of the same variant.`,
      '',
    );
  }
  if (result.manyModels) lines.push(...formatManyModelsSection(result.manyModels));
  if (result.notes.length > 0) {
    lines.push('## Notes', '');
    for (const note of result.notes) lines.push(`- ${note}`);
    lines.push('');
  }
  return lines.join('\n');
}

/** Writes results.csv, report.md, chart.svg and result.json into `outDir`, then mirrors them into `<parent>/latest`. */
export async function writeReports(result: BenchResult, outDir: string): Promise<ReportFiles> {
  await mkdir(outDir, { recursive: true });
  const files = {
    csvPath: join(outDir, 'results.csv'),
    markdownPath: join(outDir, 'report.md'),
    chartPath: join(outDir, 'chart.svg'),
    jsonPath: join(outDir, 'result.json'),
  };
  await writeFile(files.csvPath, formatCsv(result.rows));
  await writeFile(files.markdownPath, formatMarkdownReport(result));
  await writeFile(files.chartPath, renderChartSvg(result));
  if (result.manyModels) await writeFile(join(outDir, 'many-models.svg'), renderManyModelsSvg(result.manyModels));
  await writeFile(
    files.jsonPath,
    JSON.stringify(
      result,
      (_key, value: unknown) => (typeof value === 'number' && !Number.isFinite(value) ? null : value),
      2,
    ),
  );
  const latestDir = join(dirname(outDir), 'latest');
  if (latestDir !== outDir) {
    await rm(latestDir, { recursive: true, force: true });
    await mkdir(latestDir, { recursive: true });
    for (const path of Object.values(files)) await cp(path, join(latestDir, path.slice(outDir.length + 1)));
  }
  return { outDir, latestDir, ...files };
}
