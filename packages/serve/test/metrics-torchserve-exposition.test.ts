/**
 * TorchServe's exposition form, line by line: the comma after the last label and Java's
 * Double.toString values of its Prometheus simpleclient (the forms in pytorch/serve's
 * docs/metrics_api.md: `...hostname="h",} 1.0`, `5484021.691000001`).
 */
import { describe, expect, it } from 'vitest';
import { javaDoubleString, toTorchServeExposition } from '../src/metrics/torchserve-exposition.ts';

describe("TorchServe's exposition form", () => {
  it.each([
    [9, '9.0'],
    [0, '0.0'],
    [78, '78.0'],
    [62.78, '62.78'],
    [5484021.691000001, '5484021.691000001'],
    [9999999, '9999999.0'],
    [12345678, '1.2345678E7'],
    [1e7, '1.0E7'],
    [0.001, '0.001'],
    [0.0001, '1.0E-4'],
    [-3, '-3.0'],
    [Number.POSITIVE_INFINITY, '+Inf'],
    [Number.NaN, 'NaN'],
  ])('writes %d as Java does: %s', (value, text) => {
    expect(javaDoubleString(value)).toBe(text);
  });

  it("rewrites TorchServe's families only, and leaves HELP, TYPE and Marina's lines as they are", () => {
    const standard = [
      '# HELP ts_inference_requests_total Torchserve prometheus counter metric with unit: Count',
      '# TYPE ts_inference_requests_total counter',
      'ts_inference_requests_total{model_name="noop",model_version="default",hostname="h"} 9',
      'Requests2XX{Level="Host",Hostname="h"} 78',
      'ts_inference_latency_microseconds{model_name="noop",model_version="default",hostname="h"} 12345678',
      'marina_requests_total{model_name="noop",model_version="1.0",status_code="200"} 9',
      'marina_batch_size_bucket{le="+Inf",model_name="noop",model_version="1.0"} 9',
      'process_cpu_user_seconds_total 0.5',
      '',
    ].join('\n');
    expect(toTorchServeExposition(standard)).toBe(
      [
        '# HELP ts_inference_requests_total Torchserve prometheus counter metric with unit: Count',
        '# TYPE ts_inference_requests_total counter',
        'ts_inference_requests_total{model_name="noop",model_version="default",hostname="h",} 9.0',
        'Requests2XX{Level="Host",Hostname="h",} 78.0',
        'ts_inference_latency_microseconds{model_name="noop",model_version="default",hostname="h",} 1.2345678E7',
        'marina_requests_total{model_name="noop",model_version="1.0",status_code="200"} 9',
        'marina_batch_size_bucket{le="+Inf",model_name="noop",model_version="1.0"} 9',
        'process_cpu_user_seconds_total 0.5',
        '',
      ].join('\n'),
    );
  });
});
