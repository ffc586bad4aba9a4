import { Command, CommanderError, InvalidArgumentError, Option } from 'commander';
import cliProgress from 'cli-progress';
import { experimentNames, type ExperimentName } from './bench-result.ts';
import { isMarinaError } from '@marina/errors';
import { benchModelNames, type BenchModelName } from './model-assets.ts';
import { formatTable } from './report/format-table.ts';
import { runBench, type BenchMode } from './run-bench.ts';
import type { BenchProgressEvent } from './experiments/experiment-context.ts';

function positiveInteger(value: string): number {
  const parsed = Number(value);
  if (!Number.isInteger(parsed) || parsed < 1) throw new InvalidArgumentError(`expected a whole number of 1 or more, got '${value}'`);
  return parsed;
}

function experimentList(value: string): ExperimentName[] {
  const names = value.split(',').map((s) => s.trim()).filter(Boolean);
  const unknown = names.filter((n) => !experimentNames.includes(n as ExperimentName));
  if (unknown.length > 0) throw new InvalidArgumentError(`unknown experiment(s) ${unknown.join(', ')}; choose from ${experimentNames.join(', ')}`);
  return names as ExperimentName[];
}

/** Progress on stderr: a cli-progress bar on a terminal, one line per phase otherwise (CI logs). */
function createProgressPrinter(stream: NodeJS.WriteStream): { onProgress: (event: BenchProgressEvent) => void; stop: () => void } {
  const isTty = stream.isTTY === true;
  const bar = isTty ? new cliProgress.SingleBar({ stream, format: '{bar} {percentage}% | {value}/{total} | {label}', hideCursor: true, clearOnComplete: true }, cliProgress.Presets.shades_classic) : undefined;
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
    .description('Measure the case for a central server: ceiling, decentralized jobs, centralized/batched/multi-worker server and a concurrency sweep, side by side.')
    .addOption(new Option('--model <name>', 'model to benchmark').choices([...benchModelNames]))
    .option('--quick', 'ResNet-18, fewer images, shorter sweep: a few minutes on 2 cores', false)
    .option('--smoke', 'tiny model, seconds: keeps the bench working in CI', false)
    .option('--images <n>', 'requests per server experiment', positiveInteger)
    .option('--concurrency <n>', 'client concurrency of the server experiments (default 100; smoke 8)', positiveInteger)
    .option('--experiments <list>', `comma-separated subset of ${experimentNames.join(',')}`, experimentList)
    .option('--out <dir>', 'output folder (default bench-results/<timestamp>; also copied to bench-results/latest)')
    .option('--cache-dir <dir>', 'where generated models and archives are kept (default ~/.cache/marina/bench)')
    .option('--serve-bin <path>', 'the serve CLI to benchmark (default: this workspace\'s @marina/serve)')
    .action(async (flags: { model?: BenchModelName; quick: boolean; smoke: boolean; images?: number; concurrency?: number; experiments?: ExperimentName[]; out?: string; cacheDir?: string; serveBin?: string }) => {
      const mode: BenchMode = flags.smoke ? 'smoke' : flags.quick ? 'quick' : 'full';
      const progress = createProgressPrinter(process.stderr);
      try {
        const { result, files } = await runBench({
          mode, model: flags.model, images: flags.images, concurrency: flags.concurrency, experiments: flags.experiments,
          outDir: flags.out, cacheDir: flags.cacheDir, serveBin: flags.serveBin, onProgress: progress.onProgress,
        });
        progress.stop();
        const m = result.machine;
        process.stdout.write(`\n${result.model} on ${m.cpuModel}, ${m.cores} cores, Node ${m.nodeVersion}, onnxruntime-node ${m.onnxruntimeVersion}\n\n`);
        process.stdout.write(formatTable(result.rows) + '\n\n');
        for (const t of result.targets) {
          const verdict = t.isMet === undefined ? 'not measured' : t.isMet ? 'met' : 'MISSED';
          process.stdout.write(`[${verdict}] ${t.name}: ${t.measured}${t.isMet === false ? `\n    ${t.explanation}` : ''}\n`);
        }
        process.stdout.write(`\nreport: ${files.markdownPath}\ncsv:    ${files.csvPath}\nchart:  ${files.chartPath}\nlatest: ${files.latestDir}\n`);
      } finally {
        progress.stop();
      }
    });
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
