/**
 * The durations of one `Server-Timing` header (`name;dur=1.23;desc="…", …`), ms by entry name;
 * entries without a `dur` are left out.
 */
export function serverTimingDurations(value: string): Record<string, number> {
  const durations: Record<string, number> = {};
  for (const entry of value.split(',')) {
    const match = /^\s*([\w-]+)\s*;(?:.*;)?\s*dur=([\d.]+)/.exec(entry);
    if (match) durations[match[1]!] = Number(match[2]);
  }
  return durations;
}
