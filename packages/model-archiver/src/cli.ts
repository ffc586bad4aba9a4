import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { Command, CommanderError, InvalidArgumentError, Option } from 'commander';
import cliProgress from 'cli-progress';
import { isMarinaError } from '@marina/errors';
import {
  CALIBRATION_CHOICES,
  DEFAULT_CALIBRATION_METHOD,
  formatQuantizationSummary,
  quantizeErrors,
  quantizeForArchive,
  type CalibrationChoice,
  type QuantizeForArchiveResult,
} from '@marina/quantize';
import {
  ARCHIVE_FORMATS,
  ARCHIVER_VERSION,
  archiveOutputPath,
  packArchive,
  parseModelConfig,
  RUNTIMES,
  validateArchive,
  type ArchiveFormatOption,
  type PackProgress,
  type Runtime,
  type ValidationReport,
} from '@marina/archive';

/** Exit codes: 0 done; 1 the command could not do its work (bad flags, missing files, existing output, ...); 2 an archive was read (or written) but fails validation. */
export const EXIT_CODES = { ok: 0, userError: 1, validationFailed: 2 } as const;

export interface CliIo {
  /** Where results go. Default process.stdout. */
  stdout?: { write(text: string): unknown };
  /** Where errors, warnings and the progress bar go. Default process.stderr. */
  stderr?: NodeJS.WritableStream & { isTTY?: boolean };
  /** Draw a progress bar while archiving. Default: whether `stderr` is a terminal. */
  isProgressShown?: boolean;
  /** Folder relative paths resolve against. Default process.cwd(). */
  cwd?: string;
}

interface ArchiveFlags {
  modelName: string;
  version: string;
  handler: string;
  serializedFile?: string;
  modelFile?: string;
  extraFiles?: string;
  requirementsFile?: string;
  configFile?: string;
  runtime: Runtime;
  exportPath: string;
  archiveFormat: ArchiveFormatOption;
  force?: boolean;
  skipChecks?: boolean;
  quantize?: 'int8';
  calibration?: string;
  eval?: string;
  calibrationMethod: CalibrationChoice;
  folds?: number;
  percentile?: number;
  minAgreement?: number;
  excludeNodes?: string;
  excludeOpTypes?: string;
  autoFallback: boolean;
}

function agreementTarget(value: string): number {
  const parsed = Number(value);
  if (!(parsed >= 0 && parsed <= 1)) throw new InvalidArgumentError(`'${value}' is not a number from 0 to 1.`);
  return parsed;
}

function percentileValue(value: string): number {
  const parsed = Number(value);
  if (!(parsed > 50 && parsed <= 100))
    throw new InvalidArgumentError(`'${value}' is not a percentile above 50 and at most 100.`);
  return parsed;
}

function foldCount(value: string): number {
  const parsed = Number(value);
  if (!(Number.isInteger(parsed) && parsed >= 2 && parsed <= 100))
    throw new InvalidArgumentError(`'${value.slice(0, 20)}' is not a whole number from 2 to 100.`);
  return parsed;
}

function list(value: string | undefined): string[] {
  return (value ?? '')
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
}

/** Thrown from packArchive's verify hook when the archive would not serve; carries the report. */
class ChecksFailed extends Error {
  constructor(readonly report: ValidationReport) {
    super('the archive fails validation');
  }
}

function formatMegabytes(bytes: number): string {
  return (bytes / 1e6).toFixed(1);
}

function formatSize(bytes: number): string {
  return bytes >= 1e6 ? `${formatMegabytes(bytes)} MB` : `${(bytes / 1e3).toFixed(1)} kB`;
}

function positiveInteger(value: string): number {
  const parsed = Number(value);
  if (!Number.isInteger(parsed) || parsed < 1)
    throw new InvalidArgumentError(`'${value}' is not a whole number of 1 or more.`);
  return parsed;
}

/** The validation report as plain text: a verdict, then one line per problem. */
export function formatReport(report: ValidationReport): string {
  const errors = report.problems.filter((p) => p.severity === 'error').length;
  const warnings = report.problems.length - errors;
  const counts = [
    errors > 0 ? `${errors} error${errors === 1 ? '' : 's'}` : '',
    warnings > 0 ? `${warnings} warning${warnings === 1 ? '' : 's'}` : '',
  ]
    .filter(Boolean)
    .join(', ');
  const lines = [
    `${report.archivePath} (${report.format}): ${report.isValid ? 'will serve' : 'will NOT serve'}${counts ? ` (${counts})` : ''}`,
  ];
  if (report.manifest)
    lines.push(
      `  model ${report.manifest.model.modelName} version ${report.manifest.model.modelVersion}, handler ${String(report.manifest.model.handler)}`,
    );
  if (report.model) {
    const describe = (t: { name: string; type: string; shape: ReadonlyArray<number | string> }): string =>
      `${t.name} ${t.type}[${t.shape.join(',')}]`;
    lines.push(
      `  inputs: ${report.model.inputs.map(describe).join(', ')}; outputs: ${report.model.outputs.map(describe).join(', ')}`,
    );
  }
  const q = report.quantization;
  if (q) {
    const agreement =
      q.agreement === undefined
        ? ''
        : `; ${q.metric ?? 'agreement'} agreement ${q.agreement.toFixed(4)} against fp32 (target ${q.minAgreement ?? '?'}, ${q.isTargetMet ? 'met' : 'NOT met'}) on ${q.evalSamples ?? '?'} samples`;
    lines.push(
      `  precision ${q.precision} (${q.method ?? '?'} calibration on ${q.calibrationSamples ?? '?'} samples${agreement}; kept in fp32: ${q.keptFp32?.length ? q.keptFp32.join(', ') : 'none'})`,
    );
  }
  for (const problem of report.problems) {
    lines.push(`  ${problem.severity === 'error' ? 'error  ' : 'warning'} ${problem.code}: ${problem.message}`);
  }
  return `${lines.join('\n')}\n`;
}

/**
 * Builds the `model-archiver` program: the default action archives (TorchServe's
 * torch-model-archiver flags and meanings); `validate <path>` checks an archive.
 * `-v/--version` is the *model* version, as in TorchServe; the tool's own version is
 * `-V/--archiver-version`. Only this layer prints and picks exit codes (EXIT_CODES).
 */
export function createProgram(io: CliIo = {}): Command {
  const stdout = io.stdout ?? process.stdout;
  const stderr = io.stderr ?? process.stderr;
  const isProgressShown = io.isProgressShown ?? stderr.isTTY === true;
  const cwd = io.cwd ?? process.cwd();
  const program = new Command('model-archiver');
  // Set before the subcommand is added so it inherits it: errors become CommanderErrors
  // carrying the exit code, and only runCli (or a test) decides what to do with them.
  program.exitOverride();

  const fail = (command: Command, error: unknown): never => {
    if (isMarinaError(error))
      command.error(`error: ${error.message}`, { exitCode: EXIT_CODES.userError, code: error.code });
    throw error;
  };

  program
    .description('Package an ONNX model into a TorchServe-style model archive (.mar), or validate one.')
    .version(ARCHIVER_VERSION, '-V, --archiver-version', "print model-archiver's own version")
    .configureOutput({ writeOut: (text) => stdout.write(text), writeErr: (text) => stderr.write(text) })
    .optionsGroup('The model (required: --model-name, --version, --handler):')
    .option(
      '--model-name <name>',
      "name of the model; the archive is <name>.mar (letters, digits, '_', '-', '.'; starts with a letter or digit)",
    )
    .option('-v, --version <version>', '(required) model version, written to the manifest (e.g. 1.0)')
    .option(
      '--handler <handler>',
      '(required) built-in handler (image_classifier, image_segmenter, object_detector, tensor) or path to a JavaScript handler module (.mjs/.js/.cjs, optionally :functionName), copied into the archive',
    )
    .option('--serialized-file <path>', 'the ONNX model file')
    .option('--model-file <path>', 'model definition file (stored for TorchServe compatibility)')
    .optionsGroup('What else goes into the archive:')
    .option('--extra-files <list>', 'comma-separated files, folders (their contents) and globs to add')
    .option('-r, --requirements-file <path>', 'requirements file to store in the archive')
    .option('-c, --config-file <path>', 'model-config.yaml to store in the archive')
    .addOption(new Option('--runtime <runtime>', 'runtime written to the manifest').choices(RUNTIMES).default('python'))
    .optionsGroup('Where and how it is written:')
    .option('--export-path <dir>', 'folder to write the archive to (created when missing)', '.')
    .addOption(
      new Option(
        '--archive-format <format>',
        'default: zip (.mar); zip-store: zip without compression; tgz: <name>.tar.gz; no-archive: a <name>/ folder',
      )
        .choices(ARCHIVE_FORMATS)
        .default('default'),
    )
    .option(
      '-f, --force',
      'overwrite an existing archive; with --quantize, also write an archive whose accuracy is below --min-agreement',
    )
    .optionsGroup('int8 quantisation:')
    .addOption(
      new Option(
        '--quantize <precision>',
        'quantise the model before archiving (QDQ format; needs --calibration)',
      ).choices(['int8']),
    )
    .option(
      '--calibration <dir>',
      'folder of request bodies, as users POST them to the predictions route (images for the image handlers, JSON for tensor), run through the handler to calibrate; accuracy is measured by k-fold over them (each evaluated once by a model calibrated on the others; give 8 or more) unless --eval is given',
    )
    .option(
      '--eval <dir>',
      'folder of request bodies to measure int8 against fp32 on instead of k-fold over --calibration',
    )
    .addOption(
      new Option(
        '--calibration-method <method>',
        'how activation ranges are chosen: auto picks min/max, percentile or entropy per tensor by the error it gives; the others force one method for every tensor',
      )
        .choices(CALIBRATION_CHOICES)
        .default(DEFAULT_CALIBRATION_METHOD),
    )
    .option(
      '--percentile <p>',
      'percentile of |x| kept by --calibration-method percentile (default 99.999)',
      percentileValue,
    )
    .option(
      '--min-agreement <x>',
      'accuracy target, 0..1: top-1 agreement for classifiers (default 0.99), mask IoU for segmenter and detector maps (0.95), lowest cosine otherwise (0.99); below it nothing is written unless --force',
      agreementTarget,
    )
    .option('--exclude-nodes <list>', 'comma-separated node names to keep in fp32')
    .option('--exclude-op-types <list>', 'comma-separated operator types to keep in fp32 (e.g. Add,Resize)')
    .option(
      '--no-auto-fallback',
      'below the target, do not search for nodes to keep in fp32 (the search measures each quantised node alone in int8, then reverts the worst one by one while agreement rises)',
    )
    .option(
      '--folds <k>',
      'folds of the k-fold accuracy check over --calibration (default 4, at most one per sample)',
      foldCount,
    )
    .optionsGroup('Checks:')
    .option(
      '--skip-checks',
      'write the archive without loading the model or checking it against the handler (by default an archive that would not serve is refused and nothing is written)',
    )
    .addHelpText(
      'after',
      `
Examples:
  model-archiver --model-name resnet-152 --version 1.0 --serialized-file resnet-152.onnx \\
    --handler image_classifier --extra-files index_to_name.json --export-path model_store
  model-archiver --model-name resnet-152-int8 --version 1.0 --serialized-file resnet-152.onnx \\
    --handler image_classifier --quantize int8 --calibration my-requests/ --export-path model_store
  model-archiver validate model_store/resnet-152.mar

Before writing, the archive is checked as 'model-archiver validate' checks it (the ONNX model is
loaded and, for a built-in handler, its inputs and outputs checked against the handler and
model-config.yaml); one that would not serve is refused and nothing is written.

Exit codes: 0 done; 1 bad flags or inputs (nothing written); 2 the archive would not serve (nothing written).`,
    )
    .action(async (flags: ArchiveFlags, command: Command) => {
      // Checked here, not with requiredOption, which commander would also enforce for `validate`.
      for (const [key, flag] of [
        ['modelName', '--model-name <name>'],
        ['version', '-v, --version <version>'],
        ['handler', '--handler <handler>'],
      ] as const) {
        if (flags[key] === undefined)
          command.error(`error: required option '${flag}' not specified (run model-archiver --help for usage)`, {
            exitCode: EXIT_CODES.userError,
            code: 'commander.missingMandatoryOptionValue',
          });
      }
      let bar: cliProgress.SingleBar | undefined;
      const onProgress = isProgressShown
        ? ({ bytesDone, bytesTotal }: PackProgress) => {
            if (!bar) {
              bar = new cliProgress.SingleBar(
                {
                  stream: stderr,
                  format: `Archiving ${flags.modelName} [{bar}] {percentage}% | {doneMb}/{totalMb} MB`,
                  hideCursor: true,
                  clearOnComplete: true,
                },
                cliProgress.Presets.shades_classic,
              );
              bar.start(bytesTotal, 0, { doneMb: '0.0', totalMb: formatMegabytes(bytesTotal) });
            }
            bar.update(bytesDone, { doneMb: formatMegabytes(bytesDone), totalMb: formatMegabytes(bytesTotal) });
          }
        : undefined;
      let result: Awaited<ReturnType<typeof packArchive>>;
      const exportPath = resolveFrom(cwd, flags.exportPath);
      const outputPath = archiveOutputPath({
        modelName: flags.modelName,
        exportPath,
        archiveFormat: flags.archiveFormat,
      });
      let checked: ValidationReport | undefined;
      let quantized: QuantizeForArchiveResult | undefined;
      let quantizeDir: string | undefined;
      // The full validation runs on the finished archive under its temporary name: a refused archive is never written.
      const verify = async (tempOutputPath: string): Promise<void> => {
        const report = {
          ...(await validateArchive(tempOutputPath, { isModelLoadChecked: true })),
          archivePath: outputPath,
        };
        if (!report.isValid) throw new ChecksFailed(report);
        checked = report;
      };
      try {
        if (flags.quantize !== undefined || flags.calibration !== undefined) {
          if (flags.quantize === undefined || flags.calibration === undefined || flags.serializedFile === undefined) {
            throw quantizeErrors.create.MARINA_ERR_QUANTIZE_OPTION_INVALID(
              '--quantize int8 needs --calibration <dir> (a folder of request bodies) and --serialized-file (the fp32 ONNX model); give all three',
            );
          }
          quantizeDir = await mkdtemp(join(tmpdir(), 'marina-quantize-'));
          const modelYamlConfig =
            flags.configFile === undefined
              ? {}
              : parseModelConfig(await readFile(resolveFrom(cwd, flags.configFile), 'utf8'), flags.configFile);
          quantized = await quantizeForArchive({
            handler: getHandlerSpec(flags.handler, cwd),
            modelPath: resolveFrom(cwd, flags.serializedFile),
            calibrationDir: resolveFrom(cwd, flags.calibration),
            ...(flags.eval === undefined ? {} : { evalDir: resolveFrom(cwd, flags.eval) }),
            outputDir: quantizeDir,
            modelYamlConfig,
            method: flags.calibrationMethod,
            ...(flags.percentile === undefined ? {} : { percentile: flags.percentile }),
            ...(flags.minAgreement === undefined ? {} : { minAgreement: flags.minAgreement }),
            excludedNodes: list(flags.excludeNodes),
            excludedOpTypes: list(flags.excludeOpTypes),
            isAutoFallback: flags.autoFallback,
            ...(flags.folds === undefined ? {} : { folds: flags.folds }),
            onProgress: (message) => stderr.write(`quantize: ${message}\n`),
          });
          stderr.write(formatQuantizationSummary(quantized.record));
          if (!quantized.record.isTargetMet && flags.force !== true) {
            const r = quantized.record;
            throw quantizeErrors.create.MARINA_ERR_QUANTIZE_ACCURACY_BELOW_TARGET(
              `int8 ${r.agreement.metric} agreement is ${r.agreement.value.toFixed(4)}, below the target ${r.minAgreement} (worst fold ${r.worstFold.toFixed(4)}; all int8: ${r.initialAgreement.value.toFixed(4)}; search: ${r.search ? `${r.search.steps.length} step(s), ${r.search.steps.filter((s) => s.isKept).length} kept` : 'not run'}; kept in fp32: ${r.autoKeptFp32.length > 0 ? `${r.autoKeptFp32.length} nodes (${r.autoKeptFp32.slice(0, 5).join(', ')}${r.autoKeptFp32.length > 5 ? ', …' : ''})` : 'none'}); nothing was written. Calibrate on samples like your requests, try another --calibration-method, keep nodes in fp32 with --exclude-nodes/--exclude-op-types, lower --min-agreement, or pass --force to write it anyway`,
              { details: { agreement: r.agreement.value, minAgreement: r.minAgreement, keptFp32: r.autoKeptFp32 } },
            );
          }
        }
        result = await packArchive({
          modelName: flags.modelName,
          modelVersion: flags.version,
          handler: flags.handler,
          ...(quantized
            ? { serializedFile: quantized.modelPath }
            : flags.serializedFile === undefined
              ? {}
              : { serializedFile: flags.serializedFile }),
          ...(flags.modelFile === undefined ? {} : { modelFile: flags.modelFile }),
          ...(flags.extraFiles === undefined && !quantized
            ? {}
            : {
                extraFiles: [
                  ...(flags.extraFiles === undefined ? [] : flags.extraFiles.split(',')),
                  ...(quantized ? [quantized.reportPath] : []),
                ],
              }),
          ...(flags.requirementsFile === undefined ? {} : { requirementsFile: flags.requirementsFile }),
          ...(flags.configFile === undefined ? {} : { configFile: flags.configFile }),
          runtime: flags.runtime,
          exportPath: flags.exportPath,
          archiveFormat: flags.archiveFormat,
          isForced: flags.force === true,
          cwd,
          ...(onProgress ? { onProgress } : {}),
          ...(flags.skipChecks ? {} : { verify }),
        });
      } catch (error) {
        bar?.stop();
        if (error instanceof ChecksFailed) {
          stderr.write(formatReport(error.report));
          command.error(
            `error: ${flags.modelName} would not serve, so nothing was written; fix the errors above and archive again (or pass --skip-checks to write it anyway)`,
            { exitCode: EXIT_CODES.validationFailed, code: 'marina.validationFailed' },
          );
        }
        if (isMarinaError(error) && error.code === 'MARINA_ERR_QUANTIZE_ACCURACY_BELOW_TARGET') {
          command.error(`error: ${error.code}: ${error.message}`, { exitCode: EXIT_CODES.userError, code: error.code });
        }
        fail(command, error);
        return;
      } finally {
        bar?.stop();
        if (quantizeDir) await rm(quantizeDir, { recursive: true, force: true });
      }
      for (const warning of result.warnings) stderr.write(`warning: ${warning}\n`);
      for (const problem of checked?.problems ?? []) stderr.write(`warning: ${problem.code}: ${problem.message}\n`);
      stdout.write(`${result.outputPath} (${formatSize(result.bytes)})\n`);
    });

  program
    .command('validate')
    .description('check that an archive (.mar, .tar.gz or folder) will serve, listing every problem with a code')
    .argument('<path>', 'archive or folder to check')
    .optionsGroup('Report:')
    .option('--json', 'print the report as JSON')
    .optionsGroup('Checks:')
    .option(
      '--batch-size <n>',
      'batch size to check the model against (default: model-config.yaml batchSize, else 1)',
      positiveInteger,
    )
    .option('--no-model-load', 'skip loading the ONNX model (only the cheap checks)')
    .addHelpText(
      'after',
      `
Examples:
  # every problem of an archive, each with a code and a sentence
  model-archiver validate model_store/resnet-18.mar
  # will it batch 8 requests? (a fixed batch dimension is a warning)
  model-archiver validate --batch-size 8 model_store/resnet-18.mar
  # the report as JSON, for a script
  model-archiver validate --json model_store/resnet-18.mar`,
    )
    .action(
      async (path: string, flags: { json?: boolean; batchSize?: number; modelLoad: boolean }, command: Command) => {
        let report: ValidationReport;
        try {
          report = await validateArchive(resolveFrom(cwd, path), {
            isModelLoadChecked: flags.modelLoad,
            ...(flags.batchSize === undefined ? {} : { batchSize: flags.batchSize }),
          });
        } catch (error) {
          fail(command, error);
          return;
        }
        stdout.write(flags.json ? `${JSON.stringify(report, null, 2)}\n` : formatReport(report));
        if (report.problems.some((p) => p.code === 'MARINA_ERR_ARCHIVE_NOT_FOUND')) {
          command.error(`error: ${path} does not exist; check the path`, {
            exitCode: EXIT_CODES.userError,
            code: 'MARINA_ERR_ARCHIVE_NOT_FOUND',
          });
        }
        if (!report.isValid) {
          command.error(`error: ${path} will not serve (see the problems ${flags.json ? 'in the report' : 'above'})`, {
            exitCode: EXIT_CODES.validationFailed,
            code: 'marina.validationFailed',
          });
        }
      },
    );

  return program;
}

/** A built-in handler name as is; a module path made absolute (keeping any :functionName). */
function getHandlerSpec(handler: string, cwd: string): string {
  const match = /^(.+?\.(?:mjs|cjs|js))(:[A-Za-z_$][\w$]*)?$/.exec(handler);
  return match ? `${resolveFrom(cwd, match[1]!)}${match[2] ?? ''}` : handler;
}

function resolveFrom(cwd: string, path: string): string {
  return resolve(cwd, path);
}

/**
 * Runs the CLI and returns its exit code (see EXIT_CODES) instead of exiting, so the
 * bin can set `process.exitCode` and let pending output flush.
 */
export async function runCli(argv: readonly string[], io: CliIo = {}): Promise<number> {
  try {
    await createProgram(io).parseAsync([...argv]);
    return EXIT_CODES.ok;
  } catch (error) {
    if (error instanceof CommanderError) return error.exitCode;
    (io.stderr ?? process.stderr).write(
      `error: unexpected failure: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`,
    );
    return EXIT_CODES.userError;
  }
}
