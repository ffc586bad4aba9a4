import type { ResultRow } from '../bench-result.ts';

const n = (value: number, digits = 1): string => {
  if (!Number.isFinite(value)) return '–';
  // Sub-10 ms latencies of small models need the extra digits to be told apart.
  return Math.abs(value) < 10 && digits > 0 ? value.toFixed(digits + 1) : value.toFixed(digits);
};
const ratio = (value: number): string => (Number.isFinite(value) ? `${value.toFixed(2)}×` : '–');

/** Column headers and cells of the results table, shared by the terminal and Markdown forms. */
const tableHeaders = [
  'experiment',
  'configuration',
  'n',
  'conc.',
  'img/s',
  'p50 ms',
  'p90 ms',
  'p99 ms',
  'peak CPU %',
  'peak RSS MB',
  '× ceiling',
  '× best decentr.',
];

function tableCells(row: ResultRow): string[] {
  return [
    row.experiment,
    row.config,
    String(row.images),
    String(row.concurrency),
    n(row.throughputPerSec),
    n(row.p50Ms),
    n(row.p90Ms),
    n(row.p99Ms),
    n(row.peakCpuPercent, 0),
    n(row.peakRssMb, 0),
    ratio(row.ratioToCeiling),
    ratio(row.ratioToBestDecentralized),
  ];
}

/** Columns of the terminal table: the Markdown table's, less the two ratio columns (report.md keeps them). */
const terminalHeaders = [
  'experiment',
  'configuration',
  'n',
  'clients',
  'img/s',
  'p50 ms',
  'p90 ms',
  'p99 ms',
  'CPU %',
  'RSS MB',
];
const terminalCells = (row: ResultRow): string[] => tableCells(row).slice(0, 10);

/** Greedy word wrap of `text` into lines of at most `width` characters (a longer word is cut). */
function wrap(text: string, width: number): string[] {
  const lines: string[] = [];
  let line = '';
  for (const word of text.split(' ')) {
    let rest = word;
    while (rest.length > width) {
      if (line) lines.push(line);
      lines.push(rest.slice(0, width));
      line = '';
      rest = rest.slice(width);
    }
    if (!line) line = rest;
    else if (line.length + 1 + rest.length <= width) line += ` ${rest}`;
    else {
      lines.push(line);
      line = rest;
    }
  }
  lines.push(line);
  return lines;
}

/**
 * A plain-text table for the terminal, at most `maxWidth` columns wide (default 100): numbers
 * right-aligned, the configuration column wrapped onto continuation lines to fit. The ratios to
 * the ceiling and to the best decentralized run are in report.md and results.csv.
 */
export function formatTable(rows: readonly ResultRow[], options: { maxWidth?: number } = {}): string {
  const maxWidth = options.maxWidth ?? 100;
  const body = rows.map(terminalCells);
  const widths = terminalHeaders.map((h, i) => Math.max(h.length, ...body.map((cells) => cells[i]!.length)));
  const others = widths.reduce((sum, w, i) => (i === 1 ? sum : sum + w), 0) + 2 * (widths.length - 1);
  widths[1] = Math.max(terminalHeaders[1]!.length, Math.min(widths[1]!, maxWidth - others));
  const line = (cells: readonly string[]) =>
    cells
      .map((c, i) => (i < 2 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!)))
      .join('  ')
      .trimEnd();
  const lines = [line(terminalHeaders), widths.map((w) => '-'.repeat(w)).join('  ')];
  for (const cells of body) {
    const [first, ...more] = wrap(cells[1]!, widths[1]!);
    lines.push(line([cells[0]!, first!, ...cells.slice(2)]));
    for (const continuation of more) lines.push(line(['', continuation, ...cells.slice(2).map(() => '')]));
  }
  return lines.join('\n');
}

/** The same table in GitHub Markdown. */
export function formatMarkdownTable(rows: readonly ResultRow[]): string {
  const escapeCell = (c: string) => c.replace(/\|/g, '\\|');
  return [
    `| ${tableHeaders.join(' | ')} |`,
    `|${tableHeaders.map((_, i) => (i < 2 ? '---' : '---:')).join('|')}|`,
    ...rows.map((row) => `| ${tableCells(row).map(escapeCell).join(' | ')} |`),
  ].join('\n');
}
