import { findNodeAtLocation, parseTree, printParseErrorCode, type Node, type ParseError } from 'jsonc-parser';
import type { ModelVersionSettings } from './server-config.ts';
import { configError } from './config-errors.ts';
import { excerptWithCaret, positionInFile, type JsonBlockValue, type SourcePosition } from './properties-parser.ts';

// Keyed by printParseErrorCode names: ParseErrorCode is an ambient const enum, unusable with isolatedModules.
const PARSE_ERROR_TEXT: Record<string, string> = {
  CommaExpected: "expected ',' before this (a comma is missing between two entries)",
  ColonExpected: "expected ':' after the property name",
  PropertyNameExpected: 'expected a double-quoted property name (trailing commas are not allowed in JSON)',
  ValueExpected: 'expected a value (a trailing comma, or a value missing after ":")',
  CloseBraceExpected: "expected '}' (a closing brace is missing)",
  CloseBracketExpected: "expected ']'",
  EndOfFileExpected: "unexpected text after the closing '}'",
  InvalidSymbol: 'unexpected character (JSON needs double quotes around names and strings)',
  InvalidNumberFormat: 'invalid number',
  UnexpectedEndOfString: 'a string is not closed on its line',
  InvalidCommentToken: 'comments are not allowed in JSON',
  InvalidEscapeCharacter: 'invalid escape sequence',
};

/** Where the models JSON sits in the file, to report errors at file positions. */
export interface ModelsJsonLocation {
  filePath: string;
  /** The file's physical lines. */
  lines: string[];
  /** Set when the value was gathered as a JSON block (positions are exact). */
  block?: JsonBlockValue;
  /** Line of the `models=` key. */
  line: number;
}

/**
 * Checks the `models=` text is strict JSON (no comments, no trailing commas) and returns its
 * syntax tree, used to point at the file position of a bad value later.
 *
 * @throws MARINA_ERR_CONFIG_MODELS_JSON_INVALID with file:line:column, the line's text and a caret.
 */
export function parseModelsJsonSyntax(text: string, location: ModelsJsonLocation): Node {
  const errors: ParseError[] = [];
  const tree = parseTree(text, errors, { disallowComments: true, allowTrailingComma: false, allowEmptyContent: false });
  const first = errors[0];
  if (first === undefined && tree !== undefined && tree.type === 'object') return tree;
  const offset = first?.offset ?? 0;
  const why =
    first === undefined
      ? 'the value must be a JSON object: {"model": {"1.0": {...}}}'
      : (PARSE_ERROR_TEXT[printParseErrorCode(first.error)] ?? 'invalid JSON');
  const position = positionOf(location, offset);
  const lineText = location.lines[position.line - 1] ?? '';
  throw configError.MARINA_ERR_CONFIG_MODELS_JSON_INVALID(
    `${location.filePath}:${position.line}:${position.column}: invalid JSON in the value of 'models': ${why}\n` +
      `${excerptWithCaret(lineText, position.column)}\n` +
      `Fix the JSON and start again (TorchServe's trailing backslashes are optional).`,
    { details: { file: location.filePath, line: position.line, column: position.column, text: lineText } },
  );
}

/** File position of a JSON path (e.g. ['resnet', '1.0', 'batchSize']) in the models value. */
export function positionOfJsonPath(tree: Node, path: string[], location: ModelsJsonLocation): SourcePosition {
  let node: Node | undefined;
  for (let length = path.length; length >= 0 && node === undefined; length--)
    node = findNodeAtLocation(tree, path.slice(0, length));
  return positionOf(location, node?.offset ?? 0);
}

function positionOf(location: ModelsJsonLocation, offset: number): SourcePosition {
  if (location.block) return positionInFile(location.block, offset);
  return { line: location.line, column: 1 };
}

const POSITIVE_INTEGER_KEYS = {
  minWorkers: 'minWorkers',
  maxWorkers: 'maxWorkers',
  batchSize: 'batchSize',
  maxBatchDelay: 'maxBatchDelayMs',
  responseTimeout: 'responseTimeoutSec',
  startupTimeout: 'startupTimeoutSec',
  jobQueueSize: 'jobQueueSize',
  intraOpNumThreads: 'intraOpNumThreads',
} as const satisfies Record<string, keyof ModelVersionSettings>;

/** The key of a model's traffic policy in the models JSON (and in snapshots): `{"resnet": {"1.0": {...}, "$traffic": {...}}}`. */
export const TRAFFIC_KEY = '$traffic';

/** Keys TorchServe reads that Marina accepts and does not use. */
const IGNORED_VERSION_KEYS = new Set(['runtimeType', 'parallelLevel']);

/**
 * Turns the schema-checked models JSON into ModelVersionSettings: integer values <= 0 are
 * dropped (TorchServe ignores them), names get their units (`maxBatchDelay` -> `maxBatchDelayMs`).
 * Keys it does not know are reported through `warn`.
 */
export function normaliseModels(
  raw: Record<string, Record<string, Record<string, unknown>>>,
  warn: (message: string) => void,
): Record<string, Record<string, ModelVersionSettings>> {
  const models: Record<string, Record<string, ModelVersionSettings>> = {};
  for (const [modelName, versions] of Object.entries(raw)) {
    models[modelName] = {};
    for (const [version, settings] of Object.entries(versions)) {
      // The model's traffic policy, not a version (a version name starts with a letter or digit).
      if (version === TRAFFIC_KEY) continue;
      const normalised: ModelVersionSettings = {};
      const unknown: string[] = [];
      for (const [key, value] of Object.entries(settings)) {
        if (key in POSITIVE_INTEGER_KEYS) {
          if (typeof value === 'number' && value > 0)
            normalised[POSITIVE_INTEGER_KEYS[key as keyof typeof POSITIVE_INTEGER_KEYS]] = value;
        } else if (key === 'priorityLevels' || key === 'defaultPriorityLevel') {
          normalised[key] = value as number;
        } else if (key === 'defaultQueuePolicy') {
          normalised.defaultQueuePolicy = value as Record<string, unknown>;
        } else if (key === 'priorityQueuePolicy') {
          normalised.priorityQueuePolicy = value as Record<string, Record<string, unknown>>;
        } else if (key === 'defaultVersion') normalised.defaultVersion = value === true;
        else if (key === 'pinned') normalised.pinned = value === true;
        else if (key === 'idleUnloadSeconds') {
          if (typeof value === 'number' && value >= 0) normalised.idleUnloadSeconds = value;
        } else if (key === 'marName') normalised.marName = String(value);
        else if (!IGNORED_VERSION_KEYS.has(key)) unknown.push(key);
      }
      if (unknown.length > 0)
        warn(`models: ${modelName} version ${version}: unknown setting(s) ${unknown.join(', ')} ignored`);
      models[modelName][version] = normalised;
    }
  }
  return models;
}

/** Same check a valid models entry must pass beyond types: maxWorkers >= minWorkers. */
export function findWorkerRangeProblem(
  models: Record<string, Record<string, ModelVersionSettings>>,
): { path: string[]; message: string } | undefined {
  for (const [modelName, versions] of Object.entries(models)) {
    for (const [version, settings] of Object.entries(versions)) {
      if (
        settings.minWorkers !== undefined &&
        settings.maxWorkers !== undefined &&
        settings.maxWorkers < settings.minWorkers
      ) {
        return {
          path: [modelName, version, 'maxWorkers'],
          message: `model '${modelName}' version '${version}': maxWorkers (${settings.maxWorkers}) is below minWorkers (${settings.minWorkers}); raise maxWorkers or lower minWorkers`,
        };
      }
    }
  }
  return undefined;
}
