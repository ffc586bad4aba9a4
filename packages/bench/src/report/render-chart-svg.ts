import type { BenchResult, ResultRow } from '../bench-result.ts';

const colours: Record<string, string> = {
  ceiling: '#2f4b7c',
  decentralized: '#d45087',
  centralized: '#2a9d8f',
  batched: '#e9c46a',
  workers: '#f4a261',
  sweep: '#264653',
  overhead: '#8d99ae',
  memory: '#8d99ae',
};

const formatThroughput = (value: number): string =>
  value >= 100 ? value.toFixed(0) : value >= 10 ? value.toFixed(1) : value.toFixed(2);
const formatPercent = (ratio: number): string =>
  ratio >= 0.01 ? `${Math.round(ratio * 100)}%` : `${(ratio * 100).toPrecision(1)}%`;

const esc = (text: string) => text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');

function niceMax(value: number): number {
  if (!(value > 0)) return 1;
  const magnitude = 10 ** Math.floor(Math.log10(value));
  return [1, 2, 2.5, 5, 10].map((m) => m * magnitude).find((m) => m >= value)!;
}

/** The rows the bar chart shows: every throughput experiment, the ceiling's best batch only, the sweep's best level. */
function barRows(rows: readonly ResultRow[]): ResultRow[] {
  const ceiling = rows
    .filter((r) => r.experiment === 'ceiling')
    .sort((a, b) => b.throughputPerSec - a.throughputPerSec)[0];
  const sweep = rows.filter((r) => r.experiment === 'sweep').sort((a, b) => b.throughputPerSec - a.throughputPerSec)[0];
  // The lone-client batched run checks latency, not throughput; it would read as a slow configuration.
  const middle = rows.filter(
    (r) =>
      ['decentralized', 'centralized', 'batched', 'workers'].includes(r.experiment) &&
      Number.isFinite(r.throughputPerSec) &&
      !(r.experiment === 'batched' && r.concurrency === 1),
  );
  return [...(ceiling ? [ceiling] : []), ...middle, ...(sweep ? [sweep] : [])];
}

/** The bar scale: linear, or log10 when the bars span more than LOG_SCALE_RANGE× (a tiny model's ceiling against HTTP rows). */
const LOG_SCALE_RANGE = 50;
/** The SVG's width in user units; the labels sit above their bars, so the width does not grow with them. */
const CHART_WIDTH = 800;

/**
 * chart.svg: throughput per experiment as horizontal bars, each labelled above its bar, with the
 * ceiling as a dashed line, and below it the concurrency sweep (throughput and p50/p99 latency
 * against clients). Hand-written SVG, no dependencies. 800 units wide with a viewBox, so it scales
 * to its container; text is 14-15 units, readable down to about 500 px. When the bars span more
 * than 50× (the tiny model's ceiling against HTTP), the bar axis is logarithmic and says so.
 */
export function renderChartSvg(result: BenchResult): string {
  const bars = barRows(result.rows);
  const sweep = result.rows.filter((r) => r.experiment === 'sweep').sort((a, b) => a.concurrency - b.concurrency);
  const values = bars.map((r) => r.throughputPerSec).filter((v) => v > 0);
  const isLog = values.length > 1 && Math.max(...values) / Math.min(...values) > LOG_SCALE_RANGE;
  const top1 = isLog ? 112 : 92;
  const barsBottom = top1 + bars.length * BAR_ROW_HEIGHT;
  const panel2Top = barsBottom + 40 + 30;
  const height = panel2Top + (sweep.length > 0 ? SWEEP_HEIGHT + 70 : 0);
  const width = CHART_WIDTH;
  const out: string[] = [];
  out.push(
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" preserveAspectRatio="xMinYMin meet" font-family="system-ui, -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif" font-size="14">`,
  );
  out.push(`<rect width="100%" height="100%" fill="#ffffff"/>`);
  out.push(
    `<text x="20" y="30" font-size="20" font-weight="600">Marina bench: ${esc(result.model)}, ${result.machine.cores} cores, ${esc(result.startedAt.slice(0, 10))}</text>`,
  );
  out.push(
    `<text x="20" y="52" fill="#555">${esc(result.machine.cpuModel)}. Throughput in images/s, higher is better.</text>`,
  );
  out.push(
    `<text x="20" y="72" fill="#555">Dashed line: the ceiling (onnxruntime-node directly, no HTTP, no decoding).</text>`,
  );
  if (isLog) out.push(`<text x="20" y="92" fill="#555">Logarithmic axis: each grid line is 10× the one before.</text>`);
  renderBars({ out, bars, values, isLog, top1, barsBottom });
  const ceiling = bars.find((r) => r.experiment === 'ceiling');
  if (sweep.length > 0) renderSweep({ out, sweep, ceiling, panel2Top, title: result.bestServerConfig ?? '' });
  out.push('</svg>');
  return `${out.join('\n')}\n`;
}

/** The bar panel's left and right margins, and each bar's label and bar heights. */
const BARS_LEFT = 20;
const BARS_RIGHT = 110;
const LABEL_HEIGHT = 18;
const BAR_HEIGHT = 18;
const BAR_ROW_HEIGHT = LABEL_HEIGHT + BAR_HEIGHT + 10;
/** The sweep panel's height without its axis labels and legend. */
const SWEEP_HEIGHT = 330;

/** The bars, their grid and ticks (linear or log10), and the ceiling's dashed line. */
function renderBars(options: {
  out: string[];
  bars: readonly ResultRow[];
  values: readonly number[];
  isLog: boolean;
  top1: number;
  barsBottom: number;
}): void {
  const { out, bars, values, top1, barsBottom } = options;
  const left = BARS_LEFT;
  const plotWidth = CHART_WIDTH - left - BARS_RIGHT;
  let x: (v: number) => number;
  let ticks: number[];
  if (options.isLog) {
    const lo = 10 ** Math.floor(Math.log10(Math.min(...values)));
    const hi = 10 ** Math.ceil(Math.log10(Math.max(...values)));
    x = (v: number) => left + (Math.log10(Math.max(v, lo) / lo) / Math.log10(hi / lo)) * plotWidth;
    ticks = [];
    for (let t = lo; t <= hi * 1.0001; t *= 10) ticks.push(t);
  } else {
    const maxTput = niceMax(Math.max(...values, 0));
    x = (v: number) => left + (v / maxTput) * plotWidth;
    ticks = [0, 1, 2, 3, 4, 5].map((i) => (maxTput / 5) * i);
  }
  for (const v of ticks) {
    out.push(
      `<line x1="${x(v).toFixed(1)}" y1="${top1 - 4}" x2="${x(v).toFixed(1)}" y2="${barsBottom}" stroke="#e5e5e5"/>`,
    );
    out.push(
      `<text x="${x(v).toFixed(1)}" y="${barsBottom + 18}" text-anchor="middle" fill="#666">${Number(v.toPrecision(3))}</text>`,
    );
  }
  bars.forEach((row, i) => {
    const y = top1 + i * BAR_ROW_HEIGHT;
    out.push(`<text x="${left}" y="${y + 13}" font-size="15">${esc(row.experiment)}: ${esc(row.config)}</text>`);
    const barWidth = Math.max(2, x(row.throughputPerSec) - left);
    out.push(
      `<rect x="${left}" y="${y + LABEL_HEIGHT}" width="${barWidth.toFixed(1)}" height="${BAR_HEIGHT}" fill="${colours[row.experiment] ?? '#888'}" rx="2"/>`,
    );
    const ratio =
      Number.isFinite(row.ratioToCeiling) && row.experiment !== 'ceiling'
        ? ` (${formatPercent(row.ratioToCeiling)})`
        : '';
    out.push(
      `<text x="${(left + barWidth + 6).toFixed(1)}" y="${y + LABEL_HEIGHT + 14}" font-size="15" fill="#222">${formatThroughput(row.throughputPerSec)}${ratio}</text>`,
    );
  });
  const ceiling = bars.find((r) => r.experiment === 'ceiling');
  if (ceiling) {
    out.push(
      `<line x1="${x(ceiling.throughputPerSec).toFixed(1)}" y1="${top1 - 6}" x2="${x(ceiling.throughputPerSec).toFixed(1)}" y2="${barsBottom}" stroke="#2f4b7c" stroke-width="2" stroke-dasharray="6 4"/>`,
    );
  }
}

/** The sweep panel's plot area. */
interface SweepPlot {
  left: number;
  right: number;
  top: number;
  bottom: number;
}

/** The concurrency sweep: throughput (left axis) and p50/p99 latency (right axis) against clients. */
function renderSweep(options: {
  out: string[];
  sweep: readonly ResultRow[];
  ceiling: ResultRow | undefined;
  panel2Top: number;
  title: string;
}): void {
  const { out, sweep, ceiling, panel2Top } = options;
  const plot: SweepPlot = {
    left: 90,
    right: CHART_WIDTH - 90,
    top: panel2Top + 70,
    bottom: panel2Top + SWEEP_HEIGHT,
  };
  out.push(
    `<text x="20" y="${panel2Top + 10}" font-size="17" font-weight="600">Concurrency sweep: ${esc(options.title)}</text>`,
  );
  out.push(
    `<text x="20" y="${panel2Top + 30}" fill="#555">Throughput (solid, left axis); latency p50 and p99 (dashed, right axis, ms)</text>`,
  );
  const xs = sweep.map(
    (_, i) => plot.left + (sweep.length === 1 ? 0.5 : i / (sweep.length - 1)) * (plot.right - plot.left),
  );
  const sweepMax = Math.max(...sweep.map((r) => r.throughputPerSec));
  // A ceiling far above the sweep (a tiny model) would flatten it: then it is named, not drawn.
  const isCeilingDrawn = ceiling !== undefined && ceiling.throughputPerSec <= 2 * sweepMax;
  const tMax = niceMax(Math.max(sweepMax, isCeilingDrawn ? ceiling.throughputPerSec : 0));
  const lMax = niceMax(Math.max(...sweep.map((r) => r.p99Ms)));
  const yT = (v: number) => plot.bottom - (v / tMax) * (plot.bottom - plot.top);
  const yL = (v: number) => plot.bottom - (v / lMax) * (plot.bottom - plot.top);
  renderSweepAxes({ out, plot, tMax, lMax });
  if (ceiling && !isCeilingDrawn)
    out.push(
      `<text x="20" y="${panel2Top + 50}" fill="#2f4b7c">The ceiling, ${formatThroughput(ceiling.throughputPerSec)} images/s, is far above this axis.</text>`,
    );
  if (ceiling && isCeilingDrawn)
    out.push(
      `<line x1="${plot.left}" y1="${yT(ceiling.throughputPerSec)}" x2="${plot.right}" y2="${yT(ceiling.throughputPerSec)}" stroke="#2f4b7c" stroke-dasharray="6 4"/><text x="${plot.left + 4}" y="${yT(ceiling.throughputPerSec) - 5}" fill="#2f4b7c">ceiling ${ceiling.throughputPerSec.toFixed(1)}</text>`,
    );
  const path = (ys: number[]) =>
    ys.map((y, i) => `${i === 0 ? 'M' : 'L'}${xs[i]!.toFixed(1)},${y.toFixed(1)}`).join(' ');
  out.push(
    `<path d="${path(sweep.map((r) => yT(r.throughputPerSec)))}" fill="none" stroke="#2a9d8f" stroke-width="3"/>`,
  );
  out.push(
    `<path d="${path(sweep.map((r) => yL(r.p99Ms)))}" fill="none" stroke="#e76f51" stroke-width="2" stroke-dasharray="7 4"/>`,
  );
  out.push(
    `<path d="${path(sweep.map((r) => yL(r.p50Ms)))}" fill="none" stroke="#f4a261" stroke-width="2" stroke-dasharray="2 3"/>`,
  );
  sweep.forEach((r, i) => {
    out.push(
      `<circle cx="${xs[i]}" cy="${yT(r.throughputPerSec)}" r="4" fill="#2a9d8f"/><circle cx="${xs[i]}" cy="${yL(r.p99Ms)}" r="3" fill="#e76f51"/>`,
    );
    out.push(`<text x="${xs[i]}" y="${plot.bottom + 18}" text-anchor="middle" fill="#333">${r.concurrency}</text>`);
  });
  renderSweepLegend(out, plot);
}

/** The sweep's grid, its two axes' ticks and their titles. */
function renderSweepAxes(options: { out: string[]; plot: SweepPlot; tMax: number; lMax: number }): void {
  const { out, plot, tMax, lMax } = options;
  for (let i = 0; i <= 4; i++) {
    const fy = plot.bottom - (i / 4) * (plot.bottom - plot.top);
    out.push(`<line x1="${plot.left}" y1="${fy}" x2="${plot.right}" y2="${fy}" stroke="#eee"/>`);
    out.push(
      `<text x="${plot.left - 8}" y="${fy + 4}" text-anchor="end" fill="#2a9d8f">${Number(((tMax / 4) * i).toPrecision(3))}</text>`,
    );
    out.push(
      `<text x="${plot.right + 8}" y="${fy + 4}" fill="#e76f51">${Number(((lMax / 4) * i).toPrecision(3))}</text>`,
    );
  }
  const middle = (plot.top + plot.bottom) / 2;
  out.push(
    `<text x="${plot.left - 60}" y="${middle}" fill="#2a9d8f" transform="rotate(-90 ${plot.left - 60} ${middle})" text-anchor="middle">images/s</text>`,
  );
  out.push(
    `<text x="${plot.right + 60}" y="${middle}" fill="#e76f51" transform="rotate(90 ${plot.right + 60} ${middle})" text-anchor="middle">latency ms</text>`,
  );
}

/** The x axis' title and the legend of the three lines. */
function renderSweepLegend(out: string[], plot: SweepPlot): void {
  out.push(
    `<text x="${(plot.left + plot.right) / 2}" y="${plot.bottom + 38}" text-anchor="middle" fill="#555">concurrent clients</text>`,
  );
  const legendY = plot.bottom + 58;
  const left = plot.left;
  out.push(
    `<line x1="${left}" y1="${legendY}" x2="${left + 30}" y2="${legendY}" stroke="#2a9d8f" stroke-width="3"/><text x="${left + 36}" y="${legendY + 4}">throughput</text>`,
  );
  out.push(
    `<line x1="${left + 140}" y1="${legendY}" x2="${left + 170}" y2="${legendY}" stroke="#e76f51" stroke-width="2" stroke-dasharray="7 4"/><text x="${left + 176}" y="${legendY + 4}">p99 latency</text>`,
  );
  out.push(
    `<line x1="${left + 290}" y1="${legendY}" x2="${left + 320}" y2="${legendY}" stroke="#f4a261" stroke-width="2" stroke-dasharray="2 3"/><text x="${left + 326}" y="${legendY + 4}">p50 latency</text>`,
  );
}
