/**
 * Every metric the Grafana dashboard (deploy/grafana/marina-dashboard.json) and the KEDA
 * ScaledObject query is one that a running server exports: a real `serve --foreground` answers a
 * few predictions, then its /metrics is compared with the names and labels in each PromQL query.
 */
import { mkdirSync, readFileSync, rmSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startForegroundServer, writeGatedModel, type ForegroundServer } from './deploy-helpers.ts';
import { makeTempDir, repoRoot } from './helpers.ts';

/** PromQL words that are not metric names: functions, aggregations, keywords. */
const PROMQL_WORDS = new Set([
  'sum',
  'avg',
  'min',
  'max',
  'count',
  'by',
  'without',
  'rate',
  'irate',
  'increase',
  'histogram_quantile',
  'on',
  'ignoring',
  'group_left',
  'group_right',
  'and',
  'or',
  'unless',
  'offset',
  'bool',
  'label_values',
]);

/** The metric names of a PromQL expression, and the label names each selector and each `by (...)` uses. */
function parseQuery(expr: string): { metrics: Map<string, Set<string>>; groupingLabels: Set<string> } {
  const metrics = new Map<string, Set<string>>();
  const groupingLabels = new Set<string>();
  let rest = expr.replace(/\[[^\]]*\]/g, ' ');
  for (const match of rest.matchAll(/\b(?:by|without)\s*\(([^)]*)\)/g))
    for (const label of match[1]!.split(',')) groupingLabels.add(label.trim());
  rest = rest.replace(/\b(?:by|without)\s*\([^)]*\)/g, ' ');
  for (const match of rest.matchAll(/([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{([^}]*)\}/g)) {
    const labels = metrics.get(match[1]!) ?? new Set<string>();
    for (const matcher of match[2]!.matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)/g)) labels.add(matcher[1]!);
    metrics.set(match[1]!, labels);
  }
  rest = rest.replace(/\{[^}]*\}/g, ' ');
  for (const word of rest.match(/[a-zA-Z_:][a-zA-Z0-9_:]*/g) ?? []) {
    if (!PROMQL_WORDS.has(word) && !metrics.has(word)) metrics.set(word, new Set());
  }
  return { metrics, groupingLabels };
}

/** Sample name → the label names it carries, from Prometheus text format. */
function exported(text: string): Map<string, Set<string>> {
  const samples = new Map<string, Set<string>>();
  for (const line of text.split('\n')) {
    const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{([^}]*)\})? /.exec(line);
    if (!match) continue;
    const labels = samples.get(match[1]!) ?? new Set<string>();
    for (const pair of (match[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="/g)) labels.add(pair[1]!);
    samples.set(match[1]!, labels);
  }
  return samples;
}

/** Labels Prometheus itself attaches when it scrapes (the ServiceMonitor's target labels). */
const SCRAPE_LABELS = new Set(['job', 'instance', 'pod', 'namespace', 'service', 'container', 'endpoint']);

let cwd: string;
let server: ForegroundServer;
let samples: Map<string, Set<string>>;

beforeAll(async () => {
  cwd = makeTempDir('grafana');
  const store = path.join(cwd, 'store');
  mkdirSync(store);
  writeGatedModel(store);
  server = await startForegroundServer(cwd, { store });
  // Histograms and per-status counters have samples once something was answered.
  for (let i = 0; i < 3; i++) {
    const response = await fetch(`${server.inferenceUrl}/predictions/gated`, {
      method: 'POST',
      headers: { authorization: `Bearer ${server.keys.inference}`, 'content-type': 'application/json' },
      body: `{"value":${i}}`,
    });
    expect(response.status).toBe(200);
  }
  samples = exported(await (await fetch(`${server.metricsUrl}/metrics`)).text());
}, 120_000);

afterAll(async () => {
  if (server && server.child.exitCode === null) {
    server.child.kill('SIGTERM');
    await server.exited;
  }
  if (cwd) rmSync(cwd, { recursive: true, force: true });
});

function checkQuery(where: string, expr: string): void {
  const { metrics, groupingLabels } = parseQuery(expr.replaceAll('$__rate_interval', '1m'));
  expect(metrics.size, `${where}: ${expr} names no metric`).toBeGreaterThan(0);
  const labelsOfQuery = new Set<string>();
  for (const [name, labels] of metrics) {
    const live = samples.get(name);
    expect(live, `${where}: ${name} is not exported by a running server`).toBeDefined();
    for (const label of live!) labelsOfQuery.add(label);
    for (const label of labels)
      if (!SCRAPE_LABELS.has(label)) expect(live!.has(label), `${where}: ${name} has no label ${label}`).toBe(true);
  }
  for (const label of groupingLabels)
    if (!SCRAPE_LABELS.has(label))
      expect(labelsOfQuery.has(label), `${where}: no metric of ${expr} has the label ${label}`).toBe(true);
}

describe('deploy/grafana/marina-dashboard.json against a live server', { timeout: 30_000 }, () => {
  const dashboard = JSON.parse(readFileSync(path.join(repoRoot, 'deploy/grafana/marina-dashboard.json'), 'utf8')) as {
    panels: Array<{ title: string; targets: Array<{ expr: string }> }>;
    templating: { list: Array<{ name: string; query: unknown }> };
  };

  it('covers throughput, latency quantiles, queue depth, batch size, workers, memory, and versions (split, weights, shadow agreement and drops)', () => {
    const exprs = dashboard.panels.flatMap((panel) => panel.targets.map((target) => target.expr)).join('\n');
    for (const metric of [
      'marina_requests_total',
      'marina_request_latency_seconds_bucket',
      'marina_queue_depth',
      'marina_batch_size_sum',
      'marina_workers',
      'process_resident_memory_bytes',
      'marina_shadow_agreement_sum',
      'marina_shadow_compared_total',
      'marina_shadow_requests_total',
      'marina_shadow_dropped_total',
      'marina_traffic_weight',
    ])
      expect(exprs).toContain(metric);
    expect(exprs).toMatch(/histogram_quantile\(0\.99,/);
  });

  it('uses only metrics and labels that the server exports', () => {
    for (const panel of dashboard.panels)
      for (const target of panel.targets) checkQuery(`panel '${panel.title}'`, target.expr);
    for (const variable of dashboard.templating.list) {
      if (typeof variable.query !== 'string' || !variable.query.startsWith('label_values(')) continue;
      const [, metric, label] = /^label_values\((\w+),\s*(\w+)\)$/.exec(variable.query)!;
      expect(samples.has(metric!), `variable ${variable.name}: ${metric}`).toBe(true);
      if (!SCRAPE_LABELS.has(label!))
        expect(samples.get(metric!)!.has(label!), `variable ${variable.name}: ${metric} has no label ${label}`).toBe(
          true,
        );
    }
  });

  it('the KEDA ScaledObject scales on a queue-depth metric the server exports', () => {
    const scaledObject = readFileSync(path.join(repoRoot, 'deploy/kubernetes/scaledobject.yaml'), 'utf8');
    const query = /query: (.+)/.exec(scaledObject)![1]!;
    checkQuery('ScaledObject', query);
    expect(samples.has('marina_queue_depth')).toBe(true);
  });

  it('catches a metric the server does not export', () => {
    expect(() => checkQuery('negative control', 'sum(rate(marina_no_such_metric{model_name="x"}[1m]))')).toThrow(
      /not exported/,
    );
    expect(() => checkQuery('negative control', 'sum by (no_such_label) (marina_queue_depth)')).toThrow(
      /no_such_label/,
    );
  });
});
