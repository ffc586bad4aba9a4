import type { ResultRow } from '../bench-result.ts';

const columns: Array<keyof ResultRow> = [
  'experiment',
  'config',
  'images',
  'concurrency',
  'throughputPerSec',
  'p50Ms',
  'p90Ms',
  'p99Ms',
  'peakCpuPercent',
  'meanCpuPercent',
  'peakRssMb',
  'pssMb',
  'errors',
  'ratioToCeiling',
  'ratioToBestDecentralized',
  'loadShare',
  'note',
];

function cell(value: unknown): string {
  if (typeof value === 'number') return Number.isFinite(value) ? String(Math.round(value * 1000) / 1000) : '';
  const text = String(value ?? '');
  return /[",\n]/.test(text) ? `"${text.replace(/"/g, '""')}"` : text;
}

/** results.csv: one line per row, RFC 4180 quoting, empty cells for unmeasured numbers. */
export function formatCsv(rows: readonly ResultRow[]): string {
  return `${[columns.join(','), ...rows.map((row) => columns.map((c) => cell(row[c])).join(','))].join('\n')}\n`;
}
