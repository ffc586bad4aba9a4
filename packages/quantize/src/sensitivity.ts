/** A measured agreement with fp32: the headline metric, and a finer one (mean cosine) to break its ties. Higher is better. */
export interface Measurement {
  value: number;
  tieBreak: number;
}

/** One group of nodes that are quantised or kept fp32 together (a node and the Relu/Clip folded into it). */
export interface RankedGroup {
  nodes: string[];
  /**
   * What reverting this group to fp32 reverts (default `nodes`): the QDQ form puts one Q/DQ pair on a
   * tensor while any node beside it is int8, so the caller may add the neighbours that share its tensors.
   */
  revert?: string[];
  /** Agreement with only this group in int8 (everything else fp32). */
  aloneInt8: Measurement;
}

/** One step of the fall-back search: a group tried in fp32, what that measured, and whether it was kept. */
export interface SearchStep {
  nodes: string[];
  /** Agreement measured on the search samples with this group added to the fp32 set. */
  value: number;
  isKept: boolean;
  /** The out-of-sample agreement (k-fold or --eval), measured when `value` first reached the target. */
  verifiedValue?: number;
}

export interface SearchResult {
  kept: string[][];
  steps: SearchStep[];
  measurement: Measurement;
  /** Whether a verified (out-of-sample) measurement met the target. */
  isTargetMet: boolean;
}

function isBetter(a: Measurement, b: Measurement): boolean {
  return a.value > b.value || (a.value === b.value && a.tieBreak > b.tieBreak);
}

/**
 * Ranks groups by measurement: each is put alone in int8 (the rest of the model fp32) and
 * the headline metric is measured; the groups that lose most agreement come first.
 */
export async function rankBySensitivity(options: {
  groups: ReadonlyArray<{ nodes: readonly string[]; revert?: readonly string[] }>;
  measureAloneInt8: (group: readonly string[]) => Promise<Measurement>;
  onProgress?: (done: number, total: number) => void;
}): Promise<RankedGroup[]> {
  const ranked: RankedGroup[] = [];
  for (const group of options.groups) {
    ranked.push({
      nodes: [...group.nodes],
      ...(group.revert ? { revert: [...group.revert] } : {}),
      aloneInt8: await options.measureAloneInt8(group.nodes),
    });
    options.onProgress?.(ranked.length, options.groups.length);
  }
  // Stable: equal measurements keep graph order.
  return ranked.sort((a, b) => a.aloneInt8.value - b.aloneInt8.value || a.aloneInt8.tieBreak - b.aloneInt8.tieBreak);
}

/** Steps that try one group each before blocks start to double (2, 4, 8 … groups a step). */
const SINGLE_GROUP_STEPS = 8;

/**
 * Greedy search for a small fp32 set: the ranked groups are tried in order, and a try stays in
 * the fp32 set only when the measurement with it is better than without (so every kept step
 * raises agreement). The first SINGLE_GROUP_STEPS tries take one group each; later ones take
 * blocks of 2, 4, 8 … of the next groups, so a model whose error is spread over many small
 * contributors is still searched in a few dozen measurements. When the search samples'
 * agreement reaches `target`, the set is verified out of sample (`verify`); the search stops
 * at the first verified set that meets it, or once `maxKept` groups are kept or `maxSteps`
 * tries made.
 */
export async function searchFp32Set(options: {
  ranked: readonly RankedGroup[];
  start: Measurement;
  target: number;
  measure: (kept: readonly string[][]) => Promise<Measurement>;
  verify: (kept: readonly string[][]) => Promise<number>;
  maxKept: number;
  maxSteps: number;
  onStep?: (step: SearchStep) => void;
}): Promise<SearchResult> {
  const kept: string[][] = [];
  const steps: SearchStep[] = [];
  let current = options.start;
  let next = 0;
  while (next < options.ranked.length && steps.length < options.maxSteps) {
    const size = steps.length < SINGLE_GROUP_STEPS ? 1 : 2 ** (steps.length - SINGLE_GROUP_STEPS + 1);
    const block = options.ranked
      .slice(next, next + Math.min(size, options.maxKept - kept.length))
      .map((g) => g.revert ?? g.nodes);
    if (block.length === 0) break;
    next += block.length;
    const measurement = await options.measure([...kept, ...block]);
    const step: SearchStep = { nodes: block.flat(), value: measurement.value, isKept: isBetter(measurement, current) };
    steps.push(step);
    if (step.isKept) {
      kept.push(...block);
      current = measurement;
      if (current.value >= options.target) step.verifiedValue = await options.verify(kept);
    }
    options.onStep?.(step);
    if (step.verifiedValue !== undefined && step.verifiedValue >= options.target)
      return { kept, steps, measurement: current, isTargetMet: true };
  }
  return { kept, steps, measurement: current, isTargetMet: false };
}
