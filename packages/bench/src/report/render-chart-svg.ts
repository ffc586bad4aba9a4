import type { BenchResult, ResultRow } from '../bench-result.ts';

const colours: Record<string, string> = {
  ceiling: '#2f4b7c', decentralized: '#d45087', centralized: '#2a9d8f', batched: '#e9c46a', workers: '#f4a261', sweep: '#264653', overhead: '#8d99ae', memory: '#8d99ae',
};

const esc = (text: string) => text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');

function niceMax(value: number): number {
  if (!(value > 0)) return 1;
  const magnitude = 10 ** Math.floor(Math.log10(value));
  return [1, 2, 2.5, 5, 10].map((m) => m * magnitude).find((m) => m >= value)!;
}

/** The rows the bar chart shows: every throughput experiment, the ceiling's best batch only, the sweep's best level. */
function barRows(rows: readonly ResultRow[]): ResultRow[] {
  const ceiling = rows.filter((r) => r.experiment === 'ceiling').sort((a, b) => b.throughputPerSec - a.throughputPerSec)[0];
  const sweep = rows.filter((r) => r.experiment === 'sweep').sort((a, b) => b.throughputPerSec - a.throughputPerSec)[0];
  // The lone-client batched run checks latency, not throughput; it would read as a slow configuration.
  const middle = rows.filter((r) => ['decentralized', 'centralized', 'batched', 'workers'].includes(r.experiment) && Number.isFinite(r.throughputPerSec) && !(r.experiment === 'batched' && r.concurrency === 1));
  return [...(ceiling ? [ceiling] : []), ...middle, ...(sweep ? [sweep] : [])];
}

/**
 * chart.svg: throughput per experiment as horizontal bars with the ceiling as a dashed line,
 * and below it the concurrency sweep (throughput and p50/p99 latency against clients).
 * Hand-written SVG, no dependencies; readable at 960 px wide.
 */
export function renderChartSvg(result: BenchResult): string {
  const bars = barRows(result.rows);
  // Room for the longest bar label (about 7 px a character at 13 px), so none is clipped.
  const longestLabel = Math.max(0, ...bars.map((r) => `${r.experiment}: ${r.config}`.length));
  const left = Math.max(330, 30 + Math.ceil(longestLabel * 7));
  const right = 90;
  const width = left + 540 + right;
  const sweep = result.rows.filter((r) => r.experiment === 'sweep').sort((a, b) => a.concurrency - b.concurrency);
  const barHeight = 22;
  const barGap = 8;
  const top1 = 70;
  const panel1Height = top1 + bars.length * (barHeight + barGap) + 40;
  const panel2Top = panel1Height + 30;
  const panel2Height = sweep.length > 0 ? 300 : 0;
  const height = panel2Top + panel2Height + (sweep.length > 0 ? 70 : 0);
  const out: string[] = [];
  out.push(`<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="system-ui, -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif" font-size="13">`);
  out.push(`<rect width="100%" height="100%" fill="#ffffff"/>`);
  out.push(`<text x="20" y="28" font-size="18" font-weight="600">Marina bench: ${esc(result.model)}, ${result.machine.cores} cores (${esc(result.machine.cpuModel)})</text>`);
  out.push(`<text x="20" y="50" fill="#555">Throughput, images/s (higher is better). Dashed line: the ceiling (onnxruntime-node directly, no HTTP, no decoding). ${esc(result.startedAt.slice(0, 10))}</text>`);

  const maxTput = niceMax(Math.max(...bars.map((r) => r.throughputPerSec), 0));
  const plotWidth = width - left - right;
  const x = (v: number) => left + (v / maxTput) * plotWidth;
  for (let i = 0; i <= 5; i++) {
    const v = (maxTput / 5) * i;
    out.push(`<line x1="${x(v)}" y1="${top1 - 6}" x2="${x(v)}" y2="${top1 + bars.length * (barHeight + barGap)}" stroke="#eee"/>`);
    out.push(`<text x="${x(v)}" y="${top1 + bars.length * (barHeight + barGap) + 16}" text-anchor="middle" fill="#777">${Number(v.toPrecision(3))}</text>`);
  }
  bars.forEach((row, i) => {
    const y = top1 + i * (barHeight + barGap);
    out.push(`<text x="${left - 10}" y="${y + barHeight / 2 + 4}" text-anchor="end">${esc(row.experiment)}: ${esc(row.config)}</text>`);
    out.push(`<rect x="${left}" y="${y}" width="${Math.max(1, x(row.throughputPerSec) - left)}" height="${barHeight}" fill="${colours[row.experiment] ?? '#888'}" rx="2"/>`);
    const ratio = Number.isFinite(row.ratioToCeiling) && row.experiment !== 'ceiling' ? ` (${Math.round(row.ratioToCeiling * 100)}%)` : '';
    out.push(`<text x="${x(row.throughputPerSec) + 6}" y="${y + barHeight / 2 + 4}" fill="#222">${row.throughputPerSec.toFixed(1)}${ratio}</text>`);
  });
  const ceiling = bars.find((r) => r.experiment === 'ceiling');
  if (ceiling) {
    out.push(`<line x1="${x(ceiling.throughputPerSec)}" y1="${top1 - 10}" x2="${x(ceiling.throughputPerSec)}" y2="${top1 + bars.length * (barHeight + barGap)}" stroke="#2f4b7c" stroke-width="2" stroke-dasharray="6 4"/>`);
  }

  if (sweep.length > 0) {
    const plotLeft = 90;
    const plotRight = width - 90;
    const plotTop = panel2Top + 40;
    const plotBottom = panel2Top + panel2Height;
    out.push(`<text x="20" y="${panel2Top + 10}" font-size="16" font-weight="600">Concurrency sweep: ${esc(result.bestServerConfig ?? '')}</text>`);
    out.push(`<text x="20" y="${panel2Top + 28}" fill="#555">Throughput (solid, left axis) and latency p50 / p99 (dashed, right axis, ms) against concurrent clients</text>`);
    const xs = sweep.map((_, i) => plotLeft + (sweep.length === 1 ? 0.5 : i / (sweep.length - 1)) * (plotRight - plotLeft));
    const tMax = niceMax(Math.max(...sweep.map((r) => r.throughputPerSec), ceiling?.throughputPerSec ?? 0));
    const lMax = niceMax(Math.max(...sweep.map((r) => r.p99Ms)));
    const yT = (v: number) => plotBottom - (v / tMax) * (plotBottom - plotTop);
    const yL = (v: number) => plotBottom - (v / lMax) * (plotBottom - plotTop);
    for (let i = 0; i <= 4; i++) {
      const fy = plotBottom - (i / 4) * (plotBottom - plotTop);
      out.push(`<line x1="${plotLeft}" y1="${fy}" x2="${plotRight}" y2="${fy}" stroke="#eee"/>`);
      out.push(`<text x="${plotLeft - 8}" y="${fy + 4}" text-anchor="end" fill="#2a9d8f">${Number(((tMax / 4) * i).toPrecision(3))}</text>`);
      out.push(`<text x="${plotRight + 8}" y="${fy + 4}" fill="#e76f51">${Number(((lMax / 4) * i).toPrecision(3))}</text>`);
    }
    out.push(`<text x="${plotLeft - 60}" y="${(plotTop + plotBottom) / 2}" fill="#2a9d8f" transform="rotate(-90 ${plotLeft - 60} ${(plotTop + plotBottom) / 2})" text-anchor="middle">images/s</text>`);
    out.push(`<text x="${plotRight + 60}" y="${(plotTop + plotBottom) / 2}" fill="#e76f51" transform="rotate(90 ${plotRight + 60} ${(plotTop + plotBottom) / 2})" text-anchor="middle">latency ms</text>`);
    if (ceiling) out.push(`<line x1="${plotLeft}" y1="${yT(ceiling.throughputPerSec)}" x2="${plotRight}" y2="${yT(ceiling.throughputPerSec)}" stroke="#2f4b7c" stroke-dasharray="6 4"/><text x="${plotLeft + 4}" y="${yT(ceiling.throughputPerSec) - 5}" fill="#2f4b7c">ceiling ${ceiling.throughputPerSec.toFixed(1)}</text>`);
    const path = (ys: number[]) => ys.map((y, i) => `${i === 0 ? 'M' : 'L'}${xs[i]!.toFixed(1)},${y.toFixed(1)}`).join(' ');
    out.push(`<path d="${path(sweep.map((r) => yT(r.throughputPerSec)))}" fill="none" stroke="#2a9d8f" stroke-width="3"/>`);
    out.push(`<path d="${path(sweep.map((r) => yL(r.p99Ms)))}" fill="none" stroke="#e76f51" stroke-width="2" stroke-dasharray="7 4"/>`);
    out.push(`<path d="${path(sweep.map((r) => yL(r.p50Ms)))}" fill="none" stroke="#f4a261" stroke-width="2" stroke-dasharray="2 3"/>`);
    sweep.forEach((r, i) => {
      out.push(`<circle cx="${xs[i]}" cy="${yT(r.throughputPerSec)}" r="4" fill="#2a9d8f"/><circle cx="${xs[i]}" cy="${yL(r.p99Ms)}" r="3" fill="#e76f51"/>`);
      out.push(`<text x="${xs[i]}" y="${plotBottom + 18}" text-anchor="middle" fill="#333">${r.concurrency}</text>`);
    });
    out.push(`<text x="${(plotLeft + plotRight) / 2}" y="${plotBottom + 38}" text-anchor="middle" fill="#555">concurrent clients</text>`);
    const legendY = plotBottom + 58;
    out.push(`<line x1="${plotLeft}" y1="${legendY}" x2="${plotLeft + 30}" y2="${legendY}" stroke="#2a9d8f" stroke-width="3"/><text x="${plotLeft + 36}" y="${legendY + 4}">throughput</text>`);
    out.push(`<line x1="${plotLeft + 140}" y1="${legendY}" x2="${plotLeft + 170}" y2="${legendY}" stroke="#e76f51" stroke-width="2" stroke-dasharray="7 4"/><text x="${plotLeft + 176}" y="${legendY + 4}">p99 latency</text>`);
    out.push(`<line x1="${plotLeft + 290}" y1="${legendY}" x2="${plotLeft + 320}" y2="${legendY}" stroke="#f4a261" stroke-width="2" stroke-dasharray="2 3"/><text x="${plotLeft + 326}" y="${legendY + 4}">p50 latency</text>`);
  }
  out.push('</svg>');
  return out.join('\n') + '\n';
}
