/**
 * Mean intersection over union of two label maps of the same length (one class per pixel): for
 * each class either map uses, the pixels both give it over the pixels either gives it, averaged.
 * `foregroundOnly` averages over class 1 alone (a binary mask, where 0 is the background). Two
 * maps with no class to compare agree fully (1). Used by the quantiser's agreement and the
 * server's shadow comparison, so a mask's IoU means the same in both.
 */
export function meanIou(
  a: ArrayLike<number>,
  b: ArrayLike<number>,
  options: { foregroundOnly?: boolean } = {},
): number {
  const intersections = new Map<number, number>();
  const unions = new Map<number, number>();
  for (let i = 0; i < a.length; i++) {
    const x = a[i]!;
    const y = b[i]!;
    unions.set(x, (unions.get(x) ?? 0) + 1);
    if (x === y) intersections.set(x, (intersections.get(x) ?? 0) + 1);
    else unions.set(y, (unions.get(y) ?? 0) + 1);
  }
  const classes = [...unions.keys()].filter((c) => !options.foregroundOnly || c === 1);
  if (classes.length === 0) return 1;
  return classes.reduce((sum, c) => sum + (intersections.get(c) ?? 0) / unions.get(c)!, 0) / classes.length;
}
