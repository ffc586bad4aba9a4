import { writeFile } from 'node:fs/promises';
import { basename, join } from 'node:path';
import type { CalibrationMethod } from './calibration.ts';
import { createError } from './errors.ts';
import { readSamples, recordHandlerFeeds, type Sample } from './handler-feeds.ts';
import { saveModel } from './onnx-model.ts';
import { quantizeModel, type Feeds, type QuantizationReport, type QuantizeModelOptions } from './quantize-model.ts';

/** The file inside an archive that records how its model was quantised. */
export const QUANTIZATION_REPORT_FILE = 'quantization.json';

/** Default calibration method: the one with the best measured agreement on the issue's test models (see docs/guides/quantisation.md). */
export const DEFAULT_CALIBRATION_METHOD: CalibrationMethod = 'minmax';

/** The options quantizeForArchive passes on to quantizeModel as they are (`method` defaults to DEFAULT_CALIBRATION_METHOD here). */
type PassedOnOptions =
  | 'modelPath'
  | 'method'
  | 'percentile'
  | 'minAgreement'
  | 'excludedNodes'
  | 'excludedOpTypes'
  | 'isAutoFallback'
  | 'onProgress';

export interface QuantizeForArchiveOptions extends Pick<QuantizeModelOptions, PassedOnOptions> {
  handler: string;
  /** Folder of request bodies to calibrate on (a quarter held back for the accuracy check unless `evalDir`). */
  calibrationDir: string;
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
 * handler's own preprocessing (see `recordHandlerFeeds`), a quarter of them (every fourth, by
 * name) are held back for the accuracy check unless `evalDir` is given, and the int8 model and
 * quantization.json are written to `outputDir`. It does not refuse: the caller reads
 * `record.isTargetMet`.
 *
 * @throws MARINA_ERR_QUANTIZE_CALIBRATION_EMPTY, MARINA_ERR_QUANTIZE_CALIBRATION_FAILED and
 *   quantizeModel's errors.
 */
export async function quantizeForArchive(options: QuantizeForArchiveOptions): Promise<QuantizeForArchiveResult> {
  const samples = await readSamples(options.calibrationDir);
  let calibration: Sample[];
  let evaluation: Sample[];
  if (options.evalDir !== undefined) {
    calibration = samples;
    evaluation = await readSamples(options.evalDir);
  } else {
    if (samples.length < 2)
      throw createError.MARINA_ERR_QUANTIZE_CALIBRATION_EMPTY(
        `the calibration folder '${options.calibrationDir}' has ${samples.length} sample; give at least two (a quarter are held back to measure accuracy) or an --eval folder`,
      );
    evaluation = samples.filter((_, i) => i % 4 === 3);
    if (evaluation.length === 0) evaluation = [samples[samples.length - 1]!];
    calibration = samples.filter((s) => !evaluation.includes(s));
  }
  options.onProgress?.(
    `running ${calibration.length} calibration and ${evaluation.length} evaluation samples through handler '${options.handler}'`,
  );
  const calibrationFeeds = await feedsOf(options, calibration);
  const evalFeeds = await feedsOf(options, evaluation);
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
    evalFeeds,
    method: options.method ?? DEFAULT_CALIBRATION_METHOD,
  });
  const modelPath = join(options.outputDir, basename(options.modelPath));
  await saveModel(model, modelPath);
  const record: QuantizationRecord = {
    ...report,
    handler: options.handler,
    calibrationFiles: calibration.map((s) => s.name),
    evalFiles: evaluation.map((s) => s.name),
  };
  const reportPath = join(options.outputDir, QUANTIZATION_REPORT_FILE);
  await writeFile(reportPath, `${JSON.stringify(record, null, 2)}\n`);
  return { modelPath, reportPath, record };
}

/** A few lines for people: method, agreement against the target, what stayed fp32, size and speed. */
export function formatQuantizationSummary(record: QuantizationReport): string {
  const a = record.agreement;
  const metricName = a.metric === 'top1' ? 'top-1 agreement' : a.metric === 'iou' ? 'mask IoU' : 'lowest cosine';
  const lines = [
    `int8 (${record.format}, ${record.method} calibration on ${record.calibrationSamples} samples; ${record.weights}; activations ${record.activations}${record.isReducedRange ? '; reduced range' : ''})`,
    `  ${record.reducedRangeReason}`,
    `  accuracy on ${record.evalSamples} held-out samples: ${metricName} ${a.value.toFixed(4)} (target ${record.minAgreement}) ${record.isTargetMet ? 'met' : 'NOT met'}`,
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
  if (record.autoKeptFp32.length > 0 || record.fallbackSteps.length > 0) {
    const kept = record.autoKeptFp32;
    const shown =
      kept.length > 12
        ? `${kept.slice(0, 12).join(', ')}, … (${kept.length - 12} more, all listed in ${QUANTIZATION_REPORT_FILE})`
        : kept.join(', ') || 'none';
    lines.push(
      `  all int8: ${record.initialAgreement.value.toFixed(4)}; kept in fp32 automatically (${kept.length}): ${shown}`,
    );
    for (const step of record.fallbackSteps)
      lines.push(`    ${step.keptFp32.length} node(s) in fp32 -> ${step.agreement.toFixed(4)}`);
  }
  if (record.excludedNodes.length + record.excludedOpTypes.length > 0)
    lines.push(
      `  excluded by request: nodes ${record.excludedNodes.join(', ') || '-'}; op types ${record.excludedOpTypes.join(', ') || '-'}`,
    );
  lines.push(
    `  ${record.quantizedNodes} nodes int8, ${record.fp32Nodes.length} quantisable nodes fp32; weights ${(record.modelBytes.fp32 / 1e6).toFixed(1)} MB -> model ${(record.modelBytes.int8 / 1e6).toFixed(1)} MB`,
  );
  lines.push(
    `  ms per sample (1 thread, median over the held-out samples, not a benchmark): fp32 ${record.msPerSample.fp32}, int8 ${record.msPerSample.int8}${record.autoKeptFp32.length > 0 ? `, all-int8 ${record.msPerSample.allInt8}` : ''}`,
  );
  return `${lines.join('\n')}\n`;
}
