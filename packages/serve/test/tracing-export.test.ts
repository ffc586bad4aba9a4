/**
 * How spans leave the server: the OTLP writers (protobuf and JSON, decoded here by the local
 * receiver with the collector's own message definitions), and the batcher that sends them
 * (batches, a bounded queue under a collector that never answers or cannot be reached, the flush
 * on shutdown). Waits on the transport's calls and on promises, never on the clock.
 */
import { once } from 'node:events';
import { writeFile } from 'node:fs/promises';
import { createServer as createHttpServer, type IncomingHttpHeaders, type ServerResponse } from 'node:http';
import { createServer, type Socket } from 'node:net';
import { join } from 'node:path';
import { gunzipSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  ID_PARENT,
  ID_SPAN,
  MAX_STRING_LENGTH,
  newIdBlock,
  OtlpJsonWriter,
  OtlpProtobufWriter,
  type SpanRecord,
  type SpanWriter,
} from '../src/tracing/otlp-span-writer.ts';
import { otlpHttpSettingsFrom, otlpHttpTransport } from '../src/tracing/otlp-http-transport.ts';
import { SpanBatcher, type SpanTransport } from '../src/tracing/span-batcher.ts';
import { Tracing, tracingSettingsFrom } from '../src/tracing/tracing.ts';
import { startOtlpReceiver, type OtlpReceiver } from './otlp-receiver.ts';
import { tempDir } from './helpers.ts';

let dir: { path: string; cleanup: () => Promise<void> };
let receiver: OtlpReceiver;

beforeAll(async () => {
  dir = await tempDir('marina-tracing-export-');
  receiver = await startOtlpReceiver(dir.path);
});

afterAll(async () => {
  await receiver?.close();
  await dir?.cleanup();
});

const header = {
  resourceAttributes: { 'service.name': 'writer-test', 'telemetry.sdk.language': 'nodejs' },
  scopeName: 'marina',
  scopeVersion: '9.9.9',
};

/** The exact epoch nanoseconds a writer must give a performance.now() instant. */
const nanosOf = (instant: number) =>
  BigInt(Math.round(performance.timeOrigin * 1e6)) + BigInt(Math.round(instant * 1e6));

function record(overrides: Partial<SpanRecord>): SpanRecord {
  return {
    ids: newIdBlock(undefined).ids,
    spanIdAt: ID_SPAN,
    parentIdAt: -1,
    isParentRemote: false,
    traceState: undefined,
    name: 'span',
    kind: 1,
    start: 1000.25,
    end: 1003.5,
    attributes: {},
    statusCode: 0,
    statusMessage: undefined,
    links: undefined,
    events: undefined,
    ...overrides,
  };
}

const hex = (bytes: Uint8Array, at: number, length: number) =>
  Buffer.from(bytes.subarray(at, at + length)).toString('hex');

describe.each([
  ['protobuf', () => new OtlpProtobufWriter(header)],
  ['json', () => new OtlpJsonWriter(header)],
] as const)('the OTLP %s writer', (encoding, make: () => SpanWriter) => {
  it('writes ids, parent, name, kind, exact times, every attribute type, links, events, status and tracestate', () => {
    const writer = make();
    const parent = newIdBlock(undefined);
    const child = newIdBlock({ traceId: parent.traceId, spanId: parent.spanId });
    const longText = 'x'.repeat(MAX_STRING_LENGTH + 500);
    const start = performance.now();
    writer.add(
      record({
        ids: child.ids,
        parentIdAt: ID_PARENT,
        isParentRemote: true,
        traceState: 'vendor=abc,other=1',
        name: 'POST /predictions/{model_name}',
        kind: 2,
        start,
        end: start + 12.345678,
        attributes: {
          'http.request.method': 'POST',
          'server.port': 8080,
          'marina.big': 2 ** 40 + 3,
          'marina.negative': -7,
          'marina.ratio': 0.25,
          'marina.flag': true,
          'marina.unicode': 'Grüße, 模型 ✓',
          'marina.long': longText,
          'marina.none': undefined,
        },
        statusCode: 2,
        statusMessage: 'MARINA_ERR_X',
        events: [
          { name: 'rpc.message', time: start + 1, attributes: { 'rpc.message.type': 'SENT', 'rpc.message.id': 1 } },
        ],
        links: [parent.ids],
      }),
    );
    writer.add(record({ ids: child.ids, spanIdAt: -1, parentIdAt: ID_SPAN, name: 'queue' }));
    expect(writer.count).toBe(2);
    const spans = receiver.decode(writer.take(), writer.contentType);
    expect(writer.count).toBe(0);
    expect(spans.map((s) => s.encoding)).toEqual([encoding, encoding]);
    const [request, queue] = spans;
    expect(request).toMatchObject({
      traceId: parent.traceId,
      spanId: child.spanId,
      parentSpanId: parent.spanId,
      name: 'POST /predictions/{model_name}',
      kind: 2,
      statusCode: 2,
      statusMessage: 'MARINA_ERR_X',
      traceState: 'vendor=abc,other=1',
      links: [{ traceId: parent.traceId, spanId: parent.spanId }],
      resource: { 'service.name': 'writer-test', 'telemetry.sdk.language': 'nodejs' },
    });
    expect(request!.startNs).toBe(nanosOf(start));
    expect(request!.endNs).toBe(nanosOf(start + 12.345678));
    expect(request!.attributes).toEqual({
      'http.request.method': 'POST',
      'server.port': 8080,
      'marina.big': 2 ** 40 + 3,
      'marina.negative': -7,
      'marina.ratio': 0.25,
      'marina.flag': true,
      'marina.unicode': 'Grüße, 模型 ✓',
      'marina.long': longText.slice(0, MAX_STRING_LENGTH),
    });
    expect(request!.events).toEqual([
      {
        name: 'rpc.message',
        timeNs: nanosOf(start + 1),
        attributes: { 'rpc.message.type': 'SENT', 'rpc.message.id': 1 },
      },
    ]);
    // A fresh id for a span nobody refers to, under the request span.
    expect(queue).toMatchObject({ traceId: parent.traceId, parentSpanId: child.spanId, name: 'queue', kind: 1 });
    expect(queue!.spanId).toMatch(/^[0-9a-f]{16}$/);
    expect(queue!.spanId).not.toBe(child.spanId);
    expect(hex(child.ids, ID_SPAN, 8)).toBe(child.spanId);
  });

  it('keeps each span its own values when values repeat, change, and outgrow the cache; and spans of any size', () => {
    const writer = make();
    const { ids } = newIdBlock(undefined);
    // 200 distinct request ids (past the cache's 64 per key) beside repeating routes and statuses.
    for (let i = 0; i < 200; i++)
      writer.add(
        record({
          ids,
          name: i % 2 ? 'odd' : 'even',
          attributes: {
            'marina.request.id': `request-${i}`,
            'http.route': i % 3 ? '/a' : '/b',
            status: i % 2 ? 200 : 503,
          },
        }),
      );
    // A span far over 128 bytes and one over 16 kB: their lengths take two and three bytes.
    const wide = Object.fromEntries(
      Array.from({ length: 20 }, (_, i) => [`k${i}`, String(i).repeat(MAX_STRING_LENGTH)]),
    );
    writer.add(record({ ids, name: 'wide', attributes: wide }));
    writer.add(record({ ids, name: 'medium', attributes: { text: 'y'.repeat(300) } }));
    const spans = receiver.decode(writer.take(), writer.contentType);
    expect(spans).toHaveLength(202);
    spans.slice(0, 200).forEach((span, i) => {
      expect(span.name).toBe(i % 2 ? 'odd' : 'even');
      expect(span.attributes).toEqual({
        'marina.request.id': `request-${i}`,
        'http.route': i % 3 ? '/a' : '/b',
        status: i % 2 ? 200 : 503,
      });
    });
    expect(spans[200]!.attributes).toEqual(
      Object.fromEntries(Object.entries(wide).map(([k, v]) => [k, v.slice(0, MAX_STRING_LENGTH)])),
    );
    expect(spans[201]!.attributes).toEqual({ text: 'y'.repeat(300) });
    // The writer starts over after a take.
    writer.add(record({ ids, name: 'again' }));
    expect(receiver.decode(writer.take(), writer.contentType).map((s) => s.name)).toEqual(['again']);
  });

  it('writes each span its own attributes when spans of one name repeat, change a value, take turns, and change their keys', () => {
    const writer = make();
    const { ids } = newIdBlock(undefined);
    const expected: Array<Record<string, unknown>> = [];
    const add = (
      attributes: Record<string, string | number | boolean | undefined>,
      name = 'POST /predictions/{model_name}',
    ) => {
      writer.add(record({ ids, name, attributes }));
      expected.push(Object.fromEntries(Object.entries(attributes).filter(([, v]) => v !== undefined)));
    };
    const request = (i: number, model: string) => ({
      'http.route': '/predictions/{model_name}',
      'url.path': `/predictions/${model}`,
      'marina.model.name': model,
      'marina.request.id': `id-${i}`,
      'http.response.status_code': 200,
      'error.type': undefined,
    });
    // The same attributes, then a request id that changes (volatile from then on), then models taking turns.
    for (let i = 0; i < 6; i++) add(request(0, 'a'));
    for (let i = 0; i < 6; i++) add(request(i, 'a'));
    for (let i = 0; i < 12; i++) add(request(i, i % 2 ? 'a' : 'b'));
    // Keys change: one more, one fewer (a run cut short), another order, a value of another type.
    add({ ...request(1, 'a'), 'error.type': '500', 'http.response.status_code': 500 });
    add({ 'http.route': '/predictions/{model_name}', 'url.path': '/predictions/a' });
    add({ 'url.path': '/predictions/a', 'http.route': '/predictions/{model_name}' });
    add({ ...request(2, 'a'), 'http.response.status_code': '200' });
    for (let i = 0; i < 3; i++) add(request(i, 'a'));
    // A span that ends inside a run of unchanged attributes, and one that goes past it.
    for (let i = 0; i < 3; i++) add({ a: 1, b: 2, c: 3 }, 'other');
    add({ a: 1, b: 2 }, 'other');
    add({ a: 1, b: 2, c: 3, d: 4 }, 'other');
    add({ a: 1, b: 2, c: 3 }, 'other');
    // Keys that keep changing (past the rebuilds a memo is allowed), then steady again.
    for (let i = 0; i < 300; i++) add(i % 2 ? { [`k${i % 7}`]: i, x: 'y' } : { x: 'y', [`k${i % 5}`]: true });
    for (let i = 0; i < 3; i++) add(request(i, 'c'));
    const spans = receiver.decode(writer.take(), writer.contentType);
    expect(spans.map((s) => s.attributes)).toEqual(expected);
  });
});

/** A transport that records each body and answers when told (or never). */
function heldTransport() {
  const sent: Array<{ body: Uint8Array; count: number; answer: (isOk: boolean) => void }> = [];
  let onSend: () => void = () => {};
  const transport: SpanTransport = {
    send: (body, count) =>
      new Promise<boolean>((resolve) => {
        sent.push({ body, count, answer: resolve });
        onSend();
      }),
    shutdown: async () => {},
  };
  const nextSend = () => new Promise<void>((resolve) => (onSend = resolve));
  return { transport, sent, nextSend };
}

describe('the span batcher', () => {
  it('sends a request when a batch is full and, for the rest, when its delay is over', async () => {
    const { transport, sent, nextSend } = heldTransport();
    const writer = new OtlpProtobufWriter(header);
    const batcher = new SpanBatcher({
      writer,
      transport,
      maxQueueSize: 100,
      maxExportBatchSize: 4,
      scheduledDelayMs: 5,
      maxConcurrentExports: 2,
    });
    const ids = newIdBlock(undefined).ids;
    for (let i = 0; i < 4; i++) batcher.add(record({ ids, name: `full-${i}` }));
    expect(sent.map((s) => s.count)).toEqual([4]);
    const delayed = nextSend();
    batcher.add(record({ ids, name: 'late' }));
    await delayed;
    expect(sent.map((s) => s.count)).toEqual([4, 1]);
    expect(receiver.decode(sent[1]!.body, writer.contentType).map((s) => s.name)).toEqual(['late']);
    for (const s of sent) s.answer(true);
    await batcher.forceFlush();
    expect(batcher.counts).toEqual({ exported: 5, failed: 0, dropped: 0 });
  });

  it('holds a bounded number of spans while the collector does not answer, drops the rest, and shuts down anyway', async () => {
    const { transport, sent } = heldTransport();
    const losses: Array<{ dropped: number; failed: number }> = [];
    const batcher = new SpanBatcher({
      writer: new OtlpProtobufWriter(header),
      transport,
      maxQueueSize: 10,
      maxExportBatchSize: 4,
      scheduledDelayMs: 60_000,
      maxConcurrentExports: 2,
      onLoss: (counts) => losses.push({ dropped: counts.dropped, failed: counts.failed }),
    });
    const ids = newIdBlock(undefined).ids;
    for (let i = 0; i < 1000; i++) batcher.add(record({ ids }));
    // Two requests of 4 in flight (never answered), then at most 10 spans waiting: the rest dropped.
    expect(sent.map((s) => s.count)).toEqual([4, 4]);
    expect(batcher.counts.dropped).toBe(1000 - 8 - 10);
    // The first drop is reported at once; the 981 after it within the minute are not (no flood of the log).
    expect(losses).toEqual([{ dropped: 1, failed: 0 }]);
    // The collector never answers: shutdown still returns, after its bound.
    await batcher.shutdown(20);
    batcher.add(record({ ids }));
    expect(batcher.counts.dropped).toBe(1000 - 8 - 10 + 1);
  });

  it('flushes what is written when it shuts down', async () => {
    const { transport, sent } = heldTransport();
    const batcher = new SpanBatcher({
      writer: new OtlpJsonWriter(header),
      transport: {
        send: (body, count) => {
          const answered = transport.send(body, count);
          sent.at(-1)!.answer(true);
          return answered;
        },
        shutdown: transport.shutdown,
      },
      maxQueueSize: 100,
      maxExportBatchSize: 50,
      scheduledDelayMs: 60_000,
      maxConcurrentExports: 2,
    });
    const ids = newIdBlock(undefined).ids;
    for (let i = 0; i < 3; i++) batcher.add(record({ ids, name: `last-${i}` }));
    expect(sent).toHaveLength(0);
    await batcher.shutdown(60_000);
    expect(receiver.decode(sent[0]!.body, 'application/json').map((s) => s.name)).toEqual([
      'last-0',
      'last-1',
      'last-2',
    ]);
    expect(batcher.counts).toEqual({ exported: 3, failed: 0, dropped: 0 });
  });

  it('posts to a real OTLP/HTTP receiver with the OTLP/HTTP transport; with a collector that cannot be reached, keeps its bounded queue and shuts down within its bound', async () => {
    const before = receiver.spans.length;
    const live = new SpanBatcher({
      writer: new OtlpProtobufWriter(header),
      transport: otlpHttpTransport({
        url: `${receiver.url}/v1/traces`,
        contentType: 'application/x-protobuf',
        settings: otlpHttpSettingsFrom({}),
        maxSockets: 2,
      }),
      maxQueueSize: 100,
      maxExportBatchSize: 10,
      scheduledDelayMs: 60_000,
      maxConcurrentExports: 2,
    });
    const ids = newIdBlock(undefined).ids;
    for (let i = 0; i < 12; i++) live.add(record({ ids, name: `posted-${i}` }));
    await live.shutdown(60_000);
    expect(receiver.spans.slice(before).map((s) => s.name)).toEqual(
      Array.from({ length: 12 }, (_, i) => `posted-${i}`),
    );
    expect(live.counts).toEqual({ exported: 12, failed: 0, dropped: 0 });
    expect(receiver.contentTypes.at(-1)).toBe('application/x-protobuf');

    // A port nobody listens on (taken and released): the export fails, nothing waits for ever.
    const probe = createServer().listen(0, '127.0.0.1');
    await once(probe, 'listening');
    const { port } = probe.address() as { port: number };
    await new Promise((resolve) => probe.close(resolve));
    const dead = new SpanBatcher({
      writer: new OtlpProtobufWriter(header),
      transport: otlpHttpTransport({
        url: `http://127.0.0.1:${port}/v1/traces`,
        contentType: 'application/x-protobuf',
        settings: otlpHttpSettingsFrom({}),
        maxSockets: 1,
      }),
      maxQueueSize: 8,
      maxExportBatchSize: 4,
      scheduledDelayMs: 60_000,
      maxConcurrentExports: 1,
    });
    for (let i = 0; i < 100; i++) dead.add(record({ ids }));
    expect(dead.counts.dropped).toBe(100 - 4 - 8);
    await dead.shutdown(50);
    expect(dead.counts.exported).toBe(0);
  });
});

/** Tracing as `serve` builds it from these OTEL_* variables, sending through `options.transport`. */
function tracingFor(env: Record<string, string>, options: ConstructorParameters<typeof Tracing>[1]): Tracing {
  const settings = tracingSettingsFrom({ env, isEnabled: false, serviceVersion: '1.2.3' })!;
  return new Tracing(settings, options);
}

/** One TorchServe REST request's span, ended with a 200, then the tracing shut down (its last spans sent). */
async function traceOneRequest(tracing: Tracing) {
  const trace = tracing.startRequest({
    name: 'POST /predictions/{model_name}',
    protocol: 'torchserve-rest',
    headers: {},
    startedAt: performance.now(),
    attributes: { 'http.request.method': 'POST' },
  });
  trace.end({ statusAttribute: 'http.response.status_code', status: 200, isError: false });
  await tracing.shutdown();
  return trace;
}

describe('tracing with the console exporter', () => {
  it('writes each export request as one OTLP/JSON line', async () => {
    const lines: string[] = [];
    const { consoleTransport } = await import('../src/tracing/span-batcher.ts');
    const tracing = tracingFor(
      { OTEL_TRACES_EXPORTER: 'console', OTEL_SERVICE_NAME: 'console-test' },
      { transport: consoleTransport((line) => lines.push(line)) },
    );
    const trace = await traceOneRequest(tracing);
    expect(lines).toHaveLength(1);
    const [span] = receiver.decode(Buffer.from(lines[0]!), 'application/json');
    expect(span).toMatchObject({
      traceId: trace.traceId,
      spanId: trace.spanId,
      parentSpanId: '',
      kind: 2,
      attributes: {
        'http.request.method': 'POST',
        'marina.protocol': 'torchserve-rest',
        'http.response.status_code': 200,
      },
      resource: { 'service.name': 'console-test', 'service.version': '1.2.3' },
    });
    expect(trace.traceparent).toBe(`00-${trace.traceId}-${trace.spanId}-01`);
  });
});

describe('lost spans', () => {
  it("says in the server's log when the collector refuses an export: those spans are lost", async () => {
    const warnings: string[] = [];
    const refusing: SpanTransport = { send: async () => false, shutdown: async () => undefined };
    const tracing = tracingFor(
      { OTEL_TRACES_EXPORTER: 'otlp', OTEL_SERVICE_NAME: 'loss-test' },
      { transport: refusing, log: (_level, message) => warnings.push(message) },
    );
    await traceOneRequest(tracing);
    expect(tracing.counts).toEqual({ exported: 0, failed: 1, dropped: 0 });
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toContain('0 span(s) dropped');
    expect(warnings[0]).toContain('1 lost in exports the collector refused or never answered');
  });
});

/** What a scripted collector saw of one export request. */
interface SeenExport {
  headers: IncomingHttpHeaders;
  body: Buffer;
}

/**
 * A collector on loopback that answers export requests from a script: each answer function takes
 * the response (`undefined` in the script: never answer). Counts connections and their closes.
 */
async function scriptedCollector(script: Array<((res: ServerResponse) => void) | undefined>) {
  const seen: SeenExport[] = [];
  const sockets = new Set<Socket>();
  let onRequest = () => {};
  let connections = 0;
  const server = createHttpServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const raw = Buffer.concat(chunks);
      seen.push({ headers: req.headers, body: req.headers['content-encoding'] === 'gzip' ? gunzipSync(raw) : raw });
      const answer = script.shift();
      answer?.(res);
      onRequest();
    });
  });
  server.on('connection', (socket: Socket) => {
    connections++;
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as { port: number };
  return {
    url: `http://127.0.0.1:${port}/v1/traces`,
    seen,
    get connections() {
      return connections;
    },
    /** Sockets the server still holds open. */
    sockets,
    nextRequest: () => new Promise<void>((resolve) => (onRequest = resolve)),
    close: async () => {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

const ok = (res: ServerResponse) => res.writeHead(200, { 'content-type': 'application/x-protobuf' }).end();
const status =
  (code: number, headers: Record<string, string> = {}) =>
  (res: ServerResponse) =>
    res.writeHead(code, headers).end('collector says no');

describe('the OTLP/HTTP transport', () => {
  it('posts each body whole with its length, the configured headers and gzip, over one kept-alive connection; shutdown closes it', async () => {
    const collector = await scriptedCollector([ok, ok]);
    const settings = otlpHttpSettingsFrom({
      OTEL_EXPORTER_OTLP_HEADERS: 'x-api-key=secret%20key,x-tenant=general',
      OTEL_EXPORTER_OTLP_TRACES_HEADERS: 'x-tenant=traces',
      OTEL_EXPORTER_OTLP_TRACES_COMPRESSION: 'gzip',
    });
    const transport = otlpHttpTransport({
      url: collector.url,
      contentType: 'application/x-protobuf',
      settings,
      maxSockets: 2,
    });
    const first = new Uint8Array(100_000).map((_, i) => i % 251);
    expect(await transport.send(first, 1)).toBe(true);
    expect(await transport.send(new Uint8Array([1, 2, 3]), 1)).toBe(true);
    expect(collector.seen.map((s) => s.body)).toEqual([Buffer.from(first), Buffer.from([1, 2, 3])]);
    const headers = collector.seen[0]!.headers;
    expect(headers).toMatchObject({
      'content-type': 'application/x-protobuf',
      'content-encoding': 'gzip',
      'x-api-key': 'secret key',
      'x-tenant': 'traces',
    });
    // Sent whole with its length, not as a chunked stream.
    expect(Number(headers['content-length'])).toBeGreaterThan(0);
    expect(headers['transfer-encoding']).toBeUndefined();
    expect(collector.connections).toBe(1);
    expect(collector.sockets.size).toBe(1);
    const [socket] = collector.sockets;
    const closed = once(socket!, 'close');
    await transport.shutdown();
    await closed;
    expect(collector.sockets.size).toBe(0);
    expect(await transport.send(first, 1)).toBe(false);
    await collector.close();
  });

  it('retries 429/502/503/504 after the Retry-After the collector gives, at most 5 times; a refusal is not retried', async () => {
    const collector = await scriptedCollector([
      status(503, { 'retry-after': '0' }),
      status(502, { 'retry-after': '0' }),
      ok,
      status(400),
      ...Array.from({ length: 6 }, () => status(429, { 'retry-after': '0' })),
    ]);
    const transport = otlpHttpTransport({
      url: collector.url,
      contentType: 'application/json',
      settings: otlpHttpSettingsFrom({}),
      maxSockets: 2,
    });
    expect(await transport.send(Buffer.from('{"a":1}'), 1)).toBe(true);
    expect(collector.seen.map((s) => s.body.toString())).toEqual(['{"a":1}', '{"a":1}', '{"a":1}']);
    expect(await transport.send(Buffer.from('{"b":2}'), 1)).toBe(false);
    expect(collector.seen).toHaveLength(4);
    expect(await transport.send(Buffer.from('{"c":3}'), 1)).toBe(false);
    expect(collector.seen).toHaveLength(4 + 1 + 5);
    await transport.shutdown();
    await collector.close();
  });

  it('gives an export up after OTEL_EXPORTER_OTLP_TIMEOUT when the collector never answers, and shutdown ends one in flight', async () => {
    const collector = await scriptedCollector([undefined, undefined]);
    const transport = otlpHttpTransport({
      url: collector.url,
      contentType: 'application/x-protobuf',
      settings: otlpHttpSettingsFrom({ OTEL_EXPORTER_OTLP_TIMEOUT: '200' }),
      maxSockets: 2,
    });
    expect(await transport.send(new Uint8Array([9]), 1)).toBe(false);
    const arrived = collector.nextRequest();
    const held = transport.send(new Uint8Array([8]), 1);
    await arrived;
    await transport.shutdown();
    expect(await held).toBe(false);
    await collector.close();
  });

  it('reads its variables, the traces form first, and refuses values it cannot use without echoing a path', async () => {
    expect(otlpHttpSettingsFrom({})).toEqual({
      timeoutMs: 10_000,
      headers: {},
      compression: 'none',
      tls: { ca: undefined, cert: undefined, key: undefined },
    });
    const pem = join(dir.path, 'ca.pem');
    await writeFile(pem, 'not really a certificate');
    expect(
      otlpHttpSettingsFrom({
        OTEL_EXPORTER_OTLP_TIMEOUT: '5000',
        OTEL_EXPORTER_OTLP_TRACES_TIMEOUT: '250',
        OTEL_EXPORTER_OTLP_COMPRESSION: 'none',
        OTEL_EXPORTER_OTLP_CERTIFICATE: pem,
      }),
    ).toMatchObject({ timeoutMs: 250, compression: 'none', tls: { ca: Buffer.from('not really a certificate') } });
    expect(() => otlpHttpSettingsFrom({ OTEL_EXPORTER_OTLP_TIMEOUT: 'soon' })).toThrow(
      /OTEL_EXPORTER_OTLP_TIMEOUT.*milliseconds above 0/,
    );
    expect(() => otlpHttpSettingsFrom({ OTEL_EXPORTER_OTLP_TRACES_COMPRESSION: 'zstd' })).toThrow(/gzip or none/);
    const missing = join(dir.path, 'no-such-key.pem');
    let error: Error | undefined;
    try {
      otlpHttpSettingsFrom({ OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY: missing });
    } catch (e) {
      error = e as Error;
    }
    expect(error?.message).toContain('OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY names a file Marina cannot read');
    expect(error?.message).not.toContain(dir.path);
    expect(() =>
      tracingSettingsFrom({
        env: { OTEL_TRACES_EXPORTER: 'otlp', OTEL_EXPORTER_OTLP_ENDPOINT: 'ftp://collector:4318' },
        isEnabled: false,
        serviceVersion: '0',
      }),
    ).toThrow(/an http\(s\) URL/);
  });
});
