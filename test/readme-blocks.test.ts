/**
 * Every command in the docs works: the shell blocks of README.md and of every Markdown file under
 * docs/, run verbatim. Every ```sh block must be marked by the comment line before it:
 * `<!-- readme-test: run -->` (this test runs it) or `<!-- readme-test: skip: <reason> -->`.
 *
 * The runnable blocks of one page are one walk-through: they run in order, in one bash, starting in
 * the clone's root, with TMPDIR pointing at a folder of this test run (so a page's `mktemp -d` lands
 * there) and without the node_modules/.bin folders that pnpm puts on a script's PATH. A page whose
 * first runnable block does not set PATH itself starts as docs/guides/getting-started.md says every
 * page does: with the clone's CLIs on the PATH, in a fresh scratch folder. Pages run one after another.
 * The largest model any page uses is the generated ResNet-18 (seeded: the same 46.7 MB on every page,
 * written in about a second, nothing downloaded); each page archives and serves its own copy, so that
 * every page also works on its own, as a reader runs it.
 * Needs the ports 8080-8082, 8090-8092, 7070-7071 and 7090-7091 of 127.0.0.1, as the pages do.
 *
 * The same files' relative links and #anchors are checked here too.
 */
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import path from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { createProgram as createArchiverProgram } from '@marina/model-archiver';
import { makeTempDir, repoRoot } from './helpers.ts';

interface ShellBlock {
  line: number;
  marker: 'run' | 'skip' | undefined;
  text: string;
}

/** The ```sh blocks of a Markdown text with the readme-test marker of the line before each. */
function shellBlocks(markdown: string, file: string): ShellBlock[] {
  const lines = markdown.split('\n');
  const blocks: ShellBlock[] = [];
  for (let i = 0; i < lines.length; i++) {
    const fence = /^(\s*)```(\S*)\s*$/.exec(lines[i]!);
    if (!fence) continue;
    const end = lines.findIndex((line, j) => j > i && line.trim().startsWith('```'));
    if (end < 0) throw new Error(`${file}:${i + 1}: unterminated code block`);
    if (/^(sh|bash|shell|console)$/.test(fence[2]!)) {
      const previous = i > 0 ? lines[i - 1]! : '';
      const match = /^<!-- readme-test: (run|skip: \S.*) -->$/.exec(previous.trim());
      const marker = match ? (match[1] === 'run' ? 'run' : 'skip') : undefined;
      blocks.push({ line: i + 1, marker, text: lines.slice(i + 1, end).join('\n') });
    }
    i = end;
  }
  return blocks;
}

/** README.md and every Markdown file under docs/, as paths relative to the clone's root. */
function docFiles(): string[] {
  const found: string[] = [];
  const walk = (dir: string) => {
    for (const entry of readdirSync(path.join(repoRoot, dir), { withFileTypes: true })) {
      const relative = path.join(dir, entry.name);
      if (entry.isDirectory()) walk(relative);
      else if (entry.name.endsWith('.md')) found.push(relative);
    }
  };
  walk('docs');
  return ['README.md', ...found.sort()];
}

const files = docFiles();
const texts = new Map(files.map((file) => [file, readFileSync(path.join(repoRoot, file), 'utf8')]));
const workDir = makeTempDir('docs-blocks');
/** PATH without the node_modules/.bin folders of pnpm's script runner. */
const bareEnvPath = (process.env.PATH ?? '')
  .split(path.delimiter)
  .filter((dir) => !dir.includes(`node_modules${path.sep}.bin`))
  .join(path.delimiter);
const env: NodeJS.ProcessEnv = { ...process.env, PATH: bareEnvPath, TMPDIR: workDir };
// As on a user's machine: Marina itself must turn onnxruntime's telemetry (and its temp files) off.
delete env.ORT_DISABLE_TELEMETRY;
/** What a page that does not set PATH itself starts with (docs/guides/getting-started.md's first block). */
const PREAMBLE = 'export PATH="$PWD/node_modules/.bin:$PATH"\ncd "$(mktemp -d)"';

/** Stops every server a page left running: each pid file under this run's folder names its TMPDIR. */
function stopLeftoverServers(): void {
  const pidFiles: string[] = [];
  const walk = (dir: string, depth: number) => {
    if (depth > 4 || !existsSync(dir)) return;
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const full = path.join(dir, entry.name);
      if (entry.isDirectory() && entry.name !== 'marina' && entry.name !== 'node_modules') walk(full, depth + 1);
      else if (entry.name === '.marina_server.pid') pidFiles.push(full);
    }
  };
  walk(workDir, 0);
  for (const pidFile of pidFiles) {
    spawnSync(process.execPath, [path.join(repoRoot, 'packages/serve/bin/serve.js'), '--stop'], {
      cwd: workDir,
      env: { ...env, TMPDIR: path.dirname(pidFile) },
      stdio: 'ignore',
    });
  }
}

afterEach(stopLeftoverServers);
afterAll(() => {
  stopLeftoverServers();
  rmSync(workDir, { recursive: true, force: true });
});

/** Runs one page's runnable blocks as one bash script; resolves with its exit code and output. */
function runPage(file: string, blocks: ShellBlock[]): Promise<{ code: number | null; output: string }> {
  const setsPath = blocks[0]!.text.includes('export PATH=');
  const script = [
    'set -euo pipefail',
    ...(setsPath ? [] : [`# the start every page assumes (docs/guides/getting-started.md)\n${PREAMBLE}`]),
    ...blocks.map((block) => `# ${file}:${block.line}\n${block.text}`),
  ].join('\n');
  return new Promise((resolve, reject) => {
    const child = spawn('bash', ['-c', script], { cwd: repoRoot, env, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, output }));
  });
}

/** The top-5 answer of image_classifier, pretty-printed: five labels with probabilities. */
const TOP5 = /\{\n(\s+"[^"]+": [0-9.e-]+,?\n){5}\}/;

/** What each page's walk-through must print, beyond exiting 0 without `command not found` or an error code. */
const expectedOutput: Record<string, RegExp[]> = {
  'README.md': [/Model loaded: resnet-18 \(version 1\.0\)/, TOP5, /Marina has stopped\./],
  'docs/guides/getting-started.md': [
    /resnet-18\.onnx: 46\.7 MB/,
    /resnet-18\.mar \(zip\): will serve/,
    /Model loaded: resnet-18 \(version 1\.0\)/,
    TOP5,
    // The prediction is a line of the access log, with the request id.
    /\[INFO \] [0-9a-f-]{36} ACCESS_LOG - \/127\.0\.0\.1:\d+ "POST \/predictions\/resnet-18 HTTP\/1\.1" 200 \d+\n/,
  ],
  'docs/guides/management.md': [
    /Model \\"resnet-18\\" Version: 1\.0 registered with 1 initial workers/,
    /Processing worker updates\.\.\./,
    /"modelName": "resnet-18"/,
  ],
  'docs/guides/serving.md': [/^2$/m, /"batchSize": 8/, /"maxBatchDelay": 20/, /"Healthy"[\s\S]*"Healthy"/],
  'docs/guides/protocols.md': [
    /"name":"mixed","versions":\["1\.0"\],"platform":"onnxruntime_onnx"/,
    /"outputs":\[\{"name":"output","datatype":"FP32","shape":\[1,4\],"data":\[3,5,7,9\]\}\]/,
  ],
  'docs/guides/custom-handler.md': [/"result": \[\s*3,\s*5,\s*7,\s*9\s*\]/],
  'docs/guides/versions-in-production.md': [
    /"weights": \{\s*"1\.0": 90,\s*"2\.0": 10\s*\}/,
    // One sticky key, three requests, one version.
    /(x-marina-model-version: (1\.0|2\.0)\r?\n)(x-marina-model-version: \2\r?\n){2}/i,
    /"traffic": \{\s*"weight": 0,/,
    /"weights": \{\s*"2\.0": 100\s*\}\s*\}\s*\nMarina has stopped\./,
  ],
};

describe('shell blocks of README.md and docs/', () => {
  it('marks every shell block as run or skip (with a reason)', () => {
    const unmarked = files.flatMap((file) =>
      shellBlocks(texts.get(file)!, file)
        .filter((block) => block.marker === undefined)
        .map((block) => `${file}:${block.line}`),
    );
    expect(unmarked).toEqual([]);
  });

  it('has a walk-through for every page that promises one', () => {
    for (const file of Object.keys(expectedOutput)) {
      expect(shellBlocks(texts.get(file)!, file).filter((b) => b.marker === 'run').length, file).toBeGreaterThan(0);
    }
  });

  const runnable = files
    .map((file) => ({ file, blocks: shellBlocks(texts.get(file)!, file).filter((b) => b.marker === 'run') }))
    .filter(({ blocks }) => blocks.length > 0);

  it.each(runnable)(
    'runs the runnable blocks of $file verbatim, in order',
    async ({ file, blocks }) => {
      const result = await runPage(file, blocks);
      expect(result.output).not.toMatch(/command not found|MARINA_ERR_/);
      expect(result.code, result.output).toBe(0);
      for (const pattern of expectedOutput[file] ?? []) expect(result.output, `${file}: ${pattern}`).toMatch(pattern);
      // Every `serve --stop` of the page stopped a server it had started.
      const stops = blocks.reduce((n, block) => n + (block.text.match(/serve --stop/g)?.length ?? 0), 0);
      expect(result.output.match(/Marina has stopped\./g)?.length ?? 0, file).toBe(stops);
      // Nothing of onnxruntime's telemetry (mat-debug-<pid>.log, .ses) in the temp folder.
      expect(readdirSync(workDir).filter((name) => /^mat-debug-|^\.ses$/.test(name))).toEqual([]);
    },
    600_000,
  );
});

describe('docs/guides/archiving.md', () => {
  it('names only model-archiver flags that model-archiver --help lists', () => {
    const text = texts.get('docs/guides/archiving.md')!;
    const table = text.slice(text.indexOf('| Flag | Meaning |'), text.indexOf('## What is in an archive'));
    const flags = [...new Set([...table.matchAll(/`[^`\n]*`/g)].flatMap((m) => m[0].match(/--[a-z][a-z-]*/g) ?? []))];
    expect(flags.length).toBeGreaterThan(8);
    const help = createArchiverProgram().helpInformation();
    expect(flags.filter((flag) => !new RegExp(`${flag}\\b`).test(help))).toEqual([]);
  });
});

/** GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens. */
function slug(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/<[^>]+>/g, '')
    .replace(/[^\p{L}\p{N} _-]/gu, '')
    .replace(/ /g, '-');
}

/** The anchors of a Markdown file's headings (outside code blocks), with GitHub's -1, -2 for repeats. */
function anchorsOf(markdown: string): Set<string> {
  const anchors = new Set<string>();
  const counts = new Map<string, number>();
  let isInFence = false;
  for (const line of markdown.split('\n')) {
    if (/^\s*```/.test(line)) isInFence = !isInFence;
    if (isInFence) continue;
    const heading = /^#{1,6} (.+)$/.exec(line);
    if (!heading) continue;
    const base = slug(heading[1]!);
    const seen = counts.get(base) ?? 0;
    counts.set(base, seen + 1);
    anchors.add(seen === 0 ? base : `${base}-${seen}`);
  }
  return anchors;
}

/** The link targets of a Markdown text, outside code blocks and inline code. */
function linksOf(markdown: string): Array<{ line: number; target: string }> {
  const links: Array<{ line: number; target: string }> = [];
  let isInFence = false;
  markdown.split('\n').forEach((line, index) => {
    if (/^\s*```/.test(line)) isInFence = !isInFence;
    if (isInFence) return;
    const prose = line.replace(/`[^`]*`/g, '');
    for (const match of prose.matchAll(/\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g))
      links.push({ line: index + 1, target: match[1]! });
  });
  return links;
}

describe('links of README.md and docs/', () => {
  it('point at files that exist, and at headings that exist', () => {
    const broken: string[] = [];
    const anchorCache = new Map<string, Set<string>>();
    const anchorsOfFile = (file: string) => {
      if (!anchorCache.has(file)) anchorCache.set(file, anchorsOf(readFileSync(file, 'utf8')));
      return anchorCache.get(file)!;
    };
    for (const file of files) {
      for (const { line, target } of linksOf(texts.get(file)!)) {
        if (/^[a-z][a-z+.-]*:/i.test(target)) continue; // http(s), mailto: not checked here
        const [filePart, anchor] = target.split('#') as [string, string | undefined];
        const resolved =
          filePart === ''
            ? path.join(repoRoot, file)
            : path.resolve(path.dirname(path.join(repoRoot, file)), decodeURIComponent(filePart));
        if (!resolved.startsWith(repoRoot) || !existsSync(resolved)) {
          broken.push(`${file}:${line}: ${target} (no such file)`);
          continue;
        }
        if (anchor !== undefined && statSync(resolved).isFile() && resolved.endsWith('.md')) {
          if (!anchorsOfFile(resolved).has(anchor)) broken.push(`${file}:${line}: ${target} (no such heading)`);
        }
      }
    }
    expect(broken).toEqual([]);
  });
});

describe('docs/explanation/architecture.md', () => {
  it('names only source files and folders that exist', () => {
    const text = texts.get('docs/explanation/architecture.md')!;
    // Source files with their folder (`workers/worker.ts`), relative to the root or to packages/serve(/src).
    const named = new Set(text.match(/\b[a-z-]+\/(?:[a-z-]+\/)*[a-z-]+\.(?:ts|mjs)\b/g) ?? []);
    const missing = [...named].filter((name) => {
      const candidates = ['', 'packages/serve', 'packages/serve/src'].map((base) => path.join(repoRoot, base, name));
      return !candidates.some((candidate) => existsSync(candidate));
    });
    expect(named.size).toBeGreaterThan(15);
    expect(missing).toEqual([]);
  });
});
