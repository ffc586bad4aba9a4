import { writeFile } from 'node:fs/promises';
import { basename, join } from 'node:path';
import type { CalibrationChoice } from './calibration.ts';
import { createError } from './errors.ts';
import { readSamples, recordHandlerFeeds, type Sample } from './handler-feeds.ts';
import { saveModel } from './onnx-model.ts';
import { quantizeModel, type Feeds, type QuantizationReport, type QuantizeModelOptions } from './quantize-model.ts';

/** The file inside an archive that records how its model was quantised. */
export const QUANTIZATION_REPORT_FILE = 'quantization.json';

/** Default calibration method: per tensor, whichever of min/max, percentile and entropy quantises it with the least error. */
export const DEFAULT_CALIBRATION_METHOD: CalibrationChoice = 'auto';

/** The options quantizeForArchive passes on to quantizeModel as they are (`method` defaults to DEFAULT_CALIBRATION_METHOD here). */
type PassedOnOptions =
  | 'modelPath'
  | 'method'
  | 'percentile'
  | 'minAgreement'
  | 'excludedNodes'
  | 'excludedOpTypes'
  | 'isAutoFallback'
  | 'folds'
  | 'maxSearchSteps'
  | 'onProgress';

export interface QuantizeForArchiveOptions extends Pick<QuantizeModelOptions, PassedOnOptions> {
  handler: string;
  /** Folder of request bodies to calibrate on, and to evaluate on by k-fold unless `evalDir` is given. */
  calibrationDir: string;
  /** Folder of request bodies to evaluate on instead of k-fold. */
  evalDir?: string;
  /** Folder the int8 model and quantization.json are written to. */
  outputDir: string;
  modelYamlConfig?: Record<string, unknown>;
}

/** quantization.json: the report plus which sample files were used for what. */
export interface QuantizationRecord extends QuantizationReport {
  calibrationFiles: string[];
  evalFiles: string[];
  handler: string;
}

export interface QuantizeForArchiveResult {
  /** The int8 model, named as the fp32 one. */
  modelPath: string;
  reportPath: string;
  record: QuantizationRecord;
}

async function feedsOf(options: QuantizeForArchiveOptions, samples: readonly Sample[]): Promise<Feeds[]> {
  const runs = await recordHandlerFeeds({
    handler: options.handler,
    modelPath: options.modelPath,
    ...(options.modelYamlConfig ? { modelYamlConfig: options.modelYamlConfig } : {}),
    samples,
  });
  const failed = runs.find((r) => r.error !== undefined);
  if (failed) {
    throw createError.MARINA_ERR_QUANTIZE_CALIBRATION_FAILED(
      `sample '${failed.name}' could not be run through handler '${options.handler}': ${failed.error}; keep only request bodies the model serves in the sample folder`,
      { details: { sample: failed.name } },
    );
  }
  return runs.map((r) => r.feeds!);
}

/**
 * Quantises a model for an archive from a folder of request bodies: each is run through the
 * handler's own preprocessing (see `recordHandlerFeeds`); agreement is measured by k-fold over
 * them (each evaluated once by a model calibrated on the others) unless `evalDir` is given;
 * the int8 model (calibrated on every sample) and quantization.json are written to
 * `outputDir`. It does not refuse: the caller reads `record.isTargetMet`.
 *
 * @throws MARINA_ERR_QUANTIZE_CALIBRATION_EMPTY, MARINA_ERR_QUANTIZE_CALIBRATION_FAILED and
 *   quantizeModel's errors.
 */
export async function quantizeForArchive(options: QuantizeForArchiveOptions): Promise<QuantizeForArchiveResult> {
  const calibration = await readSamples(options.calibrationDir);
  const evaluation = options.evalDir === undefined ? [] : await readSamples(options.evalDir);
  if (options.evalDir === undefined && calibration.length < 2)
    throw createError.MARINA_ERR_QUANTIZE_CALIBRATION_EMPTY(
      `the calibration folder '${options.calibrationDir}' has ${calibration.length} sample; give at least two (eight or more for a fair estimate: each is evaluated by a model calibrated on the others) or an --eval folder`,
    );
  options.onProgress?.(
    `running ${calibration.length + evaluation.length} samples through handler '${options.handler}'`,
  );
  const calibrationFeeds = await feedsOf(options, calibration);
  const evalFeeds = evaluation.length > 0 ? await feedsOf(options, evaluation) : undefined;
  const {
    handler: _handler,
    calibrationDir: _calibrationDir,
    evalDir: _evalDir,
    outputDir: _outputDir,
    modelYamlConfig: _modelYamlConfig,
    ...passedOn
  } = options;
  const { model, report } = await quantizeModel({
    ...passedOn,
    calibrationFeeds,
    ...(evalFeeds ? { evalFeeds } : {}),
    method: options.method ?? DEFAULT_CALIBRATION_METHOD,
  });
  const modelPath = join(options.outputDir, basename(options.modelPath));
  await saveModel(model, modelPath);
  const record: QuantizationRecord = {
    ...report,
    handler: options.handler,
    calibrationFiles: calibration.map((s) => s.name),
    evalFiles: evaluation.length > 0 ? evaluation.map((s) => s.name) : calibration.map((s) => s.name),
  };
  const reportPath = join(options.outputDir, QUANTIZATION_REPORT_FILE);
  await writeFile(reportPath, `${JSON.stringify(record, null, 2)}\n`);
  return { modelPath, reportPath, record };
}

function metricName(metric: string): string {
  return metric === 'top1' ? 'top-1 agreement' : metric === 'iou' ? 'mask IoU' : 'lowest cosine';
}

function listed(nodes: readonly string[]): string {
  return nodes.length > 8
    ? `${nodes.slice(0, 8).join(', ')}, … (${nodes.length - 8} more, all listed in ${QUANTIZATION_REPORT_FILE})`
    : nodes.join(', ');
}

/** The fall-back search in a few lines: ranking, each step tried, time taken. */
function searchLines(record: QuantizationReport): string[] {
  const search = record.search;
  if (!search) return [];
  const lines = [
    `  fall-back: ${search.rankedGroups} quantised groups measured alone in int8 (${(search.rankMs / 1000).toFixed(1)} s); most sensitive: ${search.ranked
      .slice(0, 3)
      .map((g) => `${g.nodes[0]} (${g.aloneInt8.value.toFixed(4)})`)
      .join(', ')}`,
  ];
  const kept = search.steps.filter((s) => s.isKept);
  lines.push(
    `  search: ${search.steps.length} step(s) tried in ${(search.searchMs / 1000).toFixed(1)} s, ${kept.length} kept (each raised agreement on the search samples)`,
  );
  for (const step of kept)
    lines.push(
      `    + ${step.nodes.join('+')} -> ${step.value.toFixed(4)}${step.verifiedValue === undefined ? '' : ` (out of sample ${step.verifiedValue.toFixed(4)})`}`,
    );
  return lines;
}

/** A few lines for people: method, agreement against the target by fold, what stayed fp32 and why, the search, size and speed. */
export function formatQuantizationSummary(record: QuantizationReport): string {
  const a = record.agreement;
  const methods = Object.entries(record.methodsChosen)
    .filter(([, n]) => n > 0)
    .map(([m, n]) => `${m} ${n}`)
    .join(', ');
  const how =
    record.evaluation === 'k-fold'
      ? `${record.folds.length}-fold over ${record.samples} samples (each evaluated once, calibrated on the other ${record.calibrationSamples}+)`
      : `${record.evalSamples} held-out samples`;
  const lines = [
    `int8 (${record.format}, ${record.method} calibration: ${methods}; ${record.weights}; activations ${record.activations}${record.isReducedRange ? '; reduced range' : ''})`,
    `  ${record.reducedRangeReason}`,
    `  accuracy by ${how}: ${metricName(a.metric)} ${a.value.toFixed(4)} (target ${record.minAgreement}) ${record.isTargetMet ? 'met' : 'NOT met'}; folds: worst ${record.worstFold.toFixed(4)}, mean ${record.meanFold.toFixed(4)}`,
    ...record.warnings.map((w) => `  warning: ${w}`),
  ];
  for (const o of a.outputs) {
    const extra = [
      o.top1Agreement === undefined ? '' : `top-1 ${o.top1Agreement.toFixed(3)}, top-5 ${o.top5Agreement!.toFixed(3)}`,
      o.iou === undefined ? '' : `IoU ${o.iou.toFixed(4)}`,
    ]
      .filter(Boolean)
      .join(', ');
    lines.push(
      `  output ${o.name}: cosine min ${o.minCosine.toFixed(5)} mean ${o.meanCosine.toFixed(5)}, max |diff| ${o.maxAbsDifference.toPrecision(4)}${extra ? `, ${extra}` : ''}`,
    );
  }
  lines.push(`  all int8: ${metricName(record.initialAgreement.metric)} ${record.initialAgreement.value.toFixed(4)}`);
  for (const k of record.keptFp32) lines.push(`  fp32: ${listed(k.nodes)}: ${k.reason}`);
  for (const t of record.defaultsTried.filter((d) => !d.isKept))
    lines.push(
      `  int8: ${listed(t.nodes)} (${t.reason}): fp32 did not help (${t.int8.toFixed(4)} -> ${t.fp32.toFixed(4)})`,
    );
  if (record.autoKeptFp32.length > 0) lines.push(`  kept in fp32 automatically (${record.autoKeptFp32.length})`);
  lines.push(...searchLines(record));
  if (record.excludedOpTypes.length > 0)
    lines.push(`  excluded op types by request: ${record.excludedOpTypes.join(', ')}`);
  lines.push(
    `  ${record.quantizedNodes} nodes int8 (${record.convolutions.int8} of ${record.convolutions.total} convolutions), ${record.fp32Nodes.length} quantisable nodes fp32; weights ${(record.modelBytes.fp32 / 1e6).toFixed(1)} MB -> model ${(record.modelBytes.int8 / 1e6).toFixed(1)} MB`,
  );
  lines.push(
    `  ms per sample (1 thread, median, not a benchmark): fp32 ${record.msPerSample.fp32}, int8 ${record.msPerSample.int8}, all-int8 ${record.msPerSample.allInt8}; quantising took ${(record.quantizeMs / 1000).toFixed(1)} s`,
  );
  return `${lines.join('\n')}\n`;
}
