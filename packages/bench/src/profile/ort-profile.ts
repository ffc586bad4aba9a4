/** One event of onnxruntime's profile (Chrome trace format, `enableProfiling`). */
export interface OrtTraceEvent {
  cat: string;
  name: string;
  /** µs since the session started. */
  ts: number;
  /** µs. */
  dur: number;
  args?: { op_name?: string; provider?: string; input_type_shape?: unknown; output_type_shape?: unknown };
}

/** Time of one node (after onnxruntime's graph optimisations: fused nodes appear as one). */
interface NodeTime {
  /** The node's name in the optimised graph. */
  node: string;
  opType: string;
  provider: string;
  /** Mean time per run, ms. */
  ms: number;
  /** Share of the total node time, 0..1. */
  share: number;
  /** Output shapes, e.g. `[1,64,56,56]`, as onnxruntime recorded them. */
  outputShapes: string;
}

interface OpTypeTime {
  opType: string;
  /** Nodes of this type. */
  nodes: number;
  /** Mean time per run, ms (all nodes of the type). */
  ms: number;
  share: number;
}

export interface OrtProfileSummary {
  /** Runs measured (warm-up runs excluded). */
  runs: number;
  /** Mean wall time of `model_run`, ms. */
  runMs: number;
  /** Mean sum of the node times per run, ms; `runMs - nodeMs` is onnxruntime's own overhead between nodes. */
  nodeMs: number;
  /** Slowest first. */
  byOpType: OpTypeTime[];
  /** Slowest first, every node. */
  byNode: NodeTime[];
}

function shapesOf(value: unknown): string {
  if (!Array.isArray(value)) return '';
  return value
    .map((entry) => {
      const dims = entry && typeof entry === 'object' ? Object.values(entry as Record<string, unknown>)[0] : undefined;
      return Array.isArray(dims) ? `[${dims.join(',')}]` : '?';
    })
    .join(' ');
}

/**
 * Per-node and per-operator-type times from an onnxruntime profile. The first `skipRuns`
 * `model_run`s (warm-up: first-run allocations and caches) are left out; a node event counts for
 * the run whose time span contains it. Pure: no I/O.
 */
export function summarizeOrtProfile(
  events: readonly OrtTraceEvent[],
  options: { skipRuns?: number } = {},
): OrtProfileSummary {
  const runs = events
    .filter((e) => e.cat === 'Session' && e.name === 'model_run')
    .sort((a, b) => a.ts - b.ts)
    .slice(options.skipRuns ?? 0);
  const inMeasuredRun = (e: OrtTraceEvent) => runs.some((r) => e.ts >= r.ts && e.ts <= r.ts + r.dur);
  const nodes = new Map<string, { opType: string; provider: string; totalUs: number; outputShapes: string }>();
  for (const e of events) {
    if (e.cat !== 'Node' || !e.name.endsWith('_kernel_time') || !inMeasuredRun(e)) continue;
    const node = e.name.slice(0, -'_kernel_time'.length);
    const entry = nodes.get(node) ?? {
      opType: e.args?.op_name ?? '?',
      provider: (e.args?.provider ?? '').replace(/ExecutionProvider$/, ''),
      totalUs: 0,
      outputShapes: shapesOf(e.args?.output_type_shape),
    };
    entry.totalUs += e.dur;
    nodes.set(node, entry);
  }
  const n = Math.max(1, runs.length);
  const totalUs = [...nodes.values()].reduce((sum, v) => sum + v.totalUs, 0);
  const share = (us: number) => (totalUs > 0 ? us / totalUs : 0);
  const byNode: NodeTime[] = [...nodes.entries()]
    .map(([node, v]) => ({
      node,
      opType: v.opType,
      provider: v.provider,
      ms: v.totalUs / n / 1000,
      share: share(v.totalUs),
      outputShapes: v.outputShapes,
    }))
    .sort((a, b) => b.ms - a.ms);
  const types = new Map<string, { nodes: number; totalUs: number }>();
  for (const v of nodes.values()) {
    const t = types.get(v.opType) ?? { nodes: 0, totalUs: 0 };
    t.nodes += 1;
    t.totalUs += v.totalUs;
    types.set(v.opType, t);
  }
  const byOpType: OpTypeTime[] = [...types.entries()]
    .map(([opType, t]) => ({ opType, nodes: t.nodes, ms: t.totalUs / n / 1000, share: share(t.totalUs) }))
    .sort((a, b) => b.ms - a.ms);
  return {
    runs: runs.length,
    runMs: runs.length > 0 ? runs.reduce((sum, r) => sum + r.dur, 0) / runs.length / 1000 : Number.NaN,
    nodeMs: totalUs / n / 1000,
    byOpType,
    byNode,
  };
}
