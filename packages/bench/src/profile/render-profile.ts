import type { ProfileResult } from './profile-model.ts';

const palette = [
  '#2f4b7c',
  '#d45087',
  '#2a9d8f',
  '#e9c46a',
  '#f4a261',
  '#264653',
  '#a05195',
  '#8d99ae',
  '#e76f51',
  '#665191',
];

const esc = (text: string) => text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');

const pct = (share: number) => `${(share * 100).toFixed(1)}%`;

function fmtMs(ms: number): string {
  if (!Number.isFinite(ms)) return 'n/a';
  if (ms >= 100) return ms.toFixed(0);
  if (ms >= 1) return ms.toFixed(2);
  return ms.toFixed(3);
}

function truncate(text: string, max: number): string {
  return text.length <= max ? text : `${text.slice(0, max - 1)}…`;
}

/**
 * The profile as text: a header, operator types and the top-N nodes, each with ms per run and
 * its share of the total node time.
 */
export function formatProfile(result: ProfileResult, options: { top?: number } = {}): string {
  const top = options.top ?? 10;
  const lines: string[] = [];
  lines.push(
    `${result.modelName} (${result.source}), batch ${result.batchSize}, ${result.intraOpNumThreads} intra-op thread(s), graph optimisation 'all'`,
  );
  lines.push(
    `inputs: ${result.inputs.map((i) => `${i.name} ${i.type}[${i.shape.join(',')}]`).join(', ')}, ${result.inputsFrom}`,
  );
  lines.push(
    `${result.machine.cpuModel}, ${result.machine.cores} cores, load average ${result.loadAverage}; ${result.runs} profiled runs`,
  );
  lines.push(
    `run: ${fmtMs(result.runMs)} ms per run (wall), of which nodes ${fmtMs(result.nodeMs)} ms; ${result.byNode.length} nodes after optimisation`,
  );
  lines.push('');
  const table = (header: string[], rows: string[][]) => {
    const widths = header.map((h, c) => Math.max(h.length, ...rows.map((r) => r[c]!.length)));
    const line = (cells: string[]) =>
      cells.map((cell, c) => (c === 0 ? cell.padEnd(widths[c]!) : cell.padStart(widths[c]!))).join('  ');
    lines.push(line(header), widths.map((w) => '-'.repeat(w)).join('  '), ...rows.map(line));
  };
  table(
    ['operator type', 'nodes', 'ms/run', 'share'],
    result.byOpType.map((t) => [t.opType, String(t.nodes), fmtMs(t.ms), pct(t.share)]),
  );
  lines.push('');
  lines.push(`top ${Math.min(top, result.byNode.length)} nodes (bottlenecks):`);
  table(
    ['node', 'op', 'output', 'ms/run', 'share'],
    result.byNode
      .slice(0, top)
      .map((n) => [truncate(n.node, 48), n.opType, truncate(n.outputShapes, 22), fmtMs(n.ms), pct(n.share)]),
  );
  return lines.join('\n');
}

/**
 * chart.svg of a profile: operator types by share of the node time, then the top-N nodes, each bar
 * coloured by its operator type. Hand-written SVG like the bench's chart; readable at 1000 px wide.
 */
export function renderProfileSvg(result: ProfileResult, options: { top?: number } = {}): string {
  const top = options.top ?? 15;
  const types = result.byOpType;
  const nodes = result.byNode.slice(0, top);
  const colourOf = new Map(types.map((t, i) => [t.opType, palette[i % palette.length]!]));
  const nodeLabel = (n: (typeof nodes)[number]) =>
    `${truncate(n.node, 40)} (${n.opType}) ${truncate(n.outputShapes, 20)}`;
  const longest = Math.max(
    14,
    ...types.map((t) => `${t.opType} ×${t.nodes}`.length),
    ...nodes.map((n) => nodeLabel(n).length),
  );
  const left = Math.min(460, 30 + Math.ceil(longest * 7));
  const plotWidth = 520;
  const right = 150;
  const width = left + plotWidth + right;
  const barHeight = 20;
  const gap = 6;
  const header = 96;
  const panel1Top = header + 30;
  const panel1Height = types.length * (barHeight + gap);
  const panel2Top = panel1Top + panel1Height + 60;
  const panel2Height = nodes.length * (barHeight + gap);
  const height = panel2Top + panel2Height + 50;
  const out: string[] = [];
  out.push(
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="system-ui, -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif" font-size="13">`,
  );
  out.push(`<rect width="100%" height="100%" fill="#ffffff"/>`);
  out.push(
    `<text x="20" y="28" font-size="18" font-weight="600">Where the time goes: ${esc(result.modelName)}, batch ${result.batchSize}, ${result.intraOpNumThreads} thread(s)</text>`,
  );
  out.push(
    `<text x="20" y="50" fill="#555">${esc(`${fmtMs(result.runMs)} ms per run (nodes ${fmtMs(result.nodeMs)} ms), mean of ${result.runs} runs; ${result.byNode.length} nodes after onnxruntime's 'all' optimisations`)}</text>`,
  );
  out.push(`<text x="20" y="70" fill="#555">${esc(truncate(`inputs: ${result.inputsFrom}`, 150))}</text>`);
  out.push(
    `<text x="20" y="88" fill="#555">${esc(`${result.machine.cpuModel}, ${result.machine.cores} cores, load average ${result.loadAverage}, ${result.startedAt.slice(0, 10)}`)}</text>`,
  );

  const bars = (
    title: string,
    top0: number,
    rows: Array<{ label: string; share: number; ms: number; colour: string }>,
  ) => {
    out.push(`<text x="20" y="${top0 - 12}" font-size="15" font-weight="600">${esc(title)}</text>`);
    const maxShare = Math.max(0.0001, ...rows.map((r) => r.share));
    const x = (share: number) => left + (share / maxShare) * plotWidth;
    rows.forEach((row, i) => {
      const y = top0 + i * (barHeight + gap);
      out.push(`<text x="${left - 8}" y="${y + barHeight / 2 + 4}" text-anchor="end">${esc(row.label)}</text>`);
      out.push(
        `<rect x="${left}" y="${y}" width="${Math.max(1, x(row.share) - left).toFixed(1)}" height="${barHeight}" fill="${row.colour}" rx="2"/>`,
      );
      out.push(
        `<text x="${(x(row.share) + 6).toFixed(1)}" y="${y + barHeight / 2 + 4}" fill="#222">${pct(row.share)} · ${fmtMs(row.ms)} ms</text>`,
      );
    });
  };
  bars(
    'Operator types, share of node time',
    panel1Top,
    types.map((t) => ({ label: `${t.opType} ×${t.nodes}`, share: t.share, ms: t.ms, colour: colourOf.get(t.opType)! })),
  );
  bars(
    `Top ${nodes.length} nodes (the bottlenecks), coloured by operator type`,
    panel2Top,
    nodes.map((n) => ({ label: nodeLabel(n), share: n.share, ms: n.ms, colour: colourOf.get(n.opType) ?? '#888' })),
  );
  out.push(
    `<text x="20" y="${height - 16}" fill="#777">ms = mean time per run; share = part of the summed node time. Made by marina-bench profile.</text>`,
  );
  out.push('</svg>');
  return `${out.join('\n')}\n`;
}
