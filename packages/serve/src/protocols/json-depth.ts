/**
 * A nesting limit for the JSON bodies the server parses or hands to a handler. JSON.parse itself
 * copes with deep nesting, but everything that walks the value afterwards (flattening tensor data,
 * structured clone to a worker, serialising) recurses, and 100,000 levels exhaust the stack.
 */
import { createServeError } from '../errors.ts';

/** Deepest nesting of arrays and objects accepted. No model input needs more than a few levels (one per tensor dimension). */
const MAX_JSON_DEPTH = 128;

const OPEN_BRACKET = 0x5b;
const CLOSE_BRACKET = 0x5d;
const OPEN_BRACE = 0x7b;
const CLOSE_BRACE = 0x7d;
const QUOTE = 0x22;
const BACKSLASH = 0x5c;

/**
 * Whether `json` nests arrays and objects deeper than `maxDepth`, counted in one pass over its
 * bytes (brackets inside strings do not count). Says nothing about whether it is valid JSON.
 */
function isJsonTooDeep(json: Buffer | string, maxDepth: number = MAX_JSON_DEPTH): boolean {
  const bytes = typeof json === 'string' ? Buffer.from(json, 'utf8') : json;
  let depth = 0;
  let isInString = false;
  for (let i = 0; i < bytes.length; i++) {
    const byte = bytes[i];
    if (isInString) {
      if (byte === BACKSLASH) i++;
      else if (byte === QUOTE) isInString = false;
    } else if (byte === QUOTE) isInString = true;
    else if (byte === OPEN_BRACKET || byte === OPEN_BRACE) {
      if (++depth > maxDepth) return true;
    } else if (byte === CLOSE_BRACKET || byte === CLOSE_BRACE) depth--;
  }
  return false;
}

/**
 * @throws MARINA_ERR_JSON_TOO_DEEP (400) when `json` nests deeper than MAX_JSON_DEPTH; `what` names it in the message.
 */
export function assertJsonDepth(json: Buffer | string, what: string): void {
  if (isJsonTooDeep(json)) {
    throw createServeError.MARINA_ERR_JSON_TOO_DEEP(
      `${what} nests arrays and objects more than ${MAX_JSON_DEPTH} levels deep; flatten it (tensor data needs one level per dimension)`,
      { details: { maxJsonDepth: MAX_JSON_DEPTH } },
    );
  }
}
