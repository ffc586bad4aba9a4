/**
 * The candidate closest to `value` by edit distance (case-insensitive), when it is close enough to
 * be a typo: at most 2 edits, or a sixth of the candidate's length for long names. Undefined when
 * nothing is close or `value` is itself a candidate.
 */
export function closestName(value: string, candidates: Iterable<string>): string | undefined {
  let best: { name: string; distance: number } | undefined;
  const lower = value.toLowerCase();
  for (const candidate of candidates) {
    if (candidate === value) return undefined;
    const distance = editDistance(lower, candidate.toLowerCase());
    if (distance <= Math.max(2, Math.floor(candidate.length / 6)) && (!best || distance < best.distance))
      best = { name: candidate, distance };
  }
  return best?.name;
}

/** `; did you mean 'x'?` for the closest candidate, or '' when none is close. */
export function didYouMean(value: string, candidates: Iterable<string>): string {
  const closest = closestName(value, candidates);
  return closest === undefined ? '' : `; did you mean '${closest}'?`;
}

/** Levenshtein distance: insertions, deletions and substitutions each cost 1. */
export function editDistance(a: string, b: string): number {
  let previous = Array.from({ length: b.length + 1 }, (_, index) => index);
  for (let i = 1; i <= a.length; i++) {
    const current = [i];
    for (let j = 1; j <= b.length; j++) {
      current[j] = Math.min(previous[j]! + 1, current[j - 1]! + 1, previous[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
    }
    previous = current;
  }
  return previous[b.length]!;
}
