import { Command, CommanderError, InvalidArgumentError, Option } from 'commander';
import cliProgress from 'cli-progress';
import { experimentNames, type ExperimentName } from './bench-result.ts';
import { isMarinaError } from '@marina/errors';
import { benchModelNames, type BenchModelName } from './model-assets.ts';
import { formatTable } from './report/format-table.ts';
import { runBench, type BenchMode } from './run-bench.ts';
import type { BenchProgressEvent } from './experiments/experiment-context.ts';
import { profileModel } from './profile/profile-model.ts';
import { formatProfile } from './profile/render-profile.ts';
import { writeProfileReports } from './profile/write-profile-reports.ts';
import { formatTuneResult, tuneArchive } from './tune/tune-archive.ts';
import { runQuantizeCommand } from './quantize/quantize-command.ts';
import { quantizeBenchModelNames, type QuantizeBenchModelName } from './quantize/quantize-models.ts';

function positiveInteger(value: string): number {
  const parsed = Number(value);
  if (!Number.isInteger(parsed) || parsed < 1)
    throw new InvalidArgumentError(`expected a whole number of 1 or more, got '${value}'`);
  return parsed;
}

function nonNegativeInteger(value: string): number {
  const parsed = Number(value);
  if (!Number.isInteger(parsed) || parsed < 0)
    throw new InvalidArgumentError(`expected a whole number of 0 or more, got '${value}'`);
  return parsed;
}

function positiveNumber(value: string): number {
  const parsed = Number(value);
  if (!Number.isFinite(parsed) || parsed <= 0)
    throw new InvalidArgumentError(`expected a number above 0, got '${value}'`);
  return parsed;
}

/** `--dim name=N`, repeatable: sizes of named dynamic dimensions. */
function dimEntry(value: string, previous: Record<string, number> = {}): Record<string, number> {
  const match = /^([^=]+)=(\d+)$/.exec(value);
  if (!match || Number(match[2]) < 1)
    throw new InvalidArgumentError(`expected name=N with N of 1 or more (e.g. sequence=128), got '${value}'`);
  return { ...previous, [match[1]!]: Number(match[2]) };
}

function experimentList(value: string): ExperimentName[] {
  const names = value
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  const unknown = names.filter((n) => !experimentNames.includes(n as ExperimentName));
  if (unknown.length > 0)
    throw new InvalidArgumentError(
      `unknown experiment(s) ${unknown.join(', ')}; choose from ${experimentNames.join(', ')}`,
    );
  return names as ExperimentName[];
}

/** Progress on stderr: a cli-progress bar on a terminal, one line per phase otherwise (CI logs). */
function createProgressPrinter(stream: NodeJS.WriteStream): {
  onProgress: (event: BenchProgressEvent) => void;
  stop: () => void;
} {
  const isTty = stream.isTTY === true;
  const bar = isTty
    ? new cliProgress.SingleBar(
        { stream, format: '{bar} {percentage}% | {value}/{total} | {label}', hideCursor: true, clearOnComplete: true },
        cliProgress.Presets.shades_classic,
      )
    : undefined;
  let isBarActive = false;
  const stopBar = () => {
    if (bar && isBarActive) bar.stop();
    isBarActive = false;
  };
  return {
    onProgress(event) {
      if (event.type === 'log') {
        if (!isTty) stream.write(`  ${event.message}\n`);
        else if (isBarActive) bar!.update({ label: event.message });
        return;
      }
      if (event.type === 'phase') {
        stopBar();
        if (!bar) {
          stream.write(`${event.label}\n`);
          return;
        }
        stream.write(`${event.label}\n`);
        bar.start(Math.max(1, event.total), 0, { label: event.label });
        isBarActive = true;
        return;
      }
      if (bar && isBarActive) {
        // Time-bounded runs have no known total; grow it so the bar keeps moving.
        if (event.done > bar.getTotal()) bar.setTotal(event.done);
        bar.update(event.done);
      }
    },
    stop: stopBar,
  };
}

/** Builds the `marina-bench` program; only this layer prints and sets exit codes. */
export function createProgram(): Command {
  const program = new Command('marina-bench')
    // Options before a subcommand are the bench's own; after it, the subcommand's (both have --out).
    .enablePositionalOptions()
    .description(
      'Measure the case for a central server: ceiling, decentralized jobs, centralized/batched/multi-worker server and a concurrency sweep, side by side.',
    )
    .optionsGroup('What to run:')
    .addOption(new Option('--model <name>', 'model to benchmark').choices([...benchModelNames]))
    .option('--quick', 'ResNet-18, fewer images, shorter sweep: a few minutes on 2 cores', false)
    .option('--smoke', 'tiny model, seconds: keeps the bench working in CI', false)
    .optionsGroup('How much:')
    .option('--images <n>', 'requests per server experiment', positiveInteger)
    .option('--concurrency <n>', 'client concurrency of the server experiments (default 100; smoke 8)', positiveInteger)
    .option('--experiments <list>', `comma-separated subset of ${experimentNames.join(',')}`, experimentList)
    .option(
      '--budget-divisor <n>',
      "many-models: the budget is the models' memory with every one resident ÷ n (default 3)",
      positiveNumber,
    )
    .optionsGroup('Where:')
    .option('--out <dir>', 'output folder (default bench-results/<timestamp>; also copied to bench-results/latest)')
    .option('--cache-dir <dir>', 'where generated models and archives are kept (default ~/.cache/marina/bench)')
    .option('--serve-bin <path>', "the serve CLI to benchmark (default: this workspace's @marina/serve)")
    .addHelpText(
      'after',
      `
Examples:
  # ResNet-18, every experiment, a few minutes
  marina-bench --quick
  # only the ceiling and the int8 experiment, on ResNet-152
  marina-bench --model resnet-152 --experiments ceiling,int8
  # where a model's time goes, and the best workers/threads/batch size for this machine
  marina-bench profile model.onnx && marina-bench tune model_store/resnet-18.mar`,
    )
    .action(
      async (flags: {
        model?: BenchModelName;
        quick: boolean;
        smoke: boolean;
        images?: number;
        concurrency?: number;
        experiments?: ExperimentName[];
        budgetDivisor?: number;
        out?: string;
        cacheDir?: string;
        serveBin?: string;
      }) => {
        const mode: BenchMode = flags.smoke ? 'smoke' : flags.quick ? 'quick' : 'full';
        const progress = createProgressPrinter(process.stderr);
        try {
          const { result, files } = await runBench({
            mode,
            model: flags.model,
            images: flags.images,
            concurrency: flags.concurrency,
            experiments: flags.experiments,
            ...(flags.budgetDivisor === undefined ? {} : { manyModelsBudgetDivisor: flags.budgetDivisor }),
            outDir: flags.out,
            cacheDir: flags.cacheDir,
            serveBin: flags.serveBin,
            onProgress: progress.onProgress,
          });
          progress.stop();
          const m = result.machine;
          process.stdout.write(
            `\n${result.model} on ${m.cpuModel}, ${m.cores} cores, Node ${m.nodeVersion}, onnxruntime-node ${m.onnxruntimeVersion}\n\n`,
          );
          process.stdout.write(`${formatTable(result.rows)}\n\n`);
          for (const t of result.targets) {
            const verdict = t.isMet === undefined ? 'not measured' : t.isMet ? 'met' : 'MISSED';
            process.stdout.write(
              `[${verdict}] ${t.name}: ${t.measured}${t.isMet === false ? `\n    ${t.explanation}` : ''}\n`,
            );
          }
          process.stdout.write(
            `\nreport: ${files.markdownPath}\ncsv:    ${files.csvPath}\nchart:  ${files.chartPath}\nlatest: ${files.latestDir}\n`,
          );
        } finally {
          progress.stop();
        }
      },
    );

  program
    .command('quantize')
    .description(
      'Quantise real pretrained models (PaddleOCR text detector and direction classifier from npm, ResNet-152) with model-archiver --quantize int8, then serve fp32 and int8 with the same configuration in rounds taken in turns, at one client and at the batch size where onnxruntime alone runs each fastest; writes quantize-report.md and quantize-result.json.',
    )
    .optionsGroup('Models:')
    .option(
      '--models <list>',
      `comma-separated, from ${quantizeBenchModelNames.join(', ')} (default all)`,
      (value: string) => {
        const names = value.split(',').map((n) => n.trim());
        const unknown = names.filter((n) => !quantizeBenchModelNames.includes(n as QuantizeBenchModelName));
        if (unknown.length > 0)
          throw new InvalidArgumentError(
            `unknown model(s) ${unknown.join(', ')}; choose from ${quantizeBenchModelNames.join(', ')}`,
          );
        return names as QuantizeBenchModelName[];
      },
    )
    .option(
      '--reuse-archives',
      'measure the archives an earlier run left in --cache-dir again, without quantising again',
    )
    .optionsGroup('The runs:')
    .option('--rounds <n>', 'rounds per server, taken in turns', positiveInteger, 3)
    .option('--requests <n>', 'measured requests per round, one client', positiveInteger, 20)
    .option('--serve-bin <path>', "the serve CLI (default: this workspace's @marina/serve)")
    .optionsGroup('Output:')
    .option('--cache-dir <dir>', 'where models, samples and archives are kept between runs')
    .option('--out <dir>', 'where the report is written (default bench-results/quantize-<time>)')
    .addHelpText(
      'after',
      `
Examples:
  marina-bench quantize
  marina-bench quantize --models ppocr-det --rounds 5
  marina-bench quantize --reuse-archives --cache-dir .quantize-cache`,
    )
    .action(
      async (flags: {
        reuseArchives?: boolean;
        models?: QuantizeBenchModelName[];
        rounds: number;
        requests: number;
        cacheDir?: string;
        out?: string;
        serveBin?: string;
      }) => {
        const { reuseArchives, ...rest } = flags;
        const { report, outDir } = await runQuantizeCommand({
          ...rest,
          ...(reuseArchives ? { isReusingArchives: true } : {}),
          onProgress: (message) => process.stderr.write(`  ${message}\n`),
        });
        process.stdout.write(`${report}\nwritten to ${outDir}\n`);
      },
    );

  program
    .command('profile')
    .description(
      "Profile any ONNX model (or a model archive) with onnxruntime's profiler: time per operator type and per node, each with its share, the top bottleneck nodes, and a chart.",
    )
    .argument('<model>', 'an .onnx file, or a model archive (.mar, .tar.gz or folder)')
    .optionsGroup('Inputs:')
    .option('--batch-size <n>', 'rows per run (the dynamic batch dimension)', positiveInteger, 1)
    .option('--dim <name=N>', 'size of a named dynamic dimension (repeatable; default 1)', dimEntry)
    .option(
      '--input <file>',
      'sample image for an image_classifier archive (default: its warmup.input, else a synthetic JPEG)',
    )
    .optionsGroup('The runs:')
    .option('--runs <n>', 'profiled runs', positiveInteger, 20)
    .option('--warmup-runs <n>', 'runs before profiling', nonNegativeInteger, 3)
    .option('--threads <n>', 'intra-op threads (default: every core, as one server worker gets)', positiveInteger)
    .optionsGroup('Output:')
    .option('--top <n>', 'bottleneck nodes to list', positiveInteger, 10)
    .option(
      '--out <dir>',
      'where chart.svg, profile.json and the raw trace.json go (default bench-results/profile-<model>)',
    )
    .option('--json', 'print the result as JSON instead of tables', false)
    .addHelpText(
      'after',
      `
Examples:
  marina-bench profile model.onnx
  marina-bench profile --batch-size 8 --dim sequence=128 model.onnx
  marina-bench profile --input kitten.jpg model_store/resnet-18.mar`,
    )
    .action(
      async (
        modelPath: string,
        flags: {
          batchSize: number;
          dim?: Record<string, number>;
          input?: string;
          runs: number;
          warmupRuns: number;
          threads?: number;
          top: number;
          out?: string;
          json: boolean;
        },
      ) => {
        const result = await profileModel({
          path: modelPath,
          batchSize: flags.batchSize,
          dims: flags.dim,
          inputPath: flags.input,
          runs: flags.runs,
          warmupRuns: flags.warmupRuns,
          intraOpNumThreads: flags.threads,
          keepTrace: true,
          onProgress: (message) => {
            if (!flags.json) process.stderr.write(`  ${message}\r`);
          },
        });
        const files = await writeProfileReports(result, {
          outDir: flags.out ?? `bench-results/profile-${result.modelName}`,
          top: flags.top,
        });
        if (flags.json) {
          const { traceText: _trace, ...printable } = result;
          process.stdout.write(`${JSON.stringify({ ...printable, files }, null, 2)}\n`);
          return;
        }
        process.stderr.write('\n');
        process.stdout.write(
          `${formatProfile(result, { top: flags.top })}\n\nchart:   ${files.chartPath}\nresult:  ${files.jsonPath}\ntrace:   ${files.tracePath} (chrome://tracing or ui.perfetto.dev)\n`,
        );
      },
    );

  program
    .command('tune')
    .description(
      'Measure workers x intra-op threads x batch size (and maxBatchDelay where batching helps) for an archive on this machine, within a time budget, and print the config.properties lines of the best.',
    )
    .argument('<archive>', 'a model archive (.mar, .tar.gz or folder)')
    .optionsGroup('Budget and input:')
    .option('--budget-s <s>', 'time budget in seconds, server starts included', positiveNumber, 120)
    .option(
      '--input <file>',
      "request body to measure with (default: the archive's warmup.input, else synthetic from the signature)",
    )
    .option('--content-type <type>', 'content type of --input (default from the handler)')
    .optionsGroup('Search and output:')
    .option('--max-batch-size <n>', 'largest batch size tried', positiveInteger, 8)
    .option('--serve-bin <path>', "the serve CLI (default: this workspace's @marina/serve)")
    .option('--json', 'print the result as JSON', false)
    .addHelpText(
      'after',
      `
Examples:
  marina-bench tune model_store/resnet-18.mar
  marina-bench tune --budget-s 600 --input kitten.jpg model_store/resnet-18.mar`,
    )
    .action(
      async (
        archivePath: string,
        flags: {
          budgetS: number;
          input?: string;
          contentType?: string;
          maxBatchSize: number;
          serveBin?: string;
          json: boolean;
        },
      ) => {
        const result = await tuneArchive({
          archivePath,
          budgetS: flags.budgetS,
          inputPath: flags.input,
          contentType: flags.contentType,
          maxBatchSize: flags.maxBatchSize,
          serveBin: flags.serveBin,
          onProgress: (message) => {
            if (!flags.json) process.stderr.write(`  ${message}\n`);
          },
        });
        process.stdout.write(flags.json ? `${JSON.stringify(result, null, 2)}\n` : `${formatTuneResult(result)}\n`);
      },
    );
  return program;
}

/** Runs the CLI; typed errors become one line on stderr and exit code 1. */
export async function runCli(argv: readonly string[]): Promise<void> {
  try {
    await createProgram().parseAsync([...argv]);
  } catch (error) {
    if (error instanceof CommanderError) {
      process.exitCode = error.exitCode;
      return;
    }
    if (isMarinaError(error)) {
      process.stderr.write(`marina-bench: ${error.code}: ${error.message}\n`);
      process.exitCode = 1;
      return;
    }
    throw error;
  }
}
