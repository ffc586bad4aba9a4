/**
 * The README's shell blocks, run verbatim. Every ```sh block must be marked by the comment line
 * before it: `<!-- readme-test: run -->` (this test runs it) or `<!-- readme-test: skip: <reason> -->`.
 * The runnable blocks are one walk-through: they run in order, in one bash, starting in the clone's
 * root, with TMPDIR pointing at a fresh folder (the first block `cd`s into a `mktemp -d` there) and
 * without the node_modules/.bin folders that pnpm puts on a script's PATH, so the README's own PATH
 * line is what makes the CLIs found. Needs the ports 8080-8082 of 127.0.0.1, as the README does.
 */
import { spawn, spawnSync } from 'node:child_process';
import { readdirSync, readFileSync, rmSync } from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { createProgram as createArchiverProgram } from '@marina/model-archiver';
import { createProgram as createServeProgram } from '@marina/serve';
import { makeTempDir, repoRoot } from './helpers.ts';

interface ShellBlock {
  line: number;
  marker: 'run' | 'skip' | undefined;
  text: string;
}

/** The ```sh blocks of a Markdown text with the readme-test marker of the line before each. */
function shellBlocks(markdown: string): ShellBlock[] {
  const lines = markdown.split('\n');
  const blocks: ShellBlock[] = [];
  for (let i = 0; i < lines.length; i++) {
    if (!/^```(sh|bash|shell)\s*$/.test(lines[i]!)) continue;
    const end = lines.findIndex((line, j) => j > i && line.startsWith('```'));
    if (end < 0) throw new Error(`README.md:${i + 1}: unterminated code block`);
    const previous = i > 0 ? lines[i - 1]! : '';
    const match = /^<!-- readme-test: (run|skip: \S.*) -->$/.exec(previous.trim());
    const marker = match ? (match[1] === 'run' ? 'run' : 'skip') : undefined;
    blocks.push({ line: i + 1, marker, text: lines.slice(i + 1, end).join('\n') });
    i = end;
  }
  return blocks;
}

const readme = readFileSync(path.join(repoRoot, 'README.md'), 'utf8');
const blocks = shellBlocks(readme);
const workDir = makeTempDir('readme');
/** PATH without the node_modules/.bin folders of pnpm's script runner. */
const bareEnvPath = (process.env.PATH ?? '')
  .split(path.delimiter)
  .filter((dir) => !dir.includes(`node_modules${path.sep}.bin`))
  .join(path.delimiter);
const env: NodeJS.ProcessEnv = { ...process.env, PATH: bareEnvPath, TMPDIR: workDir };
// As on a user's machine: Marina itself must turn onnxruntime's telemetry (and its temp files) off.
delete env.ORT_DISABLE_TELEMETRY;

afterAll(() => {
  // A failed run may leave its background server: stop it (its pid file is under this TMPDIR).
  spawnSync(process.execPath, [path.join(repoRoot, 'packages/serve/bin/serve.js'), '--stop'], {
    cwd: workDir,
    env,
    stdio: 'ignore',
  });
  rmSync(workDir, { recursive: true, force: true });
});

/** The README's text from the heading `start` to the next heading of the same or a higher level. */
function section(start: string): string {
  const from = readme.indexOf(`\n${start}\n`);
  expect(from, start).toBeGreaterThan(0);
  const level = /^#+/.exec(start)![0].length;
  const next = readme.slice(from + start.length + 2).search(new RegExp(`\\n#{1,${level}} `));
  return readme.slice(from, next < 0 ? undefined : from + start.length + 2 + next);
}

/** The long flags named in backticks in `text`. */
function flagsIn(text: string): string[] {
  return [...new Set([...text.matchAll(/`[^`\n]*`/g)].flatMap((m) => m[0].match(/--[a-z][a-z-]*/g) ?? []))];
}

describe('README flags', () => {
  it('names only serve flags that serve --help lists', () => {
    const serveText = section('### Serve and predict');
    const flags = flagsIn(serveText.slice(serveText.indexOf("`serve` takes TorchServe's launcher flags")));
    expect(flags).toContain('--dt');
    const help = createServeProgram({ run: () => undefined }).helpInformation();
    expect(flags.filter((flag) => !new RegExp(`${flag}\\b`).test(help))).toEqual([]);
  });

  it('names only model-archiver flags that model-archiver --help lists', () => {
    const flags = flagsIn(section('### Archive'));
    expect(flags.length).toBeGreaterThan(8);
    const help = createArchiverProgram().helpInformation();
    expect(flags.filter((flag) => !new RegExp(`${flag}\\b`).test(help))).toEqual([]);
  });
});

describe('README shell blocks', () => {
  it('marks every shell block as run or skip (with a reason)', () => {
    expect(blocks.length).toBeGreaterThan(5);
    expect(blocks.filter((block) => block.marker === undefined).map((block) => `README.md:${block.line}`)).toEqual([]);
  });

  it('runs the runnable blocks verbatim, in order, in a temporary folder', async () => {
    const runnable = blocks.filter((block) => block.marker === 'run');
    expect(runnable.length).toBeGreaterThanOrEqual(6);
    const script = ['set -euo pipefail', ...runnable.map((block) => `# README.md:${block.line}\n${block.text}`)].join(
      '\n',
    );
    const result = await new Promise<{ code: number | null; output: string }>((resolve, reject) => {
      const child = spawn('bash', ['-c', script], { cwd: repoRoot, env, stdio: ['ignore', 'pipe', 'pipe'] });
      let output = '';
      child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
      child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
      child.on('error', reject);
      child.on('close', (code) => resolve({ code, output }));
    });
    expect(result.output).not.toMatch(/command not found|MARINA_ERR_/);
    expect(result.code, result.output).toBe(0);
    expect(result.output).toMatch(/resnet-18\.onnx: 46\.7 MB/);
    expect(result.output).toMatch(/resnet-18\.mar \(zip\): will serve/);
    expect(result.output).toMatch(/Model loaded: resnet-18 \(version 1\.0\)/);
    // The prediction: image_classifier's top-5, five labels with probabilities.
    const top5 = /\{\n(\s+"[^"]+": [0-9.e-]+,?\n){5}\}/.exec(result.output);
    expect(top5, result.output).not.toBeNull();
    expect(result.output).toContain('Model \\"resnet-18\\" Version: 1.0 registered with 1 initial workers');
    expect(result.output).toContain('Processing worker updates...');
    expect(result.output).toMatch(/"modelName": "resnet-18"/);
    expect(result.output.match(/Marina has stopped\./g)).toHaveLength(2);
    // The prediction is a line of the access log, with the request id.
    expect(result.output).toMatch(
      /\[INFO \] [0-9a-f-]{36} ACCESS_LOG - \/127\.0\.0\.1:\d+ "POST \/predictions\/resnet-18 HTTP\/1\.1" 200 \d+\n/,
    );
    // Nothing of onnxruntime's telemetry (mat-debug-<pid>.log, .ses) in the temp folder.
    expect(readdirSync(workDir).filter((name) => /^mat-debug-|^\.ses$/.test(name))).toEqual([]);
  }, 600_000);
});
