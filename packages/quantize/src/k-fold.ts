/** One evaluation fold: sample indices to calibrate on, and those to evaluate (never the same). */
export interface Fold {
  calibration: number[];
  evaluation: number[];
}

/**
 * k-fold splits of `samples` samples: sample i is evaluated in fold i mod k and calibrated on
 * in every other fold, so every sample is evaluated exactly once by a model that was not
 * calibrated on it. k is capped at the number of samples (leave-one-out).
 */
export function createFolds(options: { samples: number; folds: number }): Fold[] {
  const k = Math.max(1, Math.min(options.folds, options.samples));
  const all = Array.from({ length: options.samples }, (_, i) => i);
  return Array.from({ length: k }, (_, f) => ({
    calibration: all.filter((i) => i % k !== f),
    evaluation: all.filter((i) => i % k === f),
  }));
}

/** One fold for a separate evaluation set: the first `calibration` samples calibrate, the next `evaluation` are evaluated. */
export function heldOutFold(options: { calibration: number; evaluation: number }): Fold[] {
  return [
    {
      calibration: Array.from({ length: options.calibration }, (_, i) => i),
      evaluation: Array.from({ length: options.evaluation }, (_, i) => options.calibration + i),
    },
  ];
}
