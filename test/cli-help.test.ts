/**
 * Each CLI's --help (and each subcommand's) groups its flags under headings and ends with examples,
 * as the CLI reference (docs/reference/cli.md, generated from the same programs) shows them.
 */
import { describe, expect, it } from 'vitest';
import { createProgram as createArchiverProgram } from '@marina/model-archiver';
import { createProgram as createServeProgram } from '@marina/serve';
import { createProgram as createBenchProgram } from '../packages/bench/src/cli.ts';
import { createProgram as createModelsProgram } from '../packages/model-zoo/src/cli.ts';

type Command = ReturnType<typeof createArchiverProgram>;

/** The full --help text of `command`, the text added after the options included. */
function helpText(command: Command): string {
  let text = '';
  command.configureOutput({ writeOut: (chunk) => (text += chunk), writeErr: (chunk) => (text += chunk) });
  command.outputHelp();
  return text;
}

/** Every command of the four CLIs that takes flags of its own, by its full name. */
function commands(): Array<[string, Command]> {
  const all: Array<[string, Command]> = [];
  const add = (command: Command, parents: string[]) => {
    const name = [...parents, command.name()].join(' ');
    if (command.options.length > 1) all.push([name, command]);
    for (const sub of command.commands) add(sub as Command, [...parents, command.name()]);
  };
  for (const program of [
    createServeProgram({ run: () => undefined }),
    createArchiverProgram(),
    createModelsProgram(),
    createBenchProgram(),
  ]) {
    add(program as Command, []);
  }
  return all;
}

describe('CLI help', () => {
  it.each(commands())('%s --help groups its flags and ends with two or three examples', (name, command) => {
    const text = helpText(command);
    const headings = [...text.matchAll(/^([A-Z][^\n:]*):$/gm)].map((m) => m[1]);
    const flagGroups = headings.filter((h) => !['Usage', 'Options', 'Commands', 'Arguments', 'Examples'].includes(h!));
    expect(flagGroups.length, `${name}: ${headings.join(', ')}`).toBeGreaterThanOrEqual(2);
    const examples = text.slice(text.lastIndexOf('\nExamples:\n'));
    expect(text.includes('\nExamples:\n'), name).toBe(true);
    const exampleCommands = examples.split('\n').filter((line) => line.startsWith(`  ${name.split(' ')[0]}`));
    expect(exampleCommands.length, `${name}: ${examples}`).toBeGreaterThanOrEqual(2);
    expect(exampleCommands.length, `${name}: ${examples}`).toBeLessThanOrEqual(3);
  });
});
