import Fastify from 'fastify';
import { beforeEach, describe, expect, it } from 'vitest';
import { createServerMetrics, type ServerMetrics } from '../src/metrics/server-metrics.ts';
import { metricsRoutes } from '../src/routes/metrics.ts';
import { StandInRegistry } from './management-stand-in-registry.ts';

let registry: StandInRegistry;
let metrics: ServerMetrics;

beforeEach(async () => {
  registry = new StandInRegistry();
  await registry.register({ url: 'resnet.mar', archivePath: '/store/resnet.mar', initialWorkers: 2, maxWorkers: 4 });
  metrics = createServerMetrics({ registry, hostname: 'host-a', collectProcessMetrics: false });
  return () => metrics.close();
});

const request = (over: Partial<Parameters<typeof registry.events.emit<'request'>>[1]> = {}) =>
  registry.events.emit('request', {
    modelName: 'resnet',
    requestedVersion: 'default',
    modelVersion: '1.0',
    statusCode: 200,
    queueMs: 2,
    inferenceMs: 30,
    totalMs: 35,
    ...over,
  });

describe('TorchServe counters', () => {
  it("keep TorchServe's names, HELP texts and labels, with latencies as microsecond sums", async () => {
    request();
    request({ queueMs: 4, totalMs: 45 });
    const text = await metrics.render();
    expect(text).toContain('# HELP ts_inference_requests_total Torchserve prometheus counter metric with unit: Count');
    expect(text).toContain(
      '# HELP ts_inference_latency_microseconds Torchserve prometheus counter metric with unit: Microseconds',
    );
    expect(text).toContain(
      '# HELP ts_queue_latency_microseconds Torchserve prometheus counter metric with unit: Microseconds',
    );
    expect(text).toContain(
      'ts_inference_requests_total{model_name="resnet",model_version="default",hostname="host-a",} 2.0',
    );
    expect(text).toContain(
      'ts_inference_latency_microseconds{model_name="resnet",model_version="default",hostname="host-a",} 80000.0',
    );
    expect(text).toContain(
      'ts_queue_latency_microseconds{model_name="resnet",model_version="default",hostname="host-a",} 6000.0',
    );
  });

  it('label a request by the version asked for, and count failures without adding their latency', async () => {
    request({ requestedVersion: '1.0', statusCode: 503, queueMs: 0, inferenceMs: 0, totalMs: 1 });
    const text = await metrics.render();
    expect(text).toContain(
      'ts_inference_requests_total{model_name="resnet",model_version="1.0",hostname="host-a",} 1.0',
    );
    expect(text).not.toMatch(/ts_inference_latency_microseconds\{[^}]*model_version="1.0"/);
    expect(text).toContain('marina_requests_total{model_name="resnet",model_version="1.0",status_code="503"} 1');
  });
});

describe('Marina histograms and gauges', () => {
  it('observe queue, inference and end-to-end latency in seconds, and batch sizes', async () => {
    request();
    registry.events.emit('batch', { modelName: 'resnet', modelVersion: '1.0', batchSize: 3, inferenceMs: 30 });
    const text = await metrics.render();
    expect(text).toContain(
      'marina_queue_latency_seconds_bucket{le="0.0025",model_name="resnet",model_version="1.0"} 1',
    );
    expect(text).toContain('marina_inference_latency_seconds_sum{model_name="resnet",model_version="1.0"} 0.03');
    expect(text).toContain('marina_request_latency_seconds_count{model_name="resnet",model_version="1.0"} 1');
    expect(text).toContain('marina_batch_size_bucket{le="2",model_name="resnet",model_version="1.0"} 0');
    expect(text).toContain('marina_batch_size_bucket{le="4",model_name="resnet",model_version="1.0"} 1');
  });

  it('read queue depth and worker counts from the registry at scrape time, and forget unregistered models', async () => {
    registry.entry('resnet').queueDepth = 7;
    registry.entry('resnet').busyWorkers = 2;
    let text = await metrics.render();
    expect(text).toContain('marina_queue_depth{model_name="resnet",model_version="1.0"} 7');
    expect(text).toContain('marina_workers{model_name="resnet",model_version="1.0"} 2');
    expect(text).toContain('marina_busy_workers{model_name="resnet",model_version="1.0"} 2');
    expect(text).toContain('marina_max_workers{model_name="resnet",model_version="1.0"} 4');
    await registry.unregister('resnet');
    text = await metrics.render();
    expect(text).not.toContain('marina_workers{model_name="resnet"');
  });

  it('include process CPU and memory when asked', async () => {
    const withProcess = createServerMetrics({ registry, hostname: 'h' });
    const text = await withProcess.render();
    withProcess.close();
    expect(text).toContain('process_cpu_seconds_total');
    expect(text).toContain('process_resident_memory_bytes');
  });
});

describe('GET /metrics', () => {
  it('serves Prometheus text and filters with name[]=', async () => {
    request();
    const app = Fastify();
    await app.register(metricsRoutes, { metrics });
    const base = await app.listen({ host: '127.0.0.1', port: 0 });
    try {
      const all = await fetch(`${base}/metrics`);
      expect(all.status).toBe(200);
      expect(all.headers.get('content-type')).toContain('text/plain; version=0.0.4');
      const filtered = await (
        await fetch(`${base}/metrics?name[]=ts_inference_requests_total&name[]=marina_queue_depth&name[]=nope`)
      ).text();
      expect(filtered).toContain('ts_inference_requests_total{');
      expect(filtered).toContain('marina_queue_depth{model_name="resnet"');
      expect(filtered).not.toContain('ts_queue_latency_microseconds');
    } finally {
      await app.close();
    }
  });
});
