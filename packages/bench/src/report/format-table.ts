import type { ResultRow } from '../bench-result.ts';

const n = (value: number, digits = 1): string => {
  if (!Number.isFinite(value)) return '–';
  // Sub-10 ms latencies of small models need the extra digits to be told apart.
  return Math.abs(value) < 10 && digits > 0 ? value.toFixed(digits + 1) : value.toFixed(digits);
};
const ratio = (value: number): string => (Number.isFinite(value) ? `${value.toFixed(2)}×` : '–');

/** Column headers and cells of the results table, shared by the terminal and Markdown forms. */
export const tableHeaders = ['experiment', 'configuration', 'n', 'conc.', 'img/s', 'p50 ms', 'p90 ms', 'p99 ms', 'peak CPU %', 'peak RSS MB', '× ceiling', '× best decentr.'];

export function tableCells(row: ResultRow): string[] {
  return [
    row.experiment, row.config, String(row.images), String(row.concurrency), n(row.throughputPerSec), n(row.p50Ms), n(row.p90Ms), n(row.p99Ms),
    n(row.peakCpuPercent, 0), n(row.peakRssMb, 0), ratio(row.ratioToCeiling), ratio(row.ratioToBestDecentralized),
  ];
}

/** A plain-text table for the terminal, columns padded; numbers right-aligned. */
export function formatTable(rows: readonly ResultRow[]): string {
  const body = rows.map(tableCells);
  const widths = tableHeaders.map((h, i) => Math.max(h.length, ...body.map((cells) => cells[i]!.length)));
  const line = (cells: readonly string[]) => cells.map((c, i) => (i < 2 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join('  ');
  return [line(tableHeaders), widths.map((w) => '-'.repeat(w)).join('  '), ...body.map(line)].join('\n');
}

/** The same table in GitHub Markdown. */
export function formatMarkdownTable(rows: readonly ResultRow[]): string {
  const escape = (c: string) => c.replace(/\|/g, '\\|');
  return [
    `| ${tableHeaders.join(' | ')} |`,
    `|${tableHeaders.map((_, i) => (i < 2 ? '---' : '---:')).join('|')}|`,
    ...rows.map((row) => `| ${tableCells(row).map(escape).join(' | ')} |`),
  ].join('\n');
}
