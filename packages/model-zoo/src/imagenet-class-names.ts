import { readFile, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { createError } from './errors.ts';

const IMAGENET_CLASS_COUNT = 1000;

/**
 * Reads JavaScript string literals (single- or double-quoted, with escapes) from `source`
 * starting at `pos`, joined by `+`, and returns the text and the position after them.
 */
function readConcatenatedStrings(source: string, start: number): { text: string; end: number } {
  let pos = start;
  let text = '';
  for (;;) {
    while (/\s/.test(source[pos] ?? '')) pos += 1;
    const quote = source[pos];
    if (quote !== "'" && quote !== '"') break;
    pos += 1;
    while (source[pos] !== quote) {
      if (pos >= source.length) throw new SyntaxError('unterminated string literal');
      if (source[pos] === '\\') {
        const escaped = source[pos + 1] ?? '';
        text += { n: '\n', t: '\t', r: '\r' }[escaped] ?? escaped;
        pos += 2;
      } else {
        text += source[pos];
        pos += 1;
      }
    }
    pos += 1;
    while (/\s/.test(source[pos] ?? '')) pos += 1;
    if (source[pos] !== '+') break;
    pos += 1;
  }
  return { text, end: pos };
}

/** Parses `{ 0: 'tench, Tinca tinca', 1: 'goldfish, ' + 'Carassius auratus', ... }` without evaluating it. */
export function parseImagenetClassesSource(source: string): string[] {
  const names: string[] = [];
  const entry = /(?:^|[{,\s])(\d+)\s*:\s*(?=['"])/g;
  for (let match = entry.exec(source); match !== null; match = entry.exec(source)) {
    const { text, end } = readConcatenatedStrings(source, entry.lastIndex);
    names[Number(match[1])] = text;
    entry.lastIndex = end;
  }
  return names;
}

/**
 * The 1000 ImageNet class names in class-index order ('tench, Tinca tinca' first), read from
 * the data file the `@tensorflow-models/mobilenet` package ships. The file is parsed as
 * data; TensorFlow.js is never loaded.
 *
 * @throws MARINA_ERR_MODEL_ZOO_CLASS_NAMES_UNAVAILABLE when the package or its data is missing or malformed.
 */
export async function loadImagenetClassNames(): Promise<string[]> {
  let filePath = '@tensorflow-models/mobilenet/dist/imagenet_classes.js';
  try {
    const require = createRequire(import.meta.url);
    // The package has no "exports" map for its data file, so resolve its root and join.
    filePath = join(
      dirname(require.resolve('@tensorflow-models/mobilenet/package.json')),
      'dist',
      'imagenet_classes.js',
    );
    const names = parseImagenetClassesSource(await readFile(filePath, 'utf8'));
    const missing = names.length !== IMAGENET_CLASS_COUNT || names.some((n) => typeof n !== 'string' || n.length === 0);
    if (missing)
      throw new Error(`expected ${IMAGENET_CLASS_COUNT} non-empty class names, found ${names.filter(Boolean).length}`);
    return [...names];
  } catch (error) {
    throw createError.MARINA_ERR_MODEL_ZOO_CLASS_NAMES_UNAVAILABLE(
      `could not read ImageNet class names from '${filePath}': ${(error as Error).message}; reinstall dependencies (pnpm install)`,
      { cause: error },
    );
  }
}

/**
 * Writes TorchServe's `index_to_name.json` (`{"0": "tench", "1": "goldfish", ...}`), using the
 * first comma-separated synonym of each name as its label.
 *
 * @throws MARINA_ERR_MODEL_ZOO_WRITE_FAILED when writing fails.
 */
export async function writeIndexToName(outputPath: string, names: string[]): Promise<void> {
  const mapping: Record<string, string> = {};
  names.forEach((name, index) => {
    mapping[String(index)] = (name.split(',')[0] ?? name).trim();
  });
  try {
    await writeFile(outputPath, `${JSON.stringify(mapping, null, 2)}\n`);
  } catch (error) {
    throw createError.MARINA_ERR_MODEL_ZOO_WRITE_FAILED(
      `could not write '${outputPath}': ${(error as Error).message}; check the directory exists and is writable`,
      { cause: error },
    );
  }
}
