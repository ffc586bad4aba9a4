/**
 * A local OTLP/HTTP trace receiver for the tracing tests: a real HTTP server on loopback that
 * decodes what the exporters send, OTLP/JSON and OTLP/protobuf (with the collector's own
 * message definitions below, decoded by protobufjs through @grpc/proto-loader), into plain spans.
 */
import { once } from 'node:events';
import { writeFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import { join } from 'node:path';
import * as protoLoader from '@grpc/proto-loader';

/** opentelemetry-proto's trace messages (field numbers as in opentelemetry/proto/{common,resource,trace}/v1 and collector/trace/v1). */
const OTLP_TRACE_PROTO = `
syntax = "proto3";
package opentelemetry.proto.collector.trace.v1;
message AnyValue {
  oneof value {
    string string_value = 1; bool bool_value = 2; int64 int_value = 3; double double_value = 4;
    ArrayValue array_value = 5; KeyValueList kvlist_value = 6; bytes bytes_value = 7;
  }
}
message ArrayValue { repeated AnyValue values = 1; }
message KeyValueList { repeated KeyValue values = 1; }
message KeyValue { string key = 1; AnyValue value = 2; }
message InstrumentationScope { string name = 1; string version = 2; repeated KeyValue attributes = 3; uint32 dropped_attributes_count = 4; }
message Resource { repeated KeyValue attributes = 1; uint32 dropped_attributes_count = 2; }
message Status { string message = 2; int32 code = 3; }
message Link { bytes trace_id = 1; bytes span_id = 2; string trace_state = 3; repeated KeyValue attributes = 4; uint32 dropped_attributes_count = 5; fixed32 flags = 6; }
message Event { fixed64 time_unix_nano = 1; string name = 2; repeated KeyValue attributes = 3; uint32 dropped_attributes_count = 4; }
message Span {
  bytes trace_id = 1; bytes span_id = 2; string trace_state = 3; bytes parent_span_id = 4; fixed32 flags = 16;
  string name = 5; int32 kind = 6; fixed64 start_time_unix_nano = 7; fixed64 end_time_unix_nano = 8;
  repeated KeyValue attributes = 9; uint32 dropped_attributes_count = 10; repeated Event events = 11;
  uint32 dropped_events_count = 12; repeated Link links = 13; uint32 dropped_links_count = 14; Status status = 15;
}
message ScopeSpans { InstrumentationScope scope = 1; repeated Span spans = 2; string schema_url = 3; }
message ResourceSpans { Resource resource = 1; repeated ScopeSpans scope_spans = 2; string schema_url = 3; }
message ExportTraceServiceRequest { repeated ResourceSpans resource_spans = 1; }
message ExportTraceServiceResponse {}
service TraceService { rpc Export(ExportTraceServiceRequest) returns (ExportTraceServiceResponse); }
`;

export interface ReceivedSpan {
  traceId: string;
  spanId: string;
  /** '' for a root span. */
  parentSpanId: string;
  name: string;
  /** OTLP SpanKind: 1 internal, 2 server. */
  kind: number;
  startNs: bigint;
  endNs: bigint;
  attributes: Record<string, unknown>;
  links: Array<{ traceId: string; spanId: string }>;
  /** The span's events (e.g. `rpc.message` on a streaming call), in order. */
  events: Array<{ name: string; timeNs: bigint; attributes: Record<string, unknown> }>;
  /** OTLP status code: 0 unset, 1 ok, 2 error. */
  statusCode: number;
  statusMessage: string;
  traceState: string;
  resource: Record<string, unknown>;
  /** 'json' or 'protobuf': how it arrived. */
  encoding: 'json' | 'protobuf';
}

export interface OtlpReceiver {
  /** http://127.0.0.1:port (OTEL_EXPORTER_OTLP_ENDPOINT). */
  url: string;
  spans: ReceivedSpan[];
  /** Export requests seen, by content type. */
  contentTypes: string[];
  /** Decodes an export request's body as the receiver does (for tests of the writers themselves). */
  decode(body: Uint8Array, contentType: string): ReceivedSpan[];
  close(): Promise<void>;
}

type Json = Record<string, any>;

function attributeValueOf(value: Json | undefined): unknown {
  if (!value) return undefined;
  if ('stringValue' in value) return value.stringValue;
  if ('string_value' in value) return value.string_value;
  if ('boolValue' in value) return value.boolValue;
  if ('bool_value' in value) return value.bool_value;
  if ('intValue' in value) return Number(value.intValue);
  if ('int_value' in value) return Number(value.int_value);
  if ('doubleValue' in value) return value.doubleValue;
  if ('double_value' in value) return value.double_value;
  return undefined;
}

function attributesOf(list: Json[] | undefined): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const kv of list ?? []) out[kv.key as string] = attributeValueOf(kv.value as Json | undefined);
  return out;
}

const hex = (id: unknown) => (Buffer.isBuffer(id) ? id.toString('hex') : typeof id === 'string' ? id : '');

function spansOf(request: Json, encoding: 'json' | 'protobuf'): ReceivedSpan[] {
  const out: ReceivedSpan[] = [];
  for (const rs of (request.resourceSpans ?? request.resource_spans ?? []) as Json[]) {
    const resource = attributesOf(rs.resource?.attributes);
    for (const ss of (rs.scopeSpans ?? rs.scope_spans ?? []) as Json[]) {
      for (const s of (ss.spans ?? []) as Json[]) {
        out.push({
          traceId: hex(s.traceId ?? s.trace_id),
          spanId: hex(s.spanId ?? s.span_id),
          parentSpanId: hex(s.parentSpanId ?? s.parent_span_id),
          name: s.name,
          kind: Number(s.kind),
          startNs: BigInt(s.startTimeUnixNano ?? s.start_time_unix_nano),
          endNs: BigInt(s.endTimeUnixNano ?? s.end_time_unix_nano),
          attributes: attributesOf(s.attributes),
          links: ((s.links ?? []) as Json[]).map((l) => ({
            traceId: hex(l.traceId ?? l.trace_id),
            spanId: hex(l.spanId ?? l.span_id),
          })),
          events: ((s.events ?? []) as Json[]).map((e) => ({
            name: e.name as string,
            timeNs: BigInt(e.timeUnixNano ?? e.time_unix_nano),
            attributes: attributesOf(e.attributes),
          })),
          statusCode: Number(s.status?.code ?? 0),
          statusMessage: String(s.status?.message ?? ''),
          traceState: String(s.traceState ?? s.trace_state ?? ''),
          resource,
          encoding,
        });
      }
    }
  }
  return out;
}

/** Starts the receiver on 127.0.0.1:0; `dir` holds the proto file it decodes with. */
export async function startOtlpReceiver(dir: string): Promise<OtlpReceiver> {
  const protoPath = join(dir, 'otlp-trace.proto');
  await writeFile(protoPath, OTLP_TRACE_PROTO);
  const definition = protoLoader.loadSync(protoPath, { keepCase: true, longs: String, defaults: false, oneofs: true });
  const service = definition['opentelemetry.proto.collector.trace.v1.TraceService'] as protoLoader.ServiceDefinition;
  const decode = service.Export!.requestDeserialize as (bytes: Buffer) => Json;
  const spans: ReceivedSpan[] = [];
  const contentTypes: string[] = [];
  const decodeBody = (body: Uint8Array, type: string) =>
    type.startsWith('application/json')
      ? spansOf(JSON.parse(Buffer.from(body).toString('utf8')) as Json, 'json')
      : spansOf(decode(Buffer.from(body)), 'protobuf');
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      const type = req.headers['content-type'] ?? '';
      contentTypes.push(type);
      if (req.method !== 'POST' || req.url !== '/v1/traces') {
        res.writeHead(404).end();
        return;
      }
      spans.push(...decodeBody(body, type));
      if (type.startsWith('application/json')) res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
      else res.writeHead(200, { 'content-type': 'application/x-protobuf' }).end();
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as { port: number };
  return {
    url: `http://127.0.0.1:${port}`,
    spans,
    contentTypes,
    decode: decodeBody,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}
