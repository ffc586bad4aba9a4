/**
 * Finished spans written straight into the body of an OTLP export request, OTLP/protobuf or
 * OTLP/JSON (opentelemetry-proto's ExportTraceServiceRequest: one resource, one scope, the spans).
 *
 * Why not the SDK's spans and serializers: at tens of thousands of requests a second, each with
 * seven spans, the SDK's path (a live span object per span, its attributes copied and cleaned, the
 * spans kept until a batch is full, then the whole batch turned into a second object tree and
 * encoded) cost a traced tiny model over 40% of its throughput, in the profile mostly the encoding
 * and the garbage of the retained spans. Here a span is written once, when it is over, into one
 * reused buffer; nothing of it is kept but its bytes.
 */
import { randomFillSync } from 'node:crypto';

/** Attribute values as Marina writes them (OpenTelemetry's primitive attribute values). */
export type SpanAttributes = Readonly<Record<string, string | number | boolean | undefined>>;

/** A span without attributes: pass this one, and the writers skip the attributes at once. */
export const NO_ATTRIBUTES: SpanAttributes = Object.freeze({});

/**
 * A span that is over, as the writers take it. Its ids are bytes in `ids`, the block of a request's
 * trace (see ID_BLOCK_BYTES and `newIdBlock`).
 */
export interface SpanRecord {
  ids: Uint8Array;
  /** ID_SPAN: this span is the block's request span; -1 writes a fresh random id (a child nobody refers to). */
  spanIdAt: number;
  /** ID_SPAN: a child of the block's request span; ID_PARENT: the request span's own parent; -1 for a root span. */
  parentIdAt: number;
  /** Whether the parent came from another process (a caller's traceparent): OTLP's span flags say so. */
  isParentRemote: boolean;
  /** W3C tracestate, as it travels in the header. */
  traceState: string | undefined;
  name: string;
  /** OTLP SpanKind: 1 internal, 2 server. */
  kind: number;
  /** performance.now() instants (every span on the one clock of this process). */
  start: number;
  end: number;
  attributes: SpanAttributes;
  /** OTLP status code: 0 unset, 2 error. */
  statusCode: number;
  statusMessage: string | undefined;
  /** Linked spans: id blocks whose request span (at ID_SPAN) is the one linked. */
  links: readonly Uint8Array[] | undefined;
  events: readonly SpanEvent[] | undefined;
}

export interface SpanEvent {
  name: string;
  /** performance.now() instant. */
  time: number;
  attributes: SpanAttributes;
}

/** Writes finished spans into one export request's body. */
export interface SpanWriter {
  /** Spans written since the last take. */
  readonly count: number;
  /** HTTP content type of the bodies. */
  readonly contentType: string;
  add(span: SpanRecord): void;
  /** The export request holding every span added since the last take (none are kept after). */
  take(): Uint8Array;
}

/** Longest attribute or name string written, in UTF-16 units: a user agent or path cannot grow a span without bound. */
export const MAX_STRING_LENGTH = 1024;

const bounded = (text: string) => (text.length > MAX_STRING_LENGTH ? text.slice(0, MAX_STRING_LENGTH) : text);

const TWO_32 = 4294967296;

/**
 * An id block holds a request's ids as the protobuf fields the writer copies: a child's
 * `parent_span_id` field (the request span's id), `trace_id`, the request span's `span_id`, and
 * the request span's own `parent_span_id` (when it has a parent). A child's ids are then one copy
 * of the block's first 28 bytes (protobuf takes fields in any order) and a fresh span id; the
 * request span's, one copy from the trace id on; a link's, trace and span id (a Link numbers them
 * as a Span does). The constants are where each id's bytes start.
 */
const FIELD_CHILD_PARENT = 0;
const FIELD_TRACE = 10;
const FIELD_SPAN = 28;
const FIELD_PARENT = 38;
const ID_TRACE = FIELD_TRACE + 2;
export const ID_SPAN = FIELD_SPAN + 2;
export const ID_PARENT = FIELD_PARENT + 2;
const ID_BLOCK_BYTES = 48;

/** Random bytes for ids, from the system's generator, taken a few at a time. */
const randomPool = Buffer.allocUnsafe(4096);
let randomAt = randomPool.length;

function takeRandom(bytes: number): number {
  if (randomAt + bytes > randomPool.length) {
    randomFillSync(randomPool);
    randomAt = 0;
  }
  const at = randomAt;
  randomAt += bytes;
  return at;
}

const NIBBLES = new Uint8Array(128);
for (let i = 0; i < 16; i++) {
  NIBBLES['0123456789abcdef'.charCodeAt(i)] = i;
  NIBBLES['0123456789ABCDEF'.charCodeAt(i)] = i;
}

/** Copies `bytes` bytes (an id) without a view object per copy. */
function copyId(from: Uint8Array, at: number, to: Uint8Array, toAt: number, bytes: number): void {
  for (let i = 0; i < bytes; i++) to[toAt + i] = from[at + i]!;
}

/** Hex digits (already checked, e.g. by the W3C propagator) into `bytes` at `at`. */
function hexInto(hex: string, bytes: Uint8Array, at: number): void {
  for (let i = 0; i < hex.length; i += 2)
    bytes[at++] = (NIBBLES[hex.charCodeAt(i)]! << 4) | NIBBLES[hex.charCodeAt(i + 1)]!;
}

/**
 * A block with a fresh span id (also where children read it as their parent's). Built with
 * `new` and four tag-and-length pairs written in, not a copy of a template: a slice is a builtin
 * call and a species lookup each request, `new Uint8Array` of 48 bytes is allocated inline.
 */
function blockWithSpanId(): Uint8Array {
  const ids = new Uint8Array(ID_BLOCK_BYTES);
  ids[FIELD_CHILD_PARENT] = 0x22;
  ids[FIELD_CHILD_PARENT + 1] = 8;
  ids[FIELD_TRACE] = 0x0a;
  ids[FIELD_TRACE + 1] = 16;
  ids[FIELD_SPAN] = 0x12;
  ids[FIELD_SPAN + 1] = 8;
  ids[FIELD_PARENT] = 0x22;
  ids[FIELD_PARENT + 1] = 8;
  const at = takeRandom(8);
  copyId(randomPool, at, ids, ID_SPAN, 8);
  copyId(randomPool, at, ids, FIELD_CHILD_PARENT + 2, 8);
  return ids;
}

/**
 * A root request span's block: a fresh trace id and span id. Random ids come from crypto's
 * generator (non-zero: a zero id is invalid, and the chance of 8 or 16 random zero bytes is nil).
 */
export function rootIdBlock(): Uint8Array {
  const ids = blockWithSpanId();
  copyId(randomPool, takeRandom(16), ids, ID_TRACE, 16);
  return ids;
}

/** A block and the hex of its ids. */
export interface IdBlock {
  ids: Uint8Array;
  traceId: string;
  spanId: string;
}

/** A request span's ids: its trace id (the parent's, or a fresh one), a fresh span id, and its parent's span id when it has one. */
export function newIdBlock(parent: { traceId: string; spanId: string } | undefined): IdBlock {
  if (parent === undefined) {
    const ids = rootIdBlock();
    return { ids, traceId: hexOf(ids, ID_TRACE, 16), spanId: hexOf(ids, ID_SPAN, 8) };
  }
  const ids = blockWithSpanId();
  hexInto(parent.traceId, ids, ID_TRACE);
  hexInto(parent.spanId, ids, ID_PARENT);
  return { ids, traceId: parent.traceId, spanId: hexOf(ids, ID_SPAN, 8) };
}

/** A child's block: the same trace, a fresh span id, the given block's span as its parent. */
export function childIdBlock(parent: Uint8Array): Uint8Array {
  const ids = blockWithSpanId();
  copyId(parent, ID_TRACE, ids, ID_TRACE, 16);
  copyId(parent, ID_SPAN, ids, ID_PARENT, 8);
  return ids;
}

/** Lowercase hex digits of each byte value, as character codes: high digit at 2n, low at 2n + 1. */
const HEX_CODES = new Uint8Array(512);
for (let i = 0; i < 256; i++) {
  HEX_CODES[2 * i] = '0123456789abcdef'.charCodeAt(i >> 4);
  HEX_CODES[2 * i + 1] = '0123456789abcdef'.charCodeAt(i & 15);
}
/** `00-<trace id>-<span id>-<flags>`: the fixed characters set once, the ids written in for each header. */
const traceparentText = Buffer.from(`00-${'0'.repeat(32)}-${'0'.repeat(16)}-00`, 'latin1');

/**
 * A block's request span as a W3C `traceparent` (version 00), written from its bytes in one
 * string: the header every traced response carries, so it is built at each request.
 */
export function traceparentOf(ids: Uint8Array, isSampled: boolean): string {
  const text = traceparentText;
  let to = 3;
  for (let i = ID_TRACE; i < ID_TRACE + 16; i++) {
    const at = ids[i]! << 1;
    text[to++] = HEX_CODES[at]!;
    text[to++] = HEX_CODES[at + 1]!;
  }
  to++;
  for (let i = ID_SPAN; i < ID_SPAN + 8; i++) {
    const at = ids[i]! << 1;
    text[to++] = HEX_CODES[at]!;
    text[to++] = HEX_CODES[at + 1]!;
  }
  text[54] = isSampled ? 0x31 : 0x30;
  return text.toString('latin1', 0, 55);
}

const hexOf = (ids: Uint8Array, at: number, bytes: number) =>
  Buffer.from(ids.buffer, ids.byteOffset + at, bytes).toString('hex');

/**
 * performance.now() instants as OTLP's unsigned 64-bit epoch nanoseconds: the process's time
 * origin in nanoseconds is split once into two 32-bit halves, and each instant (under 2^53 ns,
 * 104 days of uptime, exactly) is added to it; no BigInt per timestamp.
 */
const originNs = BigInt(Math.round(performance.timeOrigin * 1e6));
const ORIGIN_LO = Number(originNs % BigInt(TWO_32));
const ORIGIN_HI = Number(originNs / BigInt(TWO_32));

/** Epoch nanoseconds of a performance.now() instant as decimal text (OTLP/JSON writes 64-bit integers as strings). */
function nanosText(instant: number): string {
  return (originNs + BigInt(Math.round(instant * 1e6))).toString();
}

/** OTLP's span flags: the W3C sampled flag, and whether the parent is remote (bit 8 says bit 9 is known). */
const flagsOf = (span: SpanRecord) => 0x101 | (span.isParentRemote ? 0x200 : 0);

/** What every export repeats: the resource and the instrumentation scope. */
export interface ExportHeader {
  resourceAttributes: SpanAttributes;
  scopeName: string;
  scopeVersion: string;
}

/** A fresh export request's buffer, and the largest one kept for the next request after a big one. */
const INITIAL_BUFFER_BYTES = 1 << 16;
const MAX_KEPT_BUFFER_BYTES = 1 << 20;

/** Distinct values a key's encoded attributes are kept for (a request id's are never the same twice: its key stops being cached). */
const CACHED_VALUES_PER_KEY = 64;

/**
 * OTLP/protobuf: each span is written as a `spans` field of the ScopeSpans message into one
 * growing buffer; `take` puts the request, resource and scope around them. Attributes that repeat
 * (a route, a model name, a status) are copied from their encoding of the first time.
 */
export class OtlpProtobufWriter implements SpanWriter {
  readonly contentType = 'application/x-protobuf';
  #buffer = Buffer.allocUnsafe(INITIAL_BUFFER_BYTES);
  #position = 0;
  #count = 0;
  /** Room kept at the start of each buffer for the request's header (see take). */
  readonly #reserve: number;
  /** Per attribute key (Marina's own names, a bounded set): its encoded key and recent whole KeyValue fields. */
  readonly #attributeCache = new Map<string, KeyCache>();
  /** Per span name (names are routes and fixed words): the Span.name field and the attributes its last span had. */
  readonly #names = new Map<string, NameEntry>();
  /** The current span's attribute keys and values, in order (reused from span to span). */
  readonly #keys: string[] = [];
  readonly #values: Array<string | number | boolean> = [];
  /** ResourceSpans.resource and ScopeSpans.scope, encoded once. */
  readonly #resourceField: Buffer;
  readonly #scopeField: Buffer;

  constructor(header: ExportHeader) {
    // The header's parts are written with this writer's own primitives, then copied out.
    this.#byte(0x0a);
    const resource = this.#begin();
    for (const key in header.resourceAttributes) this.#attribute(0x0a, key, header.resourceAttributes[key]);
    this.#end(resource);
    this.#resourceField = Buffer.from(this.#buffer.subarray(0, this.#position));
    this.#position = 0;
    this.#byte(0x0a);
    const scope = this.#begin();
    this.#string(0x0a, header.scopeName);
    this.#string(0x12, header.scopeVersion);
    this.#end(scope);
    this.#scopeField = Buffer.from(this.#buffer.subarray(0, this.#position));
    // Two tags, two lengths of at most 5 bytes, the resource and the scope.
    this.#reserve = 12 + this.#resourceField.length + this.#scopeField.length;
    this.#ensure(this.#reserve);
    this.#position = this.#reserve;
  }

  get count(): number {
    return this.#count;
  }

  add(span: SpanRecord): void {
    this.#ensure(128);
    const buffer = this.#buffer;
    buffer[this.#position++] = 0x12; // ScopeSpans.spans
    const start = this.#position++; // its length, set by #end
    // The ids as fields copied from the block (see ID_BLOCK_BYTES): a child's parent and trace id in one copy.
    const ids = span.ids;
    if (span.parentIdAt === ID_SPAN) this.#copy(ids, FIELD_CHILD_PARENT, FIELD_SPAN);
    else this.#copy(ids, FIELD_TRACE, FIELD_SPAN);
    if (span.spanIdAt < 0) this.#id(0x12, randomPool, takeRandom(8), 8);
    else this.#copy(ids, FIELD_SPAN, FIELD_PARENT);
    if (span.parentIdAt === ID_PARENT) this.#copy(ids, FIELD_PARENT, ID_BLOCK_BYTES);
    if (span.traceState) this.#string(0x1a, span.traceState);
    const entry = this.#name(span.name);
    this.#ensure(20);
    this.#buffer[this.#position++] = 0x30;
    this.#buffer[this.#position++] = span.kind;
    this.#time(0x39, span.start);
    this.#time(0x41, span.end);
    if (span.attributes === NO_ATTRIBUTES) {
      // Most child spans (admission, preprocess, postprocess): nothing to write or remember.
    } else if (entry === undefined || entry.isMemoOff === true) {
      const attributes = span.attributes;
      for (const key in attributes) this.#attribute(0x4a, key, attributes[key]);
    } else this.#spanAttributes(entry, span.attributes);
    if (span.events !== undefined) {
      for (const event of span.events) {
        this.#byte(0x5a);
        const e = this.#begin();
        this.#time(0x09, event.time);
        this.#string(0x12, event.name);
        for (const key in event.attributes) this.#attribute(0x1a, key, event.attributes[key]);
        this.#end(e);
      }
    }
    if (span.links !== undefined) {
      for (const link of span.links) {
        this.#ensure(36);
        this.#buffer[this.#position++] = 0x6a;
        this.#buffer[this.#position++] = 33; // 18 + 10 + 5 bytes
        this.#copy(link, FIELD_TRACE, FIELD_PARENT);
        this.#fixed32(0x35, 0x101); // sampled, parent-local flags
      }
    }
    if (span.statusCode !== 0) {
      this.#byte(0x7a);
      const s = this.#begin();
      if (span.statusMessage !== undefined) this.#string(0x12, span.statusMessage);
      this.#byte(0x18);
      this.#byte(span.statusCode);
      this.#end(s);
    }
    // Span.flags is field 16 (fixed32): its tag takes two bytes.
    this.#byte(0x85);
    this.#fixed32(0x01, flagsOf(span));
    this.#end(start);
    this.#count++;
  }

  take(): Uint8Array {
    // The request's header goes in the room kept before the spans, so the body is never copied;
    // the next spans go into a fresh buffer (this one leaves with the export).
    const reserve = this.#reserve;
    const spansLength = this.#position - reserve;
    const scopeSpansLength = this.#scopeField.length + spansLength;
    const resourceSpansLength = this.#resourceField.length + 1 + varintSize(scopeSpansLength) + scopeSpansLength;
    const headerLength =
      1 +
      varintSize(resourceSpansLength) +
      this.#resourceField.length +
      1 +
      varintSize(scopeSpansLength) +
      this.#scopeField.length;
    const buffer = this.#buffer;
    const start = reserve - headerLength;
    let at = start;
    buffer[at++] = 0x0a; // ExportTraceServiceRequest.resource_spans
    at = writeVarint(buffer, at, resourceSpansLength);
    at += this.#resourceField.copy(buffer, at);
    buffer[at++] = 0x12; // ResourceSpans.scope_spans
    at = writeVarint(buffer, at, scopeSpansLength);
    this.#scopeField.copy(buffer, at);
    const body = buffer.subarray(start, this.#position);
    this.#buffer = Buffer.allocUnsafe(Math.max(INITIAL_BUFFER_BYTES, Math.min(buffer.length, MAX_KEPT_BUFFER_BYTES)));
    this.#position = reserve;
    this.#count = 0;
    return body;
  }

  #ensure(bytes: number): void {
    if (this.#position + bytes <= this.#buffer.length) return;
    const grown = Buffer.allocUnsafe(Math.max(this.#buffer.length * 2, this.#position + bytes));
    this.#buffer.copy(grown, 0, 0, this.#position);
    this.#buffer = grown;
  }

  #byte(value: number): void {
    this.#ensure(1);
    this.#buffer[this.#position++] = value;
  }

  #bytes(bytes: Uint8Array): void {
    this.#ensure(bytes.length);
    this.#buffer.set(bytes, this.#position);
    this.#position += bytes.length;
  }

  /** Reserves one byte for a length-delimited field's length; #end writes it (moving the field when it needs more). */
  #begin(): number {
    this.#ensure(1);
    return this.#position++;
  }

  #end(start: number): void {
    const length = this.#position - start - 1;
    if (length < 128) {
      this.#buffer[start] = length;
      return;
    }
    const extra = varintSize(length) - 1;
    this.#ensure(extra);
    this.#buffer.copyWithin(start + 1 + extra, start + 1, this.#position);
    this.#position += extra;
    writeVarint(this.#buffer, start, length);
  }

  /** An int64 varint: a negative value in two's complement, ten bytes, as protobuf writes it. */
  #varint(value: number): void {
    this.#ensure(10);
    if (value >= 0) {
      this.#position = writeVarint(this.#buffer, this.#position, value);
      return;
    }
    const high = Math.floor(value / TWO_32);
    let lo = value - high * TWO_32;
    let hi = (high + TWO_32) >>> 0;
    const buffer = this.#buffer;
    while (hi > 0 || lo > 127) {
      buffer[this.#position++] = (lo & 127) | 128;
      lo = ((lo >>> 7) | (hi << 25)) >>> 0;
      hi >>>= 7;
    }
    buffer[this.#position++] = lo;
  }

  #fixed32(tag: number, value: number): void {
    this.#ensure(5);
    const buffer = this.#buffer;
    let at = this.#position;
    buffer[at++] = tag;
    buffer[at++] = value & 255;
    buffer[at++] = (value >>> 8) & 255;
    buffer[at++] = (value >>> 16) & 255;
    buffer[at++] = value >>> 24;
    this.#position = at;
  }

  /** A fixed64 of epoch nanoseconds: the time origin's halves plus the instant's nanoseconds. */
  #time(tag: number, instant: number): void {
    this.#ensure(9);
    const sum = ORIGIN_LO + Math.round(instant * 1e6);
    // Split by a floor, not `%`: a double's remainder is a call to C in optimised code. Exact, as
    // the sum is a non-negative integer under 2^53 and the divisor a power of two.
    const carry = Math.floor(sum / TWO_32);
    const lo = sum - carry * TWO_32;
    const hi = ORIGIN_HI + carry;
    const buffer = this.#buffer;
    let at = this.#position;
    buffer[at++] = tag;
    buffer[at++] = lo & 255;
    buffer[at++] = (lo >>> 8) & 255;
    buffer[at++] = (lo >>> 16) & 255;
    buffer[at++] = lo >>> 24;
    buffer[at++] = hi & 255;
    buffer[at++] = (hi >>> 8) & 255;
    buffer[at++] = (hi >>> 16) & 255;
    buffer[at++] = hi >>> 24;
    this.#position = at;
  }

  /** Bytes `start` to `end` of `from` (an id block's fields), copied without a view object. */
  #copy(from: Uint8Array, start: number, end: number): void {
    this.#ensure(end - start);
    const buffer = this.#buffer;
    let to = this.#position;
    for (let i = start; i < end; i++) buffer[to++] = from[i]!;
    this.#position = to;
  }

  #id(tag: number, from: Uint8Array, at: number, bytes: number): void {
    this.#ensure(bytes + 2);
    const buffer = this.#buffer;
    buffer[this.#position++] = tag;
    buffer[this.#position++] = bytes;
    let to = this.#position;
    for (let i = at; i < at + bytes; i++) buffer[to++] = from[i]!;
    this.#position = to;
  }

  #string(tag: number, text: string): void {
    const value = bounded(text);
    this.#ensure(value.length * 3 + 6);
    this.#buffer[this.#position++] = tag;
    if (value.length < 43) {
      // At most 42 UTF-16 units make at most 126 bytes: a one-byte length. ASCII (nearly every
      // value: ids, paths, addresses) is copied here, without Buffer.write's call.
      const buffer = this.#buffer;
      const start = this.#position;
      let at = start + 1;
      for (let i = 0; i < value.length; i++) {
        const code = value.charCodeAt(i);
        if (code > 0x7f) {
          at = start + 1 + buffer.write(value, start + 1);
          break;
        }
        buffer[at++] = code;
      }
      buffer[start] = at - start - 1;
      this.#position = at;
      return;
    }
    const start = this.#begin();
    this.#position += this.#buffer.write(value, this.#position);
    this.#end(start);
  }

  /** Writes the Span.name field; returns the name's entry (undefined past the bound on names kept). */
  #name(name: string): NameEntry | undefined {
    const entry = this.#names.get(name);
    if (entry !== undefined) {
      this.#bytes(entry.field);
      return entry;
    }
    const at = this.#position;
    this.#string(0x2a, name);
    if (this.#names.size >= 1024) return undefined;
    const created: NameEntry = {
      field: copyOf(this.#buffer, at, this.#position),
      memo: undefined,
      spans: 0,
      rebuilds: 0,
    };
    this.#names.set(name, created);
    return created;
  }

  /**
   * A span's attributes (Span.attributes fields), through the memo of the last span of its name:
   * runs of attributes equal to that span's (same key at the same place, same value) are copied
   * as one block of bytes; volatile places (a request id) are written one by one. Whatever the
   * memo holds, the bytes are those `#attribute` would write for each attribute in turn.
   */
  #spanAttributes(entry: NameEntry, attributes: SpanAttributes): void {
    const memo = entry.memo;
    const keys = this.#keys;
    const values = this.#values;
    entry.spans++;
    let count = 0;
    // Whether every attribute so far matched the memo; where the run being matched started (-1: none).
    let isHit = memo !== undefined;
    let runAt = -1;
    for (const key in attributes) {
      const value = attributes[key];
      if (value === undefined) continue;
      const i = count++;
      keys[i] = key;
      values[i] = value;
      if (isHit) {
        const m = memo!;
        if (i < m.keys.length && m.keys[i] === key) {
          if (m.isVolatile[i]) {
            this.#attribute(0x4a, key, value);
            continue;
          }
          if (m.values[i] === value) {
            if (m.runBytes[i] !== undefined) runAt = i;
            if (i + 1 === m.runEnd[runAt]) {
              this.#bytes(m.runBytes[runAt]!);
              runAt = -1;
            }
            continue;
          }
        }
        // A different key or value: the matched part of the current run is written out, the rest one by one.
        isHit = false;
        if (runAt >= 0) for (let j = runAt; j < i; j++) this.#attribute(0x4a, m.keys[j]!, m.values[j]!);
        runAt = -1;
      }
      this.#attribute(0x4a, key, value);
    }
    if (isHit && (runAt >= 0 || count !== memo!.keys.length)) {
      // Fewer attributes than the memo: the matched part of a run cut short is written out.
      if (runAt >= 0) for (let j = runAt; j < count; j++) this.#attribute(0x4a, memo!.keys[j]!, memo!.values[j]!);
      isHit = false;
    }
    if (!isHit) this.#remember(entry, count);
  }

  /**
   * Makes the current span's attributes the memo of its name. A place whose key stayed and whose
   * value changed is volatile from then on; the stable places between them are encoded as runs.
   * A name whose memo keeps being rebuilt (its spans' keys keep changing) stops using one.
   */
  #remember(entry: NameEntry, count: number): void {
    const old = entry.memo;
    entry.rebuilds++;
    if (entry.rebuilds > MEMO_REBUILDS_ALLOWED && entry.rebuilds * 4 > entry.spans) {
      entry.memo = undefined;
      entry.isMemoOff = true;
      return;
    }
    const keys = this.#keys.slice(0, count);
    const values = this.#values.slice(0, count);
    const isVolatile = keys.map(
      (key, i) =>
        old !== undefined && old.keys[i] === key && (old.isVolatile[i] === true || old.values[i] !== values[i]),
    );
    const runBytes: Array<Uint8Array | undefined> = new Array(count).fill(undefined);
    const runEnd: number[] = new Array(count).fill(-1);
    // Each run of stable places is encoded after the span's bytes, copied out, and the position set back.
    const mark = this.#position;
    for (let i = 0; i < count; ) {
      if (isVolatile[i]) {
        i++;
        continue;
      }
      let end = i;
      const at = this.#position;
      while (end < count && !isVolatile[end]) {
        this.#attribute(0x4a, keys[end]!, values[end]!);
        end++;
      }
      runBytes[i] = copyOf(this.#buffer, at, this.#position);
      runEnd[i] = end;
      i = end;
    }
    this.#position = mark;
    entry.memo = { keys, values, isVolatile, runBytes, runEnd };
  }

  /**
   * One KeyValue field under `tag` (undefined values are left out). A span attribute whose key
   * and value were written before is copied from that encoding: first the key's last value (most
   * attributes repeat request after request), then its other recent values.
   */
  #attribute(tag: number, key: string, value: string | number | boolean | undefined): void {
    if (value === undefined) return;
    let cache = this.#attributeCache.get(key);
    if (cache === undefined) {
      cache = { keyField: keyFieldOf(key), last: undefined, lastField: undefined, byValue: new Map() };
      this.#attributeCache.set(key, cache);
    }
    const isCached = tag === 0x4a;
    if (isCached) {
      if (cache.last === value && cache.lastField !== undefined) {
        this.#bytes(cache.lastField);
        return;
      }
      const known = cache.byValue?.get(value);
      if (known !== undefined) {
        cache.last = value;
        cache.lastField = known;
        this.#bytes(known);
        return;
      }
    }
    const at = this.#position;
    this.#byte(tag);
    const keyValue = this.#begin();
    this.#bytes(cache.keyField);
    this.#byte(0x12); // KeyValue.value: AnyValue
    const anyValue = this.#begin();
    if (typeof value === 'string') this.#string(0x0a, value);
    else if (typeof value === 'boolean') {
      this.#byte(0x10);
      this.#byte(value ? 1 : 0);
    } else if (Number.isSafeInteger(value)) {
      this.#byte(0x18);
      this.#varint(value);
    } else {
      this.#ensure(9);
      this.#buffer[this.#position++] = 0x21;
      this.#buffer.writeDoubleLE(value, this.#position);
      this.#position += 8;
    }
    this.#end(anyValue);
    this.#end(keyValue);
    if (isCached && cache.byValue !== undefined) {
      if (cache.byValue.size < CACHED_VALUES_PER_KEY) {
        const field = Buffer.from(this.#buffer.subarray(at, this.#position));
        cache.byValue.set(value, field);
        cache.last = value;
        cache.lastField = field;
      } else {
        // A key whose values keep changing (a request id): written each time, nothing kept.
        cache.byValue = undefined;
        cache.lastField = undefined;
      }
    }
  }
}

/** What the protobuf writer keeps of one span name. */
interface NameEntry {
  /** Span.name, encoded. */
  field: Uint8Array;
  /** The attributes of the last span of this name, by place (see #spanAttributes). */
  memo: AttributeMemo | undefined;
  spans: number;
  rebuilds: number;
  /** Set once the memo was rebuilt for more than a quarter of the spans: their keys keep changing. */
  isMemoOff?: boolean;
}

/**
 * The attributes a span name's last span was written with. A request span's route, path,
 * scheme, addresses, protocol, model and status repeat request after request and only its request
 * id changes: the places before and after it are copied as two blocks instead of thirteen
 * KeyValue fields looked up and copied one by one. A place whose value changed once stays
 * volatile (written one by one from then on), so models taking turns on one route settle after a
 * few requests instead of rebuilding the memo each time.
 */
interface AttributeMemo {
  keys: string[];
  values: Array<string | number | boolean>;
  isVolatile: boolean[];
  /** At the first place of each run of stable places: the run's KeyValue fields, encoded. */
  runBytes: Array<Uint8Array | undefined>;
  /** At the first place of each run: the place after its last. */
  runEnd: number[];
}

/** Rebuilds of a name's memo allowed before one rebuilt for more than a quarter of its spans is given up. */
const MEMO_REBUILDS_ALLOWED = 64;

/** A copy of `bytes` from `start` to `end`, its own memory (the writer's buffer leaves with each export). */
function copyOf(bytes: Uint8Array, start: number, end: number): Uint8Array {
  return new Uint8Array(bytes.subarray(start, end));
}

/** What the protobuf writer keeps of one attribute key. */
interface KeyCache {
  /** KeyValue.key, encoded. */
  keyField: Buffer;
  /** The value last written (or found) and its whole KeyValue field. */
  last: unknown;
  lastField: Uint8Array | undefined;
  /** Whole KeyValue fields by value; undefined once the key had too many values to keep. */
  byValue: Map<unknown, Uint8Array> | undefined;
}

function keyFieldOf(key: string): Buffer {
  const bytes = Buffer.from(bounded(key));
  const field = Buffer.allocUnsafe(1 + varintSize(bytes.length) + bytes.length);
  field[0] = 0x0a;
  bytes.copy(field, writeVarint(field, 1, bytes.length));
  return field;
}

function varintSize(value: number): number {
  let size = 1;
  while (value >= 128) {
    value = Math.floor(value / 128);
    size++;
  }
  return size;
}

/** Writes a non-negative integer (< 2^53) as a varint at `at`; returns the position after it. */
function writeVarint(buffer: Uint8Array, at: number, value: number): number {
  while (value >= 128) {
    buffer[at++] = (value % 128) | 128;
    value = Math.floor(value / 128);
  }
  buffer[at++] = value;
  return at;
}

/**
 * OTLP/JSON (the protobuf JSON mapping as OTLP specifies it: hex ids, 64-bit integers as strings,
 * enums as numbers): each span becomes its JSON text when added; `take` joins them.
 */
export class OtlpJsonWriter implements SpanWriter {
  readonly contentType = 'application/json';
  #spans: string[] = [];
  readonly #prefix: string;

  constructor(header: ExportHeader) {
    this.#prefix = `{"resourceSpans":[{"resource":{"attributes":${jsonAttributes(header.resourceAttributes)}},"scopeSpans":[{"scope":${JSON.stringify({ name: header.scopeName, version: header.scopeVersion })},"spans":[`;
  }

  get count(): number {
    return this.#spans.length;
  }

  add(span: SpanRecord): void {
    const spanId =
      span.spanIdAt < 0 ? randomPool.toString('hex', takeRandom(8), randomAt) : hexOf(span.ids, span.spanIdAt, 8);
    let text = `{"traceId":"${hexOf(span.ids, ID_TRACE, 16)}","spanId":"${spanId}"`;
    if (span.traceState) text += `,"traceState":${JSON.stringify(span.traceState)}`;
    if (span.parentIdAt >= 0) text += `,"parentSpanId":"${hexOf(span.ids, span.parentIdAt, 8)}"`;
    text += `,"flags":${flagsOf(span)},"name":${JSON.stringify(bounded(span.name))},"kind":${span.kind}`;
    text += `,"startTimeUnixNano":"${nanosText(span.start)}","endTimeUnixNano":"${nanosText(span.end)}"`;
    text += `,"attributes":${jsonAttributes(span.attributes)}`;
    if (span.events !== undefined)
      text += `,"events":[${span.events.map((e) => `{"timeUnixNano":"${nanosText(e.time)}","name":${JSON.stringify(e.name)},"attributes":${jsonAttributes(e.attributes)}}`).join(',')}]`;
    if (span.links !== undefined)
      text += `,"links":[${span.links.map((l) => `{"traceId":"${hexOf(l, ID_TRACE, 16)}","spanId":"${hexOf(l, ID_SPAN, 8)}","flags":257}`).join(',')}]`;
    text += `,"status":{${span.statusMessage !== undefined ? `"message":${JSON.stringify(span.statusMessage)},` : ''}"code":${span.statusCode}}}`;
    this.#spans.push(text);
  }

  take(): Uint8Array {
    const body = Buffer.from(`${this.#prefix}${this.#spans.join(',')}]}]}]}`);
    this.#spans = [];
    return body;
  }
}

function jsonAttributes(attributes: SpanAttributes): string {
  const parts: string[] = [];
  for (const key in attributes) {
    const value = attributes[key];
    if (value === undefined) continue;
    const anyValue =
      typeof value === 'string'
        ? `{"stringValue":${JSON.stringify(bounded(value))}}`
        : typeof value === 'boolean'
          ? `{"boolValue":${value}}`
          : Number.isSafeInteger(value)
            ? `{"intValue":"${value}"}`
            : `{"doubleValue":${Number.isFinite(value) ? value : JSON.stringify(String(value))}}`;
    parts.push(`{"key":${JSON.stringify(bounded(key))},"value":${anyValue}}`);
  }
  return `[${parts.join(',')}]`;
}
