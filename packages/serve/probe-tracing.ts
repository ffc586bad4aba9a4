// Temporary probe (not committed): tracing's cost per request, in-process.
import { once } from 'node:events';
import { createServer } from 'node:http';
import { randomUUID } from 'node:crypto';
import { Tracing, tracingSettingsFrom } from './src/tracing/tracing.ts';
import { Tracing as OldTracing } from './src/tracing/tracing-old-probe.ts';

const sink = createServer((req, res) => { req.resume(); req.on('end', () => res.writeHead(200).end()); });
sink.listen(0, '127.0.0.1');
await once(sink, 'listening');
const port = (sink.address() as { port: number }).port;
const settings = tracingSettingsFrom({ env: { OTEL_TRACES_EXPORTER: 'otlp', OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${port}`, OTEL_TRACES_SAMPLER: 'always_on' }, isEnabled: false, serviceVersion: '0.1.0' })!;
const noop = { export: (_spans: unknown, cb: (r: { code: number }) => void) => cb({ code: 0 }), shutdown: async () => {}, forceFlush: async () => {} };

function run(tracing: Tracing, n: number) {
  const jobs = [];
  for (let i = 0; i < n; i++) {
    const now = performance.now();
    const t = tracing.startRequest({
      name: 'POST /predictions/:model_name', protocol: 'torchserve-rest', headers: { host: 'x', 'content-type': 'application/json' }, startedAt: now,
      attributes: { 'http.request.method': 'POST', 'http.route': '/predictions/:model_name', 'url.path': '/predictions/tiny', 'url.scheme': 'http', 'server.address': '127.0.0.1', 'server.port': 8080, 'network.protocol.version': '1.1', 'client.address': '127.0.0.1', 'user_agent.original': 'undici' },
    });
    void t.traceparent;
    t.setModel('tiny', '1.0', randomUUID());
    const job = { timings: { arrivedAt: now, queuedAt: now + 0.01, dispatchedAt: now + 0.1, finishedAt: now + 0.3, stages: { preprocessWaitMs: 0.05, inferenceMs: 0.1, postprocessMs: 0.02 }, batchSize: 8, workerId: 'w1' }, priority: 1, trace: t };
    t.recordJob(job as never, { isOk: true });
    jobs.push(job);
    if (jobs.length === 8) { tracing.recordBatch(jobs as never, { workerId: 'w1', modelName: 'tiny', modelVersion: '1.0', isOk: true }); jobs.length = 0; }
    t.end({ attributes: { 'http.response.status_code': 200 }, isError: false });
  }
}

for (const kind of ['old-noop', 'new-noop', 'old-otlp', 'new-otlp', 'old-noop', 'new-noop', 'old-otlp', 'new-otlp']) {
  const T = (kind.startsWith('old') ? OldTracing : Tracing) as typeof Tracing;
  const tracing = new T(settings, kind.endsWith('noop') ? { exporter: noop as never } : {});
  run(tracing, 5000);
  await tracing.forceFlush();
  const n = 40000;
  const t0 = performance.now();
  for (let k = 0; k < n / 4000; k++) { run(tracing, 4000); await new Promise((r) => setImmediate(r)); }
  await tracing.forceFlush();
  const us = ((performance.now() - t0) * 1000) / n;
  console.log(kind, us.toFixed(2), 'µs/request');
  await tracing.shutdown();
}
sink.close();
