import { readFile } from 'node:fs/promises';
import { resolveInside } from './safe-path.ts';

/** The file model-archiver --quantize writes at the archive's root. */
export const QUANTIZATION_FILE = 'quantization.json';

/** What validate and the describe API show of an archive's quantization.json. */
export interface QuantizationSummary {
  precision: string;
  method?: string;
  /** The headline agreement metric (top1, iou or cosine), its value and target. */
  metric?: string;
  agreement?: number;
  minAgreement?: number;
  isTargetMet?: boolean;
  calibrationSamples?: number;
  evalSamples?: number;
  /** Nodes kept in fp32 (automatically and by request). */
  keptFp32?: string[];
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/**
 * Reads quantization.json from an extracted archive, or undefined when there is none or it
 * is not a JSON object with a `precision` (an archive without it is fp32).
 */
export async function readQuantizationSummary(modelDir: string): Promise<QuantizationSummary | undefined> {
  let raw: unknown;
  try {
    raw = JSON.parse(await readFile(resolveInside(modelDir, QUANTIZATION_FILE, QUANTIZATION_FILE), 'utf8'));
  } catch {
    return undefined;
  }
  if (!isRecord(raw) || typeof raw.precision !== 'string') return undefined;
  const agreement = isRecord(raw.agreement) ? raw.agreement : {};
  const names = (value: unknown): string[] =>
    Array.isArray(value) ? value.filter((v): v is string => typeof v === 'string') : [];
  const num = (value: unknown): number | undefined => (typeof value === 'number' ? value : undefined);
  const summary: QuantizationSummary = { precision: raw.precision };
  if (typeof raw.method === 'string') summary.method = raw.method;
  if (typeof agreement.metric === 'string') summary.metric = agreement.metric;
  const value = num(agreement.value);
  if (value !== undefined) summary.agreement = value;
  const target = num(raw.minAgreement);
  if (target !== undefined) summary.minAgreement = target;
  if (typeof raw.isTargetMet === 'boolean') summary.isTargetMet = raw.isTargetMet;
  const calibration = num(raw.calibrationSamples);
  if (calibration !== undefined) summary.calibrationSamples = calibration;
  const evaluation = num(raw.evalSamples);
  if (evaluation !== undefined) summary.evalSamples = evaluation;
  summary.keptFp32 = [...names(raw.autoKeptFp32), ...names(raw.excludedNodes)];
  return summary;
}
