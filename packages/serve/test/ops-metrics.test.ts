/** The metrics API end to end: numbers that move with real traffic through real workers. */
import parsePrometheusTextFormat from 'parse-prometheus-text-format';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  affineInput,
  call,
  createWorkspace,
  opsConfig,
  packModel,
  startOps,
  type OpsServer,
  type Workspace,
} from './ops-harness.ts';

let workspace: Workspace;
let ops: OpsServer;

beforeAll(async () => {
  workspace = await createWorkspace();
  await packModel(workspace.store, { modelName: 'affine' });
  ops = await startOps(opsConfig(workspace, { load_models: 'affine.mar' }));
}, 60_000);
afterAll(async () => {
  await ops?.close();
  await workspace?.cleanup();
});

async function scrape(query = ''): Promise<string> {
  const response = await fetch(`${ops.metrics}/metrics${query}`);
  expect(response.status).toBe(200);
  expect(response.headers.get('content-type')).toContain('text/plain');
  return response.text();
}

/** The value of one sample line (`name{labels} value`), 0 when absent. */
function sample(text: string, name: string, labels: Record<string, string> = {}): number {
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${name}{`) && !line.startsWith(`${name} `)) continue;
    if (Object.entries(labels).every(([k, v]) => line.includes(`${k}="${v}"`)))
      return Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return 0;
}

describe('GET /metrics', { timeout: 60_000 }, () => {
  it('counts requests, latencies, batches and response classes as traffic arrives', async () => {
    const before = await scrape();
    const model = { model_name: 'affine', model_version: 'default' };
    const n = 5;
    for (let i = 0; i < n; i++)
      expect((await call(ops.api, 'POST', '/predictions/affine', { body: affineInput([i, i, i, i]) })).status).toBe(
        200,
      );
    expect(
      (
        await call(ops.api, 'POST', '/predictions/affine', {
          body: { inputs: { nope: { shape: [1, 4], data: [1, 2, 3, 4] } } },
        })
      ).status,
    ).toBe(400);
    expect((await call(ops.api, 'GET', '/models/nope')).status).toBe(404);
    const after = await scrape();

    expect(
      sample(after, 'ts_inference_requests_total', model) - sample(before, 'ts_inference_requests_total', model),
    ).toBe(n + 1);
    expect(sample(after, 'ts_inference_latency_microseconds', model)).toBeGreaterThan(
      sample(before, 'ts_inference_latency_microseconds', model),
    );
    expect(sample(after, 'ts_queue_latency_microseconds', model)).toBeGreaterThanOrEqual(
      sample(before, 'ts_queue_latency_microseconds', model),
    );
    const ok = { model_name: 'affine', model_version: '1.0', status_code: '200' };
    expect(sample(after, 'marina_requests_total', ok) - sample(before, 'marina_requests_total', ok)).toBe(n);
    expect(
      sample(after, 'marina_requests_total', { ...ok, status_code: '400' }) -
        sample(before, 'marina_requests_total', { ...ok, status_code: '400' }),
    ).toBe(1);
    expect(sample(after, 'marina_request_latency_seconds_count', { model_name: 'affine' })).toBe(
      sample(before, 'marina_request_latency_seconds_count', { model_name: 'affine' }) + n + 1,
    );
    expect(sample(after, 'marina_batch_size_count', { model_name: 'affine' })).toBeGreaterThan(
      sample(before, 'marina_batch_size_count', { model_name: 'affine' }),
    );

    // TorchServe's frontend counters, for every response of the inference/management listener.
    const host = { Level: 'Host' };
    expect(sample(after, 'Requests2XX', host) - sample(before, 'Requests2XX', host)).toBe(n);
    expect(sample(after, 'Requests4XX', host) - sample(before, 'Requests4XX', host)).toBe(2);
    expect(after).toContain('# HELP Requests5XX Torchserve prometheus counter metric with unit: Count');

    expect(sample(after, 'marina_workers', { model_name: 'affine', model_version: '1.0' })).toBe(1);
    expect(sample(after, 'marina_queue_capacity', { model_name: 'affine', model_version: '1.0' })).toBe(100);
  });

  it("writes TorchServe's metrics in TorchServe's exposition form, Marina's in the standard one", async () => {
    expect((await call(ops.api, 'POST', '/predictions/affine', { body: affineInput([1, 2, 3, 4]) })).status).toBe(200);
    const text = await scrape();
    // TorchServe's form (its Prometheus Java simpleclient; docs/metrics_api.md in pytorch/serve):
    //   ts_inference_requests_total{model_name="mnist",model_version="default",hostname="...",} 1.0
    //   Requests2XX{Level="Host",Hostname="...",} 8.0
    expect(text).toMatch(
      /^ts_inference_requests_total\{model_name="affine",model_version="default",hostname="[^"]+",\} [1-9]\d*\.\d+(E\d+)?$/m,
    );
    expect(text).toMatch(/^Requests2XX\{Level="Host",Hostname="[^"]+",\} [1-9]\d*\.\d+(E\d+)?$/m);
    expect(text).toMatch(/^ts_inference_latency_microseconds\{[^}]*hostname="[^"]+",\} \d+\.\d+(E\d+)?$/m);
    for (const line of text.split('\n').filter((l) => l.startsWith('marina_'))) expect(line, line).not.toMatch(/,\} /);
    // A Prometheus text parser reads both forms, with the same labels and values.
    const families = new Map(parsePrometheusTextFormat(text).map((family) => [family.name, family]));
    const requests = families.get('ts_inference_requests_total');
    expect(requests?.type).toBe('COUNTER');
    const affine = requests?.metrics.find((m) => m.labels?.model_name === 'affine');
    expect(affine?.labels).toEqual({ model_name: 'affine', model_version: 'default', hostname: expect.any(String) });
    expect(Number(affine?.value)).toBe(sample(text, 'ts_inference_requests_total', { model_name: 'affine' }));
    expect(families.get('marina_request_latency_seconds')?.type).toBe('HISTOGRAM');
  });

  it('follows scale changes in the worker gauges and drops unregistered models', async () => {
    expect((await call(ops.api, 'PUT', '/models/affine?min_worker=2&synchronous=true')).status).toBe(200);
    expect(sample(await scrape(), 'marina_workers', { model_name: 'affine' })).toBe(2);
    expect((await call(ops.api, 'DELETE', '/models/affine')).status).toBe(200);
    expect(await scrape()).not.toContain('marina_workers{model_name="affine"');
  });

  it('returns only the metrics named with name[]', async () => {
    const text = await scrape('?name[]=ts_inference_requests_total&name[]=Requests2XX');
    expect(text).toContain('# TYPE ts_inference_requests_total counter');
    expect(text).toContain('# TYPE Requests2XX counter');
    expect(text).not.toContain('marina_requests_total');
  });
});
