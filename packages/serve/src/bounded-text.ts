/**
 * Text the server echoes back (in error messages, gRPC statuses and log lines) comes from clients:
 * these helpers keep it short and free of credentials, so an answer or a log line can never be
 * megabytes long or carry a password that was in a model URL.
 */

/** How many characters of a client's value an error message quotes by default. */
const DEFAULT_ECHO_CHARS = 200;

/**
 * `value` cut to `maxChars` characters, with `… (N characters)` saying how long it was; the value
 * itself when it is short enough. Credentials in URLs are redacted first.
 */
export function boundText(value: string, maxChars: number = DEFAULT_ECHO_CHARS): string {
  const redacted = redactCredentials(precut(value, maxChars));
  if (redacted.length <= maxChars && value.length <= maxChars) return redacted;
  return `${redacted.slice(0, maxChars)}… (${value.length} characters)`;
}

/**
 * The part of `text` that can matter once it is cut to `keep` characters: redacting megabytes only
 * to keep a few hundred characters would be wasted work. Enough is kept beyond `keep` that any URL
 * starting inside the kept part still has its `@` (userinfo is looked for within MAX_AUTHORITY_CHARS).
 */
function precut(text: string, keep: number): string {
  const room = keep + 2 * MAX_AUTHORITY_CHARS;
  return text.length > room ? text.slice(0, room) : text;
}

/**
 * Replaces the password of every URL in `text` with `***` (`http://user:***@host/`), in plain and
 * in percent-encoded form (`http%3A%2F%2Fuser%3A***%40host`, as a query string carries a URL); a
 * URL with a user and no password keeps the user. One pass over the text (no backtracking on a
 * client's megabytes); the text itself when it has no `@` at all, the common case.
 */
function redactCredentials(text: string): string {
  if (!text.includes('@') && !/%40/i.test(text)) return text;
  return redactUserinfo(redactUserinfo(text, PLAIN), ENCODED);
}

interface UrlSyntax {
  /** What follows a scheme: `://`. */
  separator: string;
  /** Ends the userinfo: `@`. */
  at: string;
  /** Between user and password: `:`. */
  colon: string;
  /** Anything that ends an authority before an `@` could come. */
  stops: readonly string[];
}

const PLAIN: UrlSyntax = { separator: '://', at: '@', colon: ':', stops: ['/', '?', '#', ' ', '\n', '"', "'"] };
const ENCODED: UrlSyntax = {
  separator: '%3a%2f%2f',
  at: '%40',
  colon: '%3a',
  stops: ['%2f', '%3f', '%23', '&', '/', ' ', '"', "'"],
};

const MAX_AUTHORITY_CHARS = 2048;

function redactUserinfo(text: string, syntax: UrlSyntax): string {
  const lower = syntax === ENCODED ? text.toLowerCase() : text;
  if (!lower.includes(syntax.at)) return text;
  let out = '';
  let copiedTo = 0;
  let from = 0;
  for (;;) {
    const scheme = lower.indexOf(syntax.separator, from);
    if (scheme === -1) break;
    const authority = scheme + syntax.separator.length;
    // The authority ends at the first stop; a userinfo longer than MAX_AUTHORITY_CHARS is not looked
    // for, so a text of many `://` costs one bounded look each.
    const limit = Math.min(lower.length, authority + MAX_AUTHORITY_CHARS);
    let end = limit;
    let at = -1;
    for (let i = authority; i < limit; i++) {
      if (syntax.stops.some((stop) => lower.startsWith(stop, i))) {
        end = i;
        break;
      }
      if (lower.startsWith(syntax.at, i)) at = i;
    }
    if (at !== -1) {
      const colon = lower.indexOf(syntax.colon, authority);
      const user = colon !== -1 && colon < at ? text.slice(authority, colon) : text.slice(authority, at);
      out += `${text.slice(copiedTo, authority)}${user}${syntax.colon === ':' ? ':' : '%3A'}***`;
      copiedTo = at;
    }
    from = Math.max(end, authority);
  }
  return copiedTo === 0 ? text : out + text.slice(copiedTo);
}

/**
 * A log line with credentials redacted, cut to `maxBytes` UTF-8 bytes at most (the trailing newline
 * kept), ending with a marker that gives the line's original length: `… [truncated: 5000012 bytes]`.
 */
export function capLogLine(line: string, maxBytes: number): string {
  // Most lines are short: a UTF-16 unit is at most 3 UTF-8 bytes, so no byte count is needed.
  if (line.length * 3 <= maxBytes) return redactCredentials(line);
  const bytes = Buffer.byteLength(line, 'utf8');
  if (bytes <= maxBytes) return redactCredentials(line);
  const hasNewline = line.endsWith('\n');
  line = redactCredentials(precut(line, maxBytes));
  const marker = `… [truncated: ${bytes} bytes]${hasNewline ? '\n' : ''}`;
  const room = Math.max(0, maxBytes - Buffer.byteLength(marker, 'utf8'));
  // Cut by bytes, then drop a split character at the end.
  const kept = Buffer.from(line, 'utf8')
    .subarray(0, room)
    .toString('utf8')
    .replace(/\uFFFD$/, '');
  return `${kept}${marker}`;
}
