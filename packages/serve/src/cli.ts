import { Command, CommanderError, Option } from 'commander';
import { configError } from './config/config-errors.ts';
import type { ServeCliOptions } from './config/serve-cli-options.ts';
import type { ServeCommand } from './serve-command.ts';

export type { ServeCommand };

interface RawFlags {
  start?: boolean;
  stop?: boolean;
  version?: boolean;
  cleanCache?: boolean;
  tsConfig?: string;
  modelStore?: string;
  models?: string[];
  foreground?: boolean;
  ncs?: boolean;
  configSnapshots?: boolean;
  disableTokenAuth?: boolean;
  dt?: boolean;
  enableModelApi?: boolean;
  logConfig?: string;
  workflowStore?: string;
  pluginsPath?: string;
  ppath?: string;
}

/**
 * The `serve` program with TorchServe's launcher flags. Parsing only: the action normalises the
 * flags into a ServeCommand and hands it to `run` (main.ts's runServeCommand in the real CLI).
 * Tests call `createProgram({ run }).exitOverride().parseAsync([...], { from: 'user' })`.
 *
 * @throws MARINA_ERR_CLI_ARGS_INVALID (from the action) for contradicting mode flags.
 */
export function createProgram(options: { run: (command: ServeCommand) => Promise<void> | void }): Command {
  const program = new Command('serve')
    .description('Serve ONNX models from TorchServe-style .mar archives with TorchServe-compatible config and APIs.')
    .helpOption('-h, --help', 'show this help')
    .optionsGroup('Start and stop:')
    .option('--start', 'start the model server (the default when neither --stop nor --version is given)')
    .option('--foreground', 'run in this terminal instead of the background')
    .option('--stop', 'stop a model server started in the background')
    .option('-v, --version', 'print the Marina version')
    .option(
      '--clean-cache',
      'remove every extracted archive and optimised model copy under $TMPDIR/marina (refused while a server runs)',
    )
    .optionsGroup('Configuration and models:')
    .option('--ts-config <file>', 'configuration file (config.properties format); TS_CONFIG_FILE wins over it')
    .option('--model-store <dir>', 'folder holding the model archives (overrides model_store)')
    .option(
      '--models <model...>',
      'models to load at start-up: all, file.mar, name=file.mar or URLs, space separated (overrides load_models)',
    )
    .option('--ncs', 'do not read or write config snapshots')
    .option('--no-config-snapshots', 'same as --ncs')
    .optionsGroup('Security:')
    .option('--disable-token-auth', 'turn token authorization off')
    .option('--dt', 'same as --disable-token-auth')
    .option('--enable-model-api', 'allow registering and unregistering models through the management API')
    .optionsGroup("Accepted for TorchServe's scripts:")
    .option(
      '--log-config <file>',
      "log4j2 file: must exist (as TorchServe); Marina writes TorchServe's log files under LOG_LOCATION without it",
    )
    .option('--workflow-store <dir>', 'folder of workflow archives (workflow_store; workflows are not implemented yet)')
    .option('--plugins-path <dir>', 'folder of TorchServe plugins (plugins_path; Java plugins cannot run in Marina)')
    .addOption(new Option('--ppath <dir>', 'same as --plugins-path').hideHelp())
    .addHelpText(
      'after',
      `
Examples:
  # serve one archive in the background, with token authorization on
  serve --start --model-store model_store --models resnet-18.mar
  # serve what a TorchServe config.properties says (workers, batching, addresses)
  serve --start --ts-config config.properties
  # stop it, letting the requests in flight finish
  serve --stop

Every flag and key: docs/reference/cli.md and docs/reference/configuration.md`,
    )
    .allowExcessArguments(false)
    .action(async (flags: RawFlags) => {
      await options.run(toServeCommand(flags));
    });
  return program;
}

/** Runs the CLI for `argv` (process.argv form); bin.ts calls this. */
export async function runCli(argv: string[]): Promise<void> {
  const { runServeCommand, exitProcess, exitWithError } = await import('./main.ts');
  const program = createProgram({ run: runServeCommand }).exitOverride();
  try {
    await program.parseAsync(argv);
  } catch (error) {
    if (error instanceof CommanderError) exitProcess(error.exitCode);
    exitWithError(error);
  }
}

function toServeCommand(flags: RawFlags): ServeCommand {
  const modes = (['start', 'stop', 'version', 'cleanCache'] as const).filter((mode) => flags[mode]);
  if (modes.length > 1) {
    throw configError.MARINA_ERR_CLI_ARGS_INVALID(
      `--${modes.map((m) => (m === 'cleanCache' ? 'clean-cache' : m)).join(' and --')} cannot be used together: use --start to start, --stop to stop, --version to print the version, --clean-cache to empty the caches.`,
    );
  }
  if (flags.version) return { mode: 'version' };
  if (flags.stop) return { mode: 'stop' };
  if (flags.cleanCache) return { mode: 'clean-cache' };
  const cliOptions: ServeCliOptions = {};
  if (flags.tsConfig !== undefined) cliOptions.tsConfig = flags.tsConfig;
  if (flags.modelStore !== undefined) cliOptions.modelStore = flags.modelStore;
  if (flags.models !== undefined) cliOptions.models = flags.models;
  if (flags.ncs || flags.configSnapshots === false) cliOptions.ncs = true;
  if (flags.disableTokenAuth || flags.dt) cliOptions.disableTokenAuth = true;
  if (flags.enableModelApi) cliOptions.enableModelApi = true;
  if (flags.logConfig !== undefined) cliOptions.logConfig = flags.logConfig;
  if (flags.workflowStore !== undefined) cliOptions.workflowStore = flags.workflowStore;
  const pluginsPath = flags.pluginsPath ?? flags.ppath;
  if (pluginsPath !== undefined) cliOptions.pluginsPath = pluginsPath;
  if (flags.foreground) cliOptions.foreground = true;
  return { mode: 'start', foreground: flags.foreground === true, cliOptions };
}
