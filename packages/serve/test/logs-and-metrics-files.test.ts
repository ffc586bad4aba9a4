/**
 * TorchServe's log files and metric names from a real server: under LOG_LOCATION, access_log.log
 * has one line per request (failed ones too: 401, 404, 413) with time, level, request id, client,
 * method, path, status and duration; ts_log.log and model_log.log have a time and a level on
 * every line. /metrics has TorchServe's system, frontend and backend gauges with its labels, and
 * metrics_mode=log writes ts_metrics.log and model_metrics.log under METRICS_LOCATION (both files
 * exist from start-up in every mode, as TorchServe's log4j2 creates them).
 */
import { readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServer } from '../src/start-server.ts';
import { loadConfig } from '../src/config/load-config.ts';
import { affineInput, call, createWorkspace, opsConfig, packModel, type Workspace } from './ops-harness.ts';

const LINE = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d,\d{3} \[(INFO |WARN |ERROR|DEBUG)\] \S+ \S+ - .+$/;

let workspace: Workspace;
beforeAll(async () => {
  workspace = await createWorkspace('marina-logs-');
  await packModel(workspace.store, { modelName: 'affine' });
}, 60_000);
afterAll(() => workspace?.cleanup());

const lines = async (file: string) => (await readFile(file, 'utf8')).split('\n').filter(Boolean);

describe('log files under LOG_LOCATION', () => {
  it('writes one access_log line per request, failed ones included, and time and level on every line of every file', async () => {
    const logDir = join(workspace.root, 'logs-a');
    const config = opsConfig(workspace, {
      load_models: 'affine.mar',
      disable_token_authorization: 'false',
      max_request_size: '1000',
    });
    const server = await startServer({ ...config, logDir, keyFilePath: join(workspace.root, 'key_file.json') });
    const api = server.listening.find((l) => l.api === 'inference')!.url;
    const keys = JSON.parse(await readFile(join(workspace.root, 'key_file.json'), 'utf8'));
    const token = keys.inference.key as string;
    const sent: Array<{ method: string; path: string; status: number; requestId: string }> = [];
    const send = async (method: string, path: string, options: { token?: string; body?: unknown } = {}) => {
      const result = await call(api, method, path, options);
      sent.push({ method, path, status: result.status, requestId: result.headers.get('x-request-id')! });
      return result;
    };
    try {
      expect((await send('GET', '/ping', { token })).status).toBe(200);
      expect((await send('POST', '/predictions/affine', { body: affineInput([1, 2, 3, 4]) })).status).toBe(401);
      expect((await send('GET', '/no/such/route', { token })).status).toBe(404);
      expect((await send('POST', '/predictions/affine', { token, body: { padding: 'x'.repeat(2000) } })).status).toBe(
        413,
      );
      expect((await send('POST', '/predictions/affine', { token, body: affineInput([1, 2, 3, 4]) })).status).toBe(200);
    } finally {
      await server.close();
    }
    const access = await lines(join(logDir, 'access_log.log'));
    expect(access).toHaveLength(sent.length);
    sent.forEach((request, i) => {
      const line = access[i]!;
      expect(line).toMatch(LINE);
      const path = request.path.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&');
      expect(line).toMatch(
        new RegExp(
          `\\[INFO \\] ${request.requestId} ACCESS_LOG - /127\\.0\\.0\\.1:\\d+ "${request.method} ${path} HTTP/1\\.1" ${request.status} \\d+$`,
        ),
      );
    });
    const ts = await lines(join(logDir, 'ts_log.log'));
    expect(ts.length).toBeGreaterThan(0);
    for (const line of ts) expect(line).toMatch(LINE);
    expect(ts.join('\n')).toContain('Model loaded: affine (version 1.0)');
    const model = await lines(join(logDir, 'model_log.log'));
    expect(model.some((line) => /W-\d+-affine_1\.0: model affine version 1\.0 loaded in \d+ ms$/.test(line))).toBe(
      true,
    );
    for (const line of model) expect(line).toMatch(LINE);
  }, 60_000);
});

describe('metrics', () => {
  it("exposes TorchServe's system, frontend and backend gauges with its labels next to Marina's histograms", async () => {
    const metricsLogDir = join(workspace.root, 'metrics-b');
    const server = await startServer({
      ...opsConfig(workspace, { load_models: 'affine.mar' }),
      logDir: join(workspace.root, 'logs-b'),
      metricsLogDir,
    });
    try {
      // TorchServe's log4j2 creates both metric files at start-up; with metrics_mode=prometheus nothing is written to them.
      for (const file of ['ts_metrics.log', 'model_metrics.log'])
        expect((await stat(join(metricsLogDir, file))).size, file).toBe(0);
      const api = server.listening.find((l) => l.api === 'inference')!.url;
      const metricsUrl = server.listening.find((l) => l.api === 'metrics')!.url;
      expect((await call(api, 'POST', '/predictions/affine', { body: affineInput([1, 2, 3, 4]) })).status).toBe(200);
      const text = (await call(metricsUrl, 'GET', '/metrics')).text;
      for (const name of [
        'CPUUtilization',
        'MemoryUsed',
        'MemoryAvailable',
        'MemoryUtilization',
        'DiskUsage',
        'DiskUtilization',
        'DiskAvailable',
        'QueueTime',
        'WorkerThreadTime',
      ]) {
        expect(text, name).toContain(`# TYPE ${name} gauge`);
        expect(text, name).toMatch(new RegExp(`^${name}\\{Level="Host",Hostname="[^"]+",\\} [0-9.E+-]+$`, 'm'));
      }
      expect(text).toContain('# HELP CPUUtilization Torchserve prometheus gauge metric with unit: Percent');
      expect(text).toMatch(
        /^WorkerLoadTime\{WorkerName="W-\d+-affine_1\.0",Level="Host",Hostname="[^"]+",\} [0-9.E+-]+$/m,
      );
      for (const name of ['HandlerTime', 'PredictionTime'])
        expect(text, name).toMatch(
          new RegExp(`^${name}\\{ModelName="affine",Level="Model",Hostname="[^"]+",\\} [0-9.E+-]+$`, 'm'),
        );
      expect(text).toMatch(
        /^ts_inference_requests_total\{model_name="affine",model_version="default",hostname="[^"]+",\} 1\.0$/m,
      );
      expect(text).toMatch(/^Requests2XX\{Level="Host",Hostname="[^"]+",\} [1-9]\d*\.0$/m);
      expect(text).toContain('marina_request_latency_seconds_bucket');
    } finally {
      await server.close();
    }
  }, 60_000);

  it("with metrics_mode=log writes ts_metrics.log and model_metrics.log in TorchServe's line form", async () => {
    const logDir = join(workspace.root, 'logs-c');
    const metricsLogDir = join(workspace.root, 'metrics-c');
    const server = await startServer({
      ...opsConfig(workspace, { load_models: 'affine.mar', metrics_mode: 'log', enable_metrics_api: 'false' }),
      logDir,
      metricsLogDir,
    });
    try {
      const api = server.listening.find((l) => l.api === 'inference')!.url;
      expect(server.listening.map((l) => l.api)).not.toContain('metrics');
      expect((await call(api, 'POST', '/predictions/affine', { body: affineInput([1, 2, 3, 4]) })).status).toBe(200);
    } finally {
      await server.close();
    }
    await expect(stat(join(logDir, 'ts_metrics.log'))).rejects.toMatchObject({ code: 'ENOENT' });
    const tsMetrics = await readFile(join(metricsLogDir, 'ts_metrics.log'), 'utf8');
    expect(tsMetrics).toMatch(
      /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d,\d{3} - CPUUtilization\.Percent:[0-9.]+\|#Level:Host\|#hostname:[^,]+,timestamp:\d+$/m,
    );
    expect(tsMetrics).toMatch(/ - Requests2XX\.Count:1\|#Level:Host\|#hostname:[^,]+,timestamp:\d+$/m);
    expect(tsMetrics).toMatch(/ - QueueTime\.Milliseconds:[0-9.]+\|#Level:Host\|/m);
    expect(tsMetrics).toMatch(/ - WorkerLoadTime\.Milliseconds:[0-9.]+\|#WorkerName:W-\d+-affine_1\.0,Level:Host\|/m);
    const modelMetrics = await readFile(join(metricsLogDir, 'model_metrics.log'), 'utf8');
    expect(modelMetrics).toMatch(
      / - HandlerTime\.ms:[0-9.]+\|#ModelName:affine,Level:Model\|#type:GAUGE\|#hostname:[^,]+,timestamp:\d+$/m,
    );
    expect(modelMetrics).toMatch(/ - PredictionTime\.ms:[0-9.]+\|#ModelName:affine,Level:Model\|/m);
  }, 60_000);
});

describe('where the log files go', () => {
  it('reads LOG_LOCATION and METRICS_LOCATION as TorchServe, each defaulting to logs/ in the working directory', async () => {
    const cwd = workspace.root;
    const defaults = await loadConfig({ cliOptions: { ncs: true, modelStore: workspace.store }, env: {}, cwd });
    expect(defaults.logDir).toBe(join(cwd, 'logs'));
    expect(defaults.metricsLogDir).toBe(join(cwd, 'logs'));
    const set = await loadConfig({
      cliOptions: { ncs: true, modelStore: workspace.store },
      env: { LOG_LOCATION: 'a', METRICS_LOCATION: '/tmp/b' },
      cwd,
    });
    expect(set.logDir).toBe(join(cwd, 'a'));
    expect(set.metricsLogDir).toBe('/tmp/b');
  });
});
