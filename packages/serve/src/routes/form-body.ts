/**
 * `application/x-www-form-urlencoded` bodies read as TorchServe reads them (Netty's
 * HttpPostRequestDecoder): one input field per form field, `+` as a space, percent escapes as bytes,
 * in the body's `charset` (UTF-8 unless the Content-Type names another). A field whose bytes are not
 * text in that charset reaches the handler as those bytes (a Buffer), never with replacement
 * characters: TorchServe hands every form field to its handler as bytes.
 */

/** The fields of a form body, in order; a field's value is text, or its bytes when they are not text. */
export class FormFields {
  readonly entries: ReadonlyArray<readonly [string, string | Buffer]>;
  constructor(entries: ReadonlyArray<readonly [string, string | Buffer]>) {
    this.entries = entries;
  }
}

/** Decodes `+` and `%XX` of one form component into bytes; a `%` not followed by two hex digits stays as it is. */
function componentBytes(component: string): Buffer {
  const bytes: number[] = [];
  const text = Buffer.from(component.replace(/\+/g, ' '), 'latin1');
  for (let i = 0; i < text.length; i++) {
    const byte = text[i]!;
    if (byte === 0x25 && i + 2 < text.length && isHex(text[i + 1]) && isHex(text[i + 2])) {
      bytes.push(Number.parseInt(String.fromCharCode(text[i + 1]!, text[i + 2]!), 16));
      i += 2;
    } else bytes.push(byte);
  }
  return Buffer.from(bytes);
}

function isHex(byte: number | undefined): boolean {
  return byte !== undefined && ((byte >= 0x30 && byte <= 0x39) || ((byte | 0x20) >= 0x61 && (byte | 0x20) <= 0x66));
}

const strictUtf8 = new TextDecoder('utf-8', { fatal: true });

/** Text of `bytes` in `charset`: Latin-1 maps every byte; UTF-8 gives undefined for bytes that are not UTF-8. */
function textOf(bytes: Buffer, charset: 'latin1' | 'utf8'): string | undefined {
  if (charset === 'latin1') return bytes.toString('latin1');
  try {
    return strictUtf8.decode(bytes);
  } catch {
    return undefined;
  }
}

/** The charset a Content-Type names: Latin-1 for `iso-8859-1` (and its aliases), UTF-8 otherwise. */
function formCharset(contentType: string | undefined): 'latin1' | 'utf8' {
  const named = /;\s*charset="?([^";\s]+)"?/i.exec(contentType ?? '')?.[1]?.toLowerCase();
  return named !== undefined && ['iso-8859-1', 'iso8859-1', 'latin1', 'l1', 'us-ascii', 'ascii'].includes(named)
    ? 'latin1'
    : 'utf8';
}

/** Parses a form body (raw bytes, as sent) into its fields. */
export function parseFormBody(body: Buffer, contentType: string | undefined): FormFields {
  const charset = formCharset(contentType);
  const entries: Array<readonly [string, string | Buffer]> = [];
  for (const pair of body.toString('latin1').split('&')) {
    if (pair === '') continue;
    const at = pair.indexOf('=');
    const keyBytes = componentBytes(at < 0 ? pair : pair.slice(0, at));
    const valueBytes = componentBytes(at < 0 ? '' : pair.slice(at + 1));
    const key = textOf(keyBytes, charset) ?? keyBytes.toString('latin1');
    entries.push([key, textOf(valueBytes, charset) ?? valueBytes]);
  }
  return new FormFields(entries);
}
