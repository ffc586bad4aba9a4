import { describe, expect, it } from 'vitest';
import { Histogram, Registry } from 'prom-client';
import { RequestHistogram } from '../src/metrics/request-histogram.ts';
import { LATENCY_BUCKETS_SECONDS } from '../src/metrics/model-version-metrics.ts';

/** The same metric twice: prom-client's own Histogram and RequestHistogram, each in a registry of its own. */
function pair() {
  const reference = new Registry();
  const fast = new Registry();
  const options = {
    name: 'marina_test_latency_seconds',
    help: 'A latency, seconds.',
    labelNames: ['model_name', 'model_version'] as const,
    buckets: LATENCY_BUCKETS_SECONDS,
  };
  const histogram = new Histogram({ ...options, registers: [reference] });
  const requestHistogram = new RequestHistogram({ ...options, registers: [fast] });
  return { reference, fast, histogram, requestHistogram };
}

// Values on both sides of every bound, exactly on bounds, zero, and above the last bound (+Inf only).
const values = [0, 0.0001, 0.0005, 0.00050001, 0.001, 0.003, 0.0099, 0.01, 0.2, 0.25, 1, 7.5, 120, 121, 5000];

describe('RequestHistogram', () => {
  it('renders exactly what prom-client renders for the same observations, per label set', async () => {
    const { reference, fast, histogram, requestHistogram } = pair();
    const labelSets = [
      { model_name: 'resnet', model_version: '1.0' },
      { model_name: 'tiny', model_version: '2' },
    ];
    const cells = labelSets.map((labels) => requestHistogram.cell(labels));
    values.forEach((value, i) => {
      const k = i % 2;
      histogram.observe(labelSets[k]!, value);
      requestHistogram.observe(cells[k]!, value);
    });
    const text = await fast.metrics();
    expect(text).toBe(await reference.metrics());
    expect(text).toContain('marina_test_latency_seconds_bucket{le="+Inf",model_name="resnet",model_version="1.0"} 8');
    expect(await fast.getMetricsAsJSON()).toEqual(await reference.getMetricsAsJSON());
    expect(await fast.getSingleMetricAsString('marina_test_latency_seconds')).toBe(
      await reference.getSingleMetricAsString('marina_test_latency_seconds'),
    );
  });

  it('gives one cell per label set and shows a label set only once it has been observed', async () => {
    const { fast, requestHistogram } = pair();
    const cell = requestHistogram.cell({ model_name: 'a', model_version: '1' });
    expect(requestHistogram.cell({ model_version: '1', model_name: 'a' })).toBe(cell);
    expect(await fast.metrics()).not.toContain('model_name="a"');
    requestHistogram.observe(cell, 0.002);
    expect(await fast.metrics()).toContain('marina_test_latency_seconds_count{model_name="a",model_version="1"} 1');
  });

  it('forgets its observations on reset, as prom-client does, and counts again from zero', async () => {
    const { reference, fast, histogram, requestHistogram } = pair();
    const labels = { model_name: 'm', model_version: '1' };
    const cell = requestHistogram.cell(labels);
    for (const value of values) {
      histogram.observe(labels, value);
      requestHistogram.observe(cell, value);
    }
    reference.resetMetrics();
    fast.resetMetrics();
    expect(await fast.metrics()).toBe(await reference.metrics());
    histogram.observe(labels, 0.03);
    requestHistogram.observe(cell, 0.03);
    expect(await fast.metrics()).toBe(await reference.metrics());
  });

  it('refuses a label it was not declared with, and a value that is not a finite number', () => {
    const { requestHistogram } = pair();
    expect(() => requestHistogram.cell({ model_name: 'm', status: '200' })).toThrow(/status/);
    const cell = requestHistogram.cell({ model_name: 'm', model_version: '1' });
    expect(() => requestHistogram.observe(cell, Number.NaN)).toThrow(TypeError);
  });
});
