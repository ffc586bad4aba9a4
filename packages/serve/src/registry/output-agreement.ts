/**
 * How far a shadow version's answer agrees with the live one, for the same request: top-1 for
 * classifiers, IoU for segmentation masks, cosine similarity for tensors (with the largest
 * absolute difference beside it). Pure functions over the workers' answers (JobResult), so the
 * comparison reads the same bytes a client would have read.
 */
import {
  INFERENCE_HEADER_CONTENT_LENGTH,
  isV2Datatype,
  meanIou,
  rawToJson,
  splitBinaryBody,
  type V2Datatype,
} from '@marina/handlers';
import type { JobResult } from '../scheduling/job.ts';

/** How two answers are compared; chosen from the live version's handler. */
export type AgreementMethod = 'top1' | 'iou' | 'cosine';

/** One comparison: `agreement` in [0, 1]; `maxAbsDiff` for tensors. */
export interface Agreement {
  agreement: number;
  maxAbsDiff?: number;
}

/** The comparison for a handler's answers, or undefined where Marina cannot compare them (custom handlers, detections). */
export function agreementMethodOf(handler: string): AgreementMethod | undefined {
  if (handler === 'image_classifier') return 'top1';
  if (handler === 'image_segmenter') return 'iou';
  if (handler === 'tensor' || handler === 'base_handler') return 'cosine';
  return undefined;
}

type Answer =
  | { kind: 'tensors'; tensors: Map<string, number[]> }
  | { kind: 'scores'; scores: Map<string, number> }
  | { kind: 'mask'; classes: number[] }
  | { kind: 'other' };

function flatNumbers(value: unknown, out: number[] = []): number[] | undefined {
  if (typeof value === 'number') {
    out.push(value);
    return out;
  }
  if (typeof value === 'boolean') {
    out.push(value ? 1 : 0);
    return out;
  }
  if (!Array.isArray(value)) return undefined;
  for (const item of value) if (flatNumbers(item, out) === undefined) return undefined;
  return out;
}

/** A segmenter's rows: `[[class, ...]]`, or `[[[class, probability], ...]]`: the classes only. */
function maskClasses(value: unknown): number[] | undefined {
  if (!Array.isArray(value)) return undefined;
  const classes: number[] = [];
  for (const row of value) {
    if (!Array.isArray(row)) return undefined;
    for (const pixel of row) {
      const c = Array.isArray(pixel) ? pixel[0] : pixel;
      if (typeof c !== 'number') return undefined;
      classes.push(c);
    }
  }
  return classes;
}

function readJson(value: unknown, method: AgreementMethod): Answer {
  if (method === 'iou') {
    const classes = maskClasses(value);
    return classes ? { kind: 'mask', classes } : { kind: 'other' };
  }
  if (value !== null && typeof value === 'object' && !Array.isArray(value)) {
    const record = value as Record<string, unknown>;
    const outputs = record.outputs;
    const tensors = new Map<string, number[]>();
    // The v2 JSON answer (a list of {name, data}) or the TorchServe tensor answer ({name: {shape, data}}).
    const entries: Array<[string, unknown]> = Array.isArray(outputs)
      ? outputs.map((o, i) => [String((o as { name?: unknown })?.name ?? i), (o as { data?: unknown })?.data])
      : outputs !== null && typeof outputs === 'object'
        ? Object.entries(outputs as Record<string, unknown>).map(([k, v]) => [k, (v as { data?: unknown })?.data])
        : [];
    for (const [name, data] of entries) {
      const values = flatNumbers(data);
      if (values) tensors.set(name, values);
    }
    if (tensors.size > 0) return { kind: 'tensors', tensors };
    // A classifier's top-k: {label: score}.
    const scores = new Map<string, number>();
    for (const [k, v] of Object.entries(record)) if (typeof v === 'number') scores.set(k, v);
    if (scores.size > 0 && scores.size === Object.keys(record).length) return { kind: 'scores', scores };
    return { kind: 'other' };
  }
  const values = flatNumbers(value);
  return values ? { kind: 'tensors', tensors: new Map([['output', values]]) } : { kind: 'other' };
}

/** Reads a worker's answer: the v2 binary layout, or JSON; anything else is 'other'. */
function readAnswer(result: JobResult, method: AgreementMethod): Answer {
  if (result.statusCode >= 300) return { kind: 'other' };
  const headerLength = result.headers[INFERENCE_HEADER_CONTENT_LENGTH];
  try {
    if (headerLength !== undefined) {
      const { header, binaries } = splitBinaryBody(result.body, Number(headerLength), 'outputs');
      const list = Array.isArray(header.outputs)
        ? (header.outputs as Array<{ name: string; datatype: unknown; data?: unknown }>)
        : [];
      const tensors = new Map<string, number[]>();
      list.forEach((o, i) => {
        const raw = binaries.get(i);
        const values =
          raw && isV2Datatype(o.datatype) && o.datatype !== 'BYTES'
            ? flatNumbers(rawToJson(o.datatype as V2Datatype, raw))
            : flatNumbers(o.data);
        if (values) tensors.set(o.name, values);
      });
      return tensors.size > 0 ? { kind: 'tensors', tensors } : { kind: 'other' };
    }
    return readJson(JSON.parse(result.text ?? result.body.toString('utf8')), method);
  } catch {
    return { kind: 'other' };
  }
}

function argmax(values: ArrayLike<number>): number {
  let best = 0;
  for (let i = 1; i < values.length; i++) if (values[i]! > values[best]!) best = i;
  return best;
}

/** Cosine similarity of two equal-length vectors, clamped to [0, 1]; two zero vectors agree (1). */
export function cosineAgreement(a: readonly number[], b: readonly number[]): number {
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
  return Math.min(1, Math.max(0, dot / Math.sqrt(na * nb)));
}

/** Mean IoU over the classes either mask uses (a pixel's class compared with the other's). */
export function maskIou(a: readonly number[], b: readonly number[]): number {
  return meanIou(a, b);
}

/**
 * Compares the shadow's answer with the live one: undefined when either cannot be read or their
 * shapes differ (the comparison is then not counted).
 */
export function compareAnswers(method: AgreementMethod, live: JobResult, shadow: JobResult): Agreement | undefined {
  const a = readAnswer(live, method);
  const b = readAnswer(shadow, method);
  if (a.kind === 'scores' && b.kind === 'scores') {
    const top = (scores: Map<string, number>) => [...scores].reduce((best, e) => (e[1] > best[1] ? e : best))[0];
    return { agreement: top(a.scores) === top(b.scores) ? 1 : 0 };
  }
  if (a.kind === 'mask' && b.kind === 'mask') {
    if (a.classes.length !== b.classes.length) return undefined;
    return { agreement: maskIou(a.classes, b.classes) };
  }
  if (a.kind !== 'tensors' || b.kind !== 'tensors' || a.tensors.size !== b.tensors.size) return undefined;
  let sum = 0;
  let maxAbsDiff = 0;
  for (const [name, x] of a.tensors) {
    const y = b.tensors.get(name);
    if (!y || y.length !== x.length || x.length === 0) return undefined;
    for (let i = 0; i < x.length; i++) maxAbsDiff = Math.max(maxAbsDiff, Math.abs(x[i]! - y[i]!));
    sum += method === 'top1' ? (argmax(x) === argmax(y) ? 1 : 0) : cosineAgreement(x, y);
  }
  return { agreement: sum / a.tensors.size, maxAbsDiff };
}
