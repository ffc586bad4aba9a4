export { runBench, defaultServeBin, type BenchOptions, type BenchMode } from './run-bench.ts';
export {
  experimentNames,
  type BenchResult,
  type ResultRow,
  type TargetCheck,
  type ExperimentName,
  type MemoryVariant,
  type ReferenceTimings,
} from './bench-result.ts';
export { benchErrors } from './errors.ts';
export {
  benchModelNames,
  prepareAssets,
  defaultCacheDir,
  type BenchModelName,
  type BenchAssets,
} from './model-assets.ts';
export { runLoad, type LoadOptions, type LoadResult } from './load-generator.ts';
export { startProcessSampler, listProcessTree, type ResourceUsage } from './process-sampler.ts';
export {
  startServer,
  writeServerConfig,
  type StartServerOptions,
  type RunningServer,
  type ServerModelSettings,
} from './server-process.ts';
export { summarizeLatencies, percentile, type LatencySummary } from './stats.ts';
export { formatTable, formatMarkdownTable } from './report/format-table.ts';
export { formatCsv } from './report/format-csv.ts';
export { renderChartSvg } from './report/render-chart-svg.ts';
export { formatMarkdownReport, writeReports, type ReportFiles } from './report/write-reports.ts';
export { createProgram } from './cli.ts';
export type { BenchProgressEvent } from './experiments/experiment-context.ts';
