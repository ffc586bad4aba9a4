import { parseLines, type Pair } from 'dot-properties';
import { configError } from './config-errors.ts';

/** Where a piece of text sits in the config file (1-based). */
export interface SourcePosition {
  line: number;
  column: number;
}

/**
 * A value that was gathered as a JSON block (`models={ ... }` over several lines). Its text
 * keeps the file's line breaks so offsets in it map back to file positions.
 */
export interface JsonBlockValue {
  /** Start offset of each gathered file line in `text`, with that line's position in the file. */
  segments: Array<{ textOffset: number; line: number; column: number }>;
}

export interface PropertyEntry {
  key: string;
  value: string;
  /** 1-based line of the key in the file. */
  line: number;
  /** Present when the value was gathered as multi-line JSON. */
  jsonBlock?: JsonBlockValue;
}

export interface ParsedProperties {
  filePath: string;
  /** In file order; a repeated key appears more than once (the last one wins). */
  entries: PropertyEntry[];
  /** The file's physical lines, for error excerpts. */
  lines: string[];
}

/**
 * Parses config.properties as java.util.Properties does (comments `#`/`!`, `key=value`,
 * `key: value`, `key value`, backslash continuations, escapes; parsing by `dot-properties`),
 * with one addition: a value starting with `{` is gathered as JSON until its braces balance,
 * so the `models=` JSON works over several lines with or without trailing backslashes.
 *
 * @throws MARINA_ERR_CONFIG_LINE_MALFORMED for a line with a key but no separator and no value.
 */
export function parseProperties(text: string, options: { filePath: string }): ParsedProperties {
  const lines = text.split(/\r\n|\n|\r/);
  const masked = [...lines];
  const jsonEntries: PropertyEntry[] = [];
  let isContinuation = false;

  for (let index = 0; index < lines.length; index++) {
    const line = lines[index]!;
    if (isContinuation) {
      isContinuation = endsWithContinuation(line);
      continue;
    }
    const head = splitHead(line);
    if (head === undefined) continue;
    const jsonStart = findJsonStart(lines, index, head.valueStart);
    if (jsonStart !== undefined) {
      const block = gatherJsonBlock(lines, jsonStart.line, jsonStart.column);
      jsonEntries.push({
        key: unescapeKey(head.key),
        value: block.text,
        line: index + 1,
        jsonBlock: { segments: block.segments },
      });
      for (let consumed = index; consumed <= block.lastLine; consumed++) masked[consumed] = '';
      index = block.lastLine;
      continue;
    }
    if (!head.hasSeparator && head.valueStart >= line.length && !endsWithContinuation(line)) {
      throw configError.MARINA_ERR_CONFIG_LINE_MALFORMED(
        `${options.filePath}:${index + 1}: malformed line '${line.trim()}': expected 'key=value'. ` +
          `Add '=' and a value, or comment the line out with '#'.`,
        { details: { file: options.filePath, line: index + 1, text: line } },
      );
    }
    isContinuation = endsWithContinuation(line);
  }

  const maskedText = masked.join('\n');
  const lineStarts = lineStartOffsets(maskedText);
  const entries: PropertyEntry[] = [...jsonEntries];
  for (const node of parseLines(maskedText, true)) {
    if (node.type !== 'PAIR') continue;
    const pair = node as Required<Pair>;
    entries.push({ key: pair.key, value: pair.value, line: lineOf(lineStarts, pair.range[0]) });
  }
  entries.sort((a, b) => a.line - b.line);
  return { filePath: options.filePath, entries, lines };
}

interface LineHead {
  key: string;
  hasSeparator: boolean;
  /** Index in the line where the value starts. */
  valueStart: number;
}

/** The key and where the value starts, for a line that begins a logical line; undefined for blank and comment lines. */
function splitHead(line: string): LineHead | undefined {
  let position = skipBlanks(line, 0);
  if (position >= line.length || line[position] === '#' || line[position] === '!') return undefined;
  const keyStart = position;
  while (position < line.length && !' \t\f=:'.includes(line[position]!)) position += line[position] === '\\' ? 2 : 1;
  const key = line.slice(keyStart, Math.min(position, line.length));
  position = skipBlanks(line, position);
  let hasSeparator = false;
  if (line[position] === '=' || line[position] === ':') {
    hasSeparator = true;
    position = skipBlanks(line, position + 1);
  } else if (position < line.length) {
    hasSeparator = true; // java.util.Properties accepts whitespace as the separator
  }
  return { key, hasSeparator, valueStart: position };
}

/** Where a `{` value starts: on the key's line, or on the next line after a lone `models=\`. */
function findJsonStart(
  lines: string[],
  index: number,
  valueStart: number,
): { line: number; column: number } | undefined {
  const line = lines[index]!;
  if (line[valueStart] === '{') return { line: index, column: valueStart };
  const next = lines[index + 1];
  if (line.slice(valueStart).trim() === '\\' && next !== undefined) {
    const column = skipBlanks(next, 0);
    if (next[column] === '{') return { line: index + 1, column };
  }
  return undefined;
}

function skipBlanks(line: string, position: number): number {
  while (position < line.length && ' \t\f'.includes(line[position]!)) position += 1;
  return position;
}

function endsWithContinuation(line: string): boolean {
  let backslashes = 0;
  for (let index = line.length - 1; index >= 0 && line[index] === '\\'; index--) backslashes += 1;
  return backslashes % 2 === 1;
}

function unescapeKey(key: string): string {
  return key.replace(/\\(.)/g, '$1');
}

/**
 * Gathers lines from `firstLine` (value starting at `firstColumn`) until the JSON braces and
 * brackets balance, ignoring braces inside strings. A backslash outside a string at the end of
 * a line is TorchServe's line continuation and becomes a space, so both styles give the same JSON.
 * Without balance the block runs to the end of the file and JSON parsing reports where.
 */
function gatherJsonBlock(
  lines: string[],
  firstLine: number,
  firstColumn: number,
): { text: string; segments: JsonBlockValue['segments']; lastLine: number } {
  const parts: string[] = [];
  const segments: JsonBlockValue['segments'] = [];
  let textLength = 0;
  let depth = 0;
  let isInString = false;
  let isEscaped = false;
  for (let index = firstLine; index < lines.length; index++) {
    const startColumn = index === firstLine ? firstColumn : 0;
    const chars = lines[index]!.slice(startColumn).split('');
    let closedAt = -1;
    for (let at = 0; at < chars.length; at++) {
      const ch = chars[at]!;
      if (isInString) {
        if (isEscaped) isEscaped = false;
        else if (ch === '\\') isEscaped = true;
        else if (ch === '"') isInString = false;
        continue;
      }
      if (ch === '"') isInString = true;
      else if (ch === '{' || ch === '[') depth += 1;
      else if (ch === '}' || ch === ']') {
        depth -= 1;
        if (depth === 0 && closedAt < 0) closedAt = at;
      } else if (ch === '\\' && chars.slice(at + 1).every((rest) => /\s/.test(rest))) chars[at] = ' ';
    }
    const part = chars.join('');
    segments.push({ textOffset: textLength, line: index + 1, column: startColumn + 1 });
    parts.push(part);
    textLength += part.length + 1;
    if (closedAt >= 0 && depth <= 0) return { text: parts.join('\n'), segments, lastLine: index };
  }
  return { text: parts.join('\n'), segments, lastLine: lines.length - 1 };
}

function lineStartOffsets(text: string): number[] {
  const starts = [0];
  for (let index = 0; index < text.length; index++) if (text[index] === '\n') starts.push(index + 1);
  return starts;
}

function lineOf(lineStarts: number[], offset: number): number {
  let low = 0;
  let high = lineStarts.length - 1;
  while (low < high) {
    const middle = (low + high + 1) >> 1;
    if (lineStarts[middle]! <= offset) low = middle;
    else high = middle - 1;
  }
  return low + 1;
}

/** Maps an offset in a JSON block's text to its position in the file. */
export function positionInFile(block: JsonBlockValue, offset: number): SourcePosition {
  let segment = block.segments[0]!;
  for (const candidate of block.segments) if (candidate.textOffset <= offset) segment = candidate;
  return { line: segment.line, column: segment.column + (offset - segment.textOffset) };
}

/** `  text` plus a caret line under `column` (1-based), for error messages; tabs kept so the caret lines up. */
export function excerptWithCaret(lineText: string, column: number): string {
  const before = lineText.slice(0, Math.max(0, column - 1)).split('');
  const pad = before.map((ch) => (ch === '\t' ? '\t' : ' ')).join('');
  return `    ${lineText}\n    ${pad}^`;
}
