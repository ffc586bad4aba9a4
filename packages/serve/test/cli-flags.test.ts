import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { createProgram, type ServeCommand } from '../src/cli.ts';
import { MARINA_VERSION } from '../src/version.ts';

async function parse(args: string[]): Promise<ServeCommand> {
  let command: ServeCommand | undefined;
  const program = createProgram({
    run: (parsed) => {
      command = parsed;
    },
  }).exitOverride();
  program.configureOutput({ writeErr: () => undefined, writeOut: () => undefined });
  await program.parseAsync(args, { from: 'user' });
  if (!command) throw new Error('the action did not run');
  return command;
}

describe('serve launcher flags', () => {
  it('starts in the background by default, with or without --start', async () => {
    expect(await parse([])).toEqual({ mode: 'start', foreground: false, cliOptions: {} });
    expect(await parse(['--start'])).toEqual({ mode: 'start', foreground: false, cliOptions: {} });
  });

  it("takes TorchServe's tutorial command line", async () => {
    expect(
      await parse(['--start', '--disable-token-auth', '--enable-model-api', '--ts-config', 'config.properties']),
    ).toEqual({
      mode: 'start',
      foreground: false,
      cliOptions: { disableTokenAuth: true, enableModelApi: true, tsConfig: 'config.properties' },
    });
  });

  it('takes every start option', async () => {
    const command = await parse([
      '--foreground',
      '--model-store',
      'store',
      '--models',
      'a=a.mar',
      'b.mar',
      '--ncs',
      '--log-config',
      'log4j2.xml',
    ]);
    expect(command).toEqual({
      mode: 'start',
      foreground: true,
      cliOptions: {
        foreground: true,
        modelStore: 'store',
        models: ['a=a.mar', 'b.mar'],
        ncs: true,
        logConfig: 'log4j2.xml',
      },
    });
  });

  it("takes TorchServe's --workflow-store and --plugins-path/--ppath", async () => {
    expect(await parse(['--workflow-store', 'wf', '--plugins-path', 'plugins'])).toMatchObject({
      cliOptions: { workflowStore: 'wf', pluginsPath: 'plugins' },
    });
    expect(await parse(['--ppath', 'p'])).toMatchObject({ cliOptions: { pluginsPath: 'p' } });
  });

  it('exits 1 from the real bin when the --log-config file does not exist, as TorchServe', { timeout: 60_000 }, () => {
    const bin = fileURLToPath(new URL('../bin/serve.js', import.meta.url));
    const dir = mkdtempSync(join(tmpdir(), 'marina-log-config-'));
    try {
      const result = spawnSync(
        process.execPath,
        [bin, '--foreground', '--model-store', dir, '--ncs', '--log-config', join(dir, 'missing-log4j2.xml')],
        { encoding: 'utf8', cwd: dir, env: { ...process.env, LOG_LOCATION: join(dir, 'logs'), TMPDIR: dir } },
      );
      expect(result.status).toBe(1);
      expect(result.stderr).toContain('MARINA_ERR_CONFIG_FILE_UNREADABLE: --log-config file not found');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('accepts the short aliases --dt and --no-config-snapshots', async () => {
    expect(await parse(['--dt', '--no-config-snapshots'])).toMatchObject({
      cliOptions: { disableTokenAuth: true, ncs: true },
    });
  });

  it('recognises --stop and -v/--version', async () => {
    expect(await parse(['--stop'])).toEqual({ mode: 'stop' });
    expect(await parse(['-v'])).toEqual({ mode: 'version' });
    expect(await parse(['--version'])).toEqual({ mode: 'version' });
  });

  it('refuses contradicting modes with a stable code', async () => {
    await expect(parse(['--start', '--stop'])).rejects.toMatchObject({ code: 'MARINA_ERR_CLI_ARGS_INVALID' });
  });

  it('rejects unknown flags and stray arguments', async () => {
    await expect(parse(['--bogus'])).rejects.toMatchObject({ code: 'commander.unknownOption' });
    await expect(parse(['stray'])).rejects.toMatchObject({ code: 'commander.excessArguments' });
    await expect(parse(['--ts-config'])).rejects.toMatchObject({ code: 'commander.optionMissingArgument' });
  });

  it('prints "Marina Version is X" from the real bin', { timeout: 60_000 }, () => {
    const bin = fileURLToPath(new URL('../bin/serve.js', import.meta.url));
    const result = spawnSync(process.execPath, [bin, '--version'], { encoding: 'utf8' });
    expect(result.status).toBe(0);
    expect(result.stdout).toBe(`Marina Version is ${MARINA_VERSION}\n`);
  });
});
