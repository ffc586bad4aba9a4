import { Command, CommanderError, InvalidArgumentError } from 'commander';
import { isMarinaError } from '@marina/errors';
import { DEFAULT_MODELS, GENERATABLE_MODELS, generateModels, type GeneratedFile } from './generate-models.ts';

/** Where the CLI writes; tests pass collectors. */
export interface CliOutput {
  out: (text: string) => void;
  err: (text: string) => void;
}

const processOutput: CliOutput = {
  out: (text) => process.stdout.write(text),
  err: (text) => process.stderr.write(text),
};

function parseSeed(value: string): number {
  const seed = Number(value);
  if (!/^\d+$/.test(value) || !Number.isSafeInteger(seed) || seed > 0xffffffff) {
    throw new InvalidArgumentError(`'${value}' is not an integer from 0 to 4294967295.`);
  }
  return seed;
}

function formatBytes(bytes: number): string {
  if (bytes >= 1e6) return `${(bytes / 1e6).toFixed(1)} MB`;
  if (bytes >= 1e3) return `${(bytes / 1e3).toFixed(1)} kB`;
  return `${bytes} B`;
}

function describe(file: GeneratedFile): string {
  const verb = file.status === 'written' ? 'wrote  ' : 'skipped';
  const data = file.dataPath ? ` (+ ${file.dataPath})` : '';
  const params = file.parameterCount !== undefined ? `, ${file.parameterCount.toLocaleString('en-US')} parameters` : '';
  const reason =
    file.status === 'skipped'
      ? ' (already up to date; --force rewrites it)'
      : ` in ${(file.durationMs / 1000).toFixed(2)} s`;
  return `${verb} ${file.path}${data}: ${formatBytes(file.bytes)}${params}${reason}\n`;
}

/** Builds the `marina-models` program. Only parses options and calls `generateModels`. */
export function createProgram(output: CliOutput = processOutput): Command {
  const program = new Command('marina-models')
    .description("Writes Marina's example ONNX models, labels and a sample image (no downloads).")
    .configureOutput({ writeOut: output.out, writeErr: output.err })
    .addHelpText(
      'after',
      `
Examples:
  # a ResNet-18, its class names and a sample image, in the current folder
  marina-models generate --out . --models resnet-18
  # ResNet-152 with its weights in a separate, memory-mappable file
  marina-models generate --out models --models resnet-152 --external-data`,
    );
  program
    .command('generate')
    .description('write <out>/<model>.onnx for each model, plus index_to_name.json and kitten.jpg')
    .optionsGroup('What to write:')
    .requiredOption('--out <dir>', 'output directory (created if missing)')
    .option('--models <list>', `comma-separated, from ${GENERATABLE_MODELS.join(', ')}`, DEFAULT_MODELS.join(','))
    .option('--seed <n>', 'seed for the random weights', parseSeed, 42)
    .optionsGroup('How:')
    .option('--external-data', 'write ResNet weights to <model>.onnx.data (page-aligned, memory-mappable)', false)
    .option('--force', 'rewrite files even when an identical one exists', false)
    .addHelpText(
      'after',
      `
Examples:
  marina-models generate --out . --models resnet-18
  marina-models generate --out models --models tiny,tiny-tensor --seed 7 --force`,
    )
    .action(async (opts: { out: string; models: string; seed: number; externalData: boolean; force: boolean }) => {
      const started = performance.now();
      const files = await generateModels({
        outDir: opts.out,
        models: opts.models
          .split(',')
          .map((m) => m.trim())
          .filter(Boolean),
        seed: opts.seed,
        isExternalData: opts.externalData,
        isForced: opts.force,
        onProgress: (file) => output.out(describe(file)),
      });
      const written = files.filter((f) => f.status === 'written').length;
      output.out(
        `done: ${written} written, ${files.length - written} skipped in ${((performance.now() - started) / 1000).toFixed(2)} s\n`,
      );
    });
  return program;
}

/**
 * Runs the CLI and returns the exit code: 0 on success, 1 for a Marina error (printed with
 * its code), commander's code for usage errors. Never calls `process.exit`.
 */
export async function runCli(argv: readonly string[], output: CliOutput = processOutput): Promise<number> {
  const program = createProgram(output).exitOverride();
  for (const command of program.commands) command.exitOverride();
  try {
    await program.parseAsync([...argv], { from: 'user' });
    return 0;
  } catch (error) {
    if (error instanceof CommanderError) return error.exitCode;
    if (isMarinaError(error)) {
      output.err(`marina-models: ${error.code}: ${error.message}\n`);
      return 1;
    }
    output.err(`marina-models: unexpected error: ${(error as Error).stack ?? String(error)}\n`);
    return 1;
  }
}
