import { PassThrough } from 'node:stream';
import { CommanderError } from 'commander';
import { createProgram } from '../src/cli.ts';

export interface CliRun {
  exitCode: number;
  stdout: string;
  stderr: string;
}

/** Drives `createProgram().exitOverride()` with argv (no 'node', 'bin' prefix); `isTTY` fakes a terminal on stderr. */
export async function runCli(argv: string[], options: { cwd: string; isTTY?: boolean }): Promise<CliRun> {
  let stdout = '';
  let stderr = '';
  const err = Object.assign(new PassThrough(), { isTTY: options.isTTY === true, columns: 100 });
  err.on('data', (chunk: Buffer) => {
    stderr += chunk.toString();
  });
  const program = createProgram({
    stdout: { write: (text: string) => (stdout += text) },
    stderr: err,
    cwd: options.cwd,
  }).exitOverride();
  let exitCode = 0;
  try {
    await program.parseAsync(argv, { from: 'user' });
  } catch (error) {
    if (!(error instanceof CommanderError)) throw error;
    exitCode = error.exitCode;
  }
  await new Promise((resolve) => setImmediate(resolve));
  return { exitCode, stdout, stderr };
}
