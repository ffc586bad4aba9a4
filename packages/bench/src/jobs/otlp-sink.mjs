#!/usr/bin/env node
// The tracing experiment's OTLP/HTTP collector, in a process of its own (as a real collector is
// not part of the server, nor of the load generator): it takes each OTLP/protobuf export, counts
// its spans from the message's framing (ExportTraceServiceRequest.resource_spans.scope_spans.spans,
// no span decoded), answers 200, and answers GET /counts with what it took. A body that is not
// OTLP/protobuf or does not parse is answered 400 and counted as refused. Prints {"port": N} once
// listening; `--nice N` lowers its own priority first.
import { createServer } from 'node:http';
import { setPriority } from 'node:os';

const niceAt = process.argv.indexOf('--nice');
if (niceAt > 0) setPriority(Number(process.argv[niceAt + 1]));

const counts = { exports: 0, spans: 0, bytes: 0, refused: 0 };

/** Reads a varint at `at`; returns [value, next position]. */
function varint(bytes, at, end) {
  let value = 0;
  let scale = 1;
  for (;;) {
    if (at >= end) throw new Error('truncated varint');
    const byte = bytes[at++];
    value += (byte & 127) * scale;
    if (byte < 128) return [value, at];
    scale *= 128;
    if (scale > 2 ** 63) throw new Error('varint too long');
  }
}

/** Calls `onField(field, start, end)` for each length-delimited field from `at` to `end`, skipping the others. */
function eachField(bytes, at, end, onField) {
  while (at < end) {
    let key;
    [key, at] = varint(bytes, at, end);
    const wire = key % 8;
    if (wire === 0) [, at] = varint(bytes, at, end);
    else if (wire === 1) at += 8;
    else if (wire === 5) at += 4;
    else if (wire === 2) {
      let length;
      [length, at] = varint(bytes, at, end);
      if (at + length > end) throw new Error('field past the end of its message');
      onField(Math.floor(key / 8), at, at + length);
      at += length;
    } else throw new Error(`wire type ${wire} is not used by OTLP`);
  }
  if (at !== end) throw new Error('field past the end of its message');
}

function countSpans(body) {
  let spans = 0;
  eachField(body, 0, body.length, (field, start, end) => {
    if (field !== 1) return; // ExportTraceServiceRequest.resource_spans
    eachField(body, start, end, (field2, start2, end2) => {
      if (field2 !== 2) return; // ResourceSpans.scope_spans
      eachField(body, start2, end2, (field3) => {
        if (field3 === 2) spans++; // ScopeSpans.spans
      });
    });
  });
  return spans;
}

const server = createServer((request, response) => {
  if (request.method === 'GET' && request.url === '/counts') {
    response.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(counts));
    return;
  }
  const chunks = [];
  request.on('data', (chunk) => chunks.push(chunk));
  request.on('end', () => {
    const body = chunks.length === 1 ? chunks[0] : Buffer.concat(chunks);
    try {
      if (request.headers['content-type'] !== 'application/x-protobuf') throw new Error('not OTLP/protobuf');
      counts.spans += countSpans(body);
      counts.exports++;
      counts.bytes += body.length;
      response.writeHead(200, { 'content-type': 'application/x-protobuf' }).end();
    } catch (error) {
      counts.refused++;
      response.writeHead(400, { 'content-type': 'text/plain' }).end(String(error.message).slice(0, 200));
    }
  });
});
server.listen(0, '127.0.0.1', () => process.stdout.write(`${JSON.stringify({ port: server.address().port })}\n`));
process.on('SIGTERM', () => {
  server.close(() => process.exit(0));
  server.closeAllConnections();
});
