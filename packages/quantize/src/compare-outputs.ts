import { meanIou } from '@marina/handlers';

/** A model output as compared: its dims and float values, per sample. */
export interface OutputValues {
  dims: readonly number[];
  data: Float32Array;
}

/** What kind of answer an output is, which picks the headline agreement metric. */
export type OutputKind = 'classifier' | 'segmenter' | 'other';

export interface OutputAgreement {
  name: string;
  kind: OutputKind;
  /** Lowest cosine similarity of int8 against fp32 over the samples. */
  minCosine: number;
  meanCosine: number;
  /** Largest |int8 − fp32| over every value of every sample. */
  maxAbsDifference: number;
  /** Classifiers: share of samples whose top-1 class is the same. */
  top1Agreement?: number;
  /** Classifiers: share of samples whose top-5 classes are the same set. */
  top5Agreement?: number;
  /** Segmenter-like outputs: intersection over union of the thresholded (or arg-max) maps, pooled over samples. */
  iou?: number;
}

export interface Agreement {
  /** The headline metric, from the first output: top-1 agreement (classifier), IoU (segmenter) or the lowest cosine. */
  metric: 'top1' | 'iou' | 'cosine';
  value: number;
  samples: number;
  outputs: OutputAgreement[];
}

/**
 * Default `--min-agreement` per headline metric: top-1 0.99 for classifiers, mask IoU 0.95 for
 * segmenters and detectors, lowest cosine 0.99 otherwise (the measurements behind them are in
 * docs/guides/quantisation.md).
 */
export const DEFAULT_MIN_AGREEMENT: Record<Agreement['metric'], number> = { top1: 0.99, iou: 0.95, cosine: 0.99 };

/** Classifier: [N, C] with C ≥ 2 (other dims 1); segmenter: [N, C, H, W] with H, W > 1; else other. */
export function outputKind(dims: readonly number[]): OutputKind {
  if (dims.length === 4 && dims[2]! > 1 && dims[3]! > 1) return 'segmenter';
  const rest = dims.slice(1).filter((d) => d !== 1);
  if (dims.length >= 2 && rest.length === 1 && rest[0]! >= 2) return 'classifier';
  return 'other';
}

export function cosine(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let dot = 0;
  let na = 0;
  let nb = 0;
  for (let i = 0; i < a.length; i++) {
    dot += a[i]! * b[i]!;
    na += a[i]! * a[i]!;
    nb += b[i]! * b[i]!;
  }
  if (na === 0 && nb === 0) return 1;
  if (na === 0 || nb === 0) return 0;
  return dot / Math.sqrt(na * nb);
}

function topIndices(values: Float32Array, start: number, count: number, k: number): number[] {
  const idx = Array.from({ length: count }, (_, i) => i);
  idx.sort((x, y) => values[start + y]! - values[start + x]! || x - y);
  return idx.slice(0, k);
}

/** Per-pixel labels: arg-max over channels, or for one channel the value above 0.5 (probabilities) or 0 (logits). */
function pixelLabels(out: OutputValues, threshold: number): Uint16Array {
  const [n, c, h, w] = out.dims as [number, number, number, number];
  const plane = h * w;
  const labels = new Uint16Array(n * plane);
  for (let s = 0; s < n; s++) {
    for (let p = 0; p < plane; p++) {
      if (c === 1) {
        labels[s * plane + p] = out.data[s * plane + p]! > threshold ? 1 : 0;
        continue;
      }
      let best = 0;
      for (let ch = 1; ch < c; ch++)
        if (out.data[(s * c + ch) * plane + p]! > out.data[(s * c + best) * plane + p]!) best = ch;
      labels[s * plane + p] = best;
    }
  }
  return labels;
}

/** Mean IoU over the labels (foreground only for one channel) present in either map. */
export function labelIou(a: Uint16Array, b: Uint16Array, isBinary: boolean): number {
  return meanIou(a, b, { foregroundOnly: isBinary });
}

/**
 * Compares int8 outputs with fp32 ones, sample by sample (`fp32[s][name]`), on every output.
 * The headline value is the first output's top-1 agreement (classifiers), IoU (segmenters)
 * or lowest cosine (anything else).
 */
export function compareOutputs(
  fp32: ReadonlyArray<Record<string, OutputValues>>,
  int8: ReadonlyArray<Record<string, OutputValues>>,
): Agreement {
  const names = Object.keys(fp32[0] ?? {});
  const outputs = names.map((name): OutputAgreement => {
    const kind = outputKind(fp32[0]![name]!.dims);
    let minCosine = 1;
    let sumCosine = 0;
    let maxAbs = 0;
    let top1 = 0;
    let top5 = 0;
    let rows = 0;
    const fpLabels: Uint16Array[] = [];
    const qLabels: Uint16Array[] = [];
    let isBinary = false;
    for (let s = 0; s < fp32.length; s++) {
      const a = fp32[s]![name]!;
      const b = int8[s]![name]!;
      const c = cosine(a.data, b.data);
      minCosine = Math.min(minCosine, c);
      sumCosine += c;
      for (let i = 0; i < a.data.length; i++) maxAbs = Math.max(maxAbs, Math.abs(a.data[i]! - b.data[i]!));
      if (kind === 'classifier') {
        const n = a.dims[0] ?? 1;
        const classes = a.data.length / n;
        for (let r = 0; r < n; r++) {
          const ta = topIndices(a.data, r * classes, classes, 5);
          const tb = topIndices(b.data, r * classes, classes, 5);
          if (ta[0] === tb[0]) top1++;
          if (ta.every((x) => tb.includes(x))) top5++;
          rows++;
        }
      } else if (kind === 'segmenter') {
        isBinary = a.dims[1] === 1;
        const isProbability = a.data.every((v) => v >= 0 && v <= 1);
        const threshold = isProbability ? 0.5 : 0;
        fpLabels.push(pixelLabels(a, threshold));
        qLabels.push(pixelLabels(b, threshold));
      }
    }
    const result: OutputAgreement = {
      name,
      kind,
      minCosine,
      meanCosine: sumCosine / Math.max(1, fp32.length),
      maxAbsDifference: maxAbs,
    };
    if (kind === 'classifier') {
      result.top1Agreement = top1 / rows;
      result.top5Agreement = top5 / rows;
    }
    if (kind === 'segmenter') {
      const concat = (parts: Uint16Array[]): Uint16Array => {
        const all = new Uint16Array(parts.reduce((n, p) => n + p.length, 0));
        let o = 0;
        for (const p of parts) {
          all.set(p, o);
          o += p.length;
        }
        return all;
      };
      result.iou = labelIou(concat(fpLabels), concat(qLabels), isBinary);
    }
    return result;
  });
  const first = outputs[0];
  const metric: Agreement['metric'] =
    first?.kind === 'classifier' ? 'top1' : first?.kind === 'segmenter' ? 'iou' : 'cosine';
  const value = !first
    ? 1
    : metric === 'top1'
      ? first.top1Agreement!
      : metric === 'iou'
        ? first.iou!
        : Math.min(...outputs.map((o) => o.minCosine));
  return { metric, value, samples: fp32.length, outputs };
}
