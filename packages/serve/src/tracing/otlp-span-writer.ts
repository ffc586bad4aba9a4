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

/**
 * A span that is over, as the writers take it. Its ids are bytes in `ids`, the block of a request's
 * trace (see `newIdBlock`): the trace id, then 8-byte span ids at the offsets given.
 */
export interface SpanRecord {
  ids: Uint8Array;
  /** Where this span's own id is in `ids`; -1 writes a fresh random id (a child nobody refers to). */
  spanIdAt: number;
  /** Where the parent's span id is in `ids`; -1 for a root span. */
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

/** Offsets in an id block: the trace id (16 bytes), the request span's id, its parent's id (8 bytes each). */
const ID_TRACE = 0;
export const ID_SPAN = 16;
export const ID_PARENT = 24;
const ID_BLOCK_BYTES = 32;

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

/** Hex digits (already checked, e.g. by the W3C propagator) into `bytes` at `at`. */
/** Copies `bytes` bytes (an id) without a view object per copy. */
function copyId(from: Uint8Array, at: number, to: Uint8Array, toAt: number, bytes: number): void {
  for (let i = 0; i < bytes; i++) to[toAt + i] = from[at + i]!;
}

function hexInto(hex: string, bytes: Uint8Array, at: number): void {
  for (let i = 0; i < hex.length; i += 2)
    bytes[at++] = (NIBBLES[hex.charCodeAt(i)]! << 4) | NIBBLES[hex.charCodeAt(i + 1)]!;
}

/** An id block and the hex of its ids. */
export interface IdBlock {
  ids: Uint8Array;
  traceId: string;
  spanId: string;
}

/**
 * A request span's ids: its trace id (the parent's, or a fresh one), a fresh span id, and its
 * parent's span id when it has one. Random ids come from crypto's generator (non-zero: a zero id
 * is invalid, and the chance of 8 or 16 random zero bytes is nil).
 */
export function newIdBlock(parent: { traceId: string; spanId: string } | undefined): IdBlock {
  const ids = new Uint8Array(ID_BLOCK_BYTES);
  let traceId: string;
  if (parent === undefined) {
    const at = takeRandom(24);
    copyId(randomPool, at, ids, ID_TRACE, 24);
    traceId = randomPool.toString('hex', at, at + 16);
    return { ids, traceId, spanId: randomPool.toString('hex', at + 16, at + 24) };
  }
  traceId = parent.traceId;
  hexInto(traceId, ids, ID_TRACE);
  hexInto(parent.spanId, ids, ID_PARENT);
  const at = takeRandom(8);
  copyId(randomPool, at, ids, ID_SPAN, 8);
  return { ids, traceId, spanId: randomPool.toString('hex', at, at + 8) };
}

/** A child's block: the same trace, the given span id as the request span's. */
export function childIdBlock(parent: IdBlock): IdBlock {
  const ids = new Uint8Array(ID_BLOCK_BYTES);
  copyId(parent.ids, ID_TRACE, ids, ID_TRACE, 16);
  copyId(parent.ids, ID_SPAN, ids, ID_PARENT, 8);
  const at = takeRandom(8);
  copyId(randomPool, at, ids, ID_SPAN, 8);
  return { ids, traceId: parent.traceId, spanId: randomPool.toString('hex', at, at + 8) };
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

/** Distinct values a key's encoded attributes are kept for (a request id's are never the same twice: its key stops being cached). */
const CACHED_VALUES_PER_KEY = 64;

/**
 * OTLP/protobuf: each span is written as a `spans` field of the ScopeSpans message into one
 * growing buffer; `take` puts the request, resource and scope around them. Attributes that repeat
 * (a route, a model name, a status) are copied from their encoding of the first time.
 */
export class OtlpProtobufWriter implements SpanWriter {
  readonly contentType = 'application/x-protobuf';
  #buffer = Buffer.allocUnsafe(1 << 16);
  #position = 0;
  #count = 0;
  /** Each attribute key's KeyValue.key field, encoded once (the keys are Marina's own names). */
  readonly #keys = new Map<string, Buffer>();
  /** Whole KeyValue fields (tag included) by key, then value; a key whose values keep changing is dropped and marked false. */
  readonly #attributeCache = new Map<string, Map<unknown, Uint8Array> | false>();
  /** Span.name fields by name (names are routes and fixed words). */
  readonly #names = new Map<string, Uint8Array>();
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
    this.#position = 0;
  }

  get count(): number {
    return this.#count;
  }

  add(span: SpanRecord): void {
    this.#ensure(128);
    const buffer = this.#buffer;
    buffer[this.#position++] = 0x12; // ScopeSpans.spans
    const start = this.#position++; // its length, set by #end
    this.#id(0x0a, span.ids, ID_TRACE, 16);
    if (span.spanIdAt < 0) this.#id(0x12, randomPool, takeRandom(8), 8);
    else this.#id(0x12, span.ids, span.spanIdAt, 8);
    if (span.traceState) this.#string(0x1a, span.traceState);
    if (span.parentIdAt >= 0) this.#id(0x22, span.ids, span.parentIdAt, 8);
    this.#name(span.name);
    buffer[this.#position++] = 0x30;
    buffer[this.#position++] = span.kind;
    this.#time(0x39, span.start);
    this.#time(0x41, span.end);
    const attributes = span.attributes;
    for (const key in attributes) this.#attribute(0x4a, key, attributes[key]);
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
        this.#id(0x0a, link, ID_TRACE, 16);
        this.#id(0x12, link, ID_SPAN, 8);
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
    const spansLength = this.#position;
    const scopeSpansLength = this.#scopeField.length + spansLength;
    const resourceSpansLength = this.#resourceField.length + 1 + varintSize(scopeSpansLength) + scopeSpansLength;
    const total = 1 + varintSize(resourceSpansLength) + resourceSpansLength;
    const out = Buffer.allocUnsafe(total);
    let at = 0;
    out[at++] = 0x0a; // ExportTraceServiceRequest.resource_spans
    at = writeVarint(out, at, resourceSpansLength);
    at += this.#resourceField.copy(out, at);
    out[at++] = 0x12; // ResourceSpans.scope_spans
    at = writeVarint(out, at, scopeSpansLength);
    at += this.#scopeField.copy(out, at);
    this.#buffer.copy(out, at, 0, spansLength);
    this.#position = 0;
    this.#count = 0;
    return out;
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
    const lo = sum % TWO_32;
    const hi = ORIGIN_HI + (sum - lo) / TWO_32;
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
      // At most 42 UTF-16 units make at most 126 bytes: a one-byte length.
      const start = this.#position++;
      this.#position += this.#buffer.write(value, this.#position);
      this.#buffer[start] = this.#position - start - 1;
      return;
    }
    const start = this.#begin();
    this.#position += this.#buffer.write(value, this.#position);
    this.#end(start);
  }

  #name(name: string): void {
    const field = this.#names.get(name);
    if (field === undefined) {
      const at = this.#position;
      this.#string(0x2a, name);
      if (this.#names.size < 1024) this.#names.set(name, Buffer.from(this.#buffer.subarray(at, this.#position)));
      return;
    }
    this.#bytes(field);
  }

  /** One KeyValue field under `tag` (undefined values are left out), from the cache when this key and value were written before. */
  #attribute(tag: number, key: string, value: string | number | boolean | undefined): void {
    if (value === undefined) return;
    let byValue = this.#attributeCache.get(key);
    if (byValue === undefined) {
      byValue = new Map();
      this.#attributeCache.set(key, byValue);
    }
    if (byValue !== false && tag === 0x4a) {
      const cached = byValue.get(value);
      if (cached !== undefined) {
        this.#bytes(cached);
        return;
      }
    }
    const at = this.#position;
    this.#byte(tag);
    const keyValue = this.#begin();
    this.#bytes(this.#keyField(key));
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
    if (byValue !== false && tag === 0x4a) {
      if (byValue.size < CACHED_VALUES_PER_KEY)
        byValue.set(value, Buffer.from(this.#buffer.subarray(at, this.#position)));
      else this.#attributeCache.set(key, false);
    }
  }

  #keyField(key: string): Buffer {
    let field = this.#keys.get(key);
    if (field === undefined) {
      const bytes = Buffer.from(bounded(key));
      field = Buffer.allocUnsafe(1 + varintSize(bytes.length) + bytes.length);
      field[0] = 0x0a;
      bytes.copy(field, writeVarint(field, 1, bytes.length));
      this.#keys.set(key, field);
    }
    return field;
  }
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
