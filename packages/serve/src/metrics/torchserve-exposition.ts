/**
 * TorchServe's exact exposition form for TorchServe's own metric names. TorchServe writes its
 * metrics with the Prometheus Java simpleclient (TextFormat 0.0.4), which puts a comma after the
 * last label and prints values with Java's `Double.toString`:
 *
 *     ts_inference_requests_total{model_name="noop",model_version="default",hostname="h",} 9.0
 *     Requests2XX{Level="Host",Hostname="h",} 78.0
 *
 * TorchServe's Postman collections and users' scripts grep for that form. Both forms are valid
 * Prometheus text, so Prometheus scrapes either; Marina's own metrics (`marina_*`, the histograms
 * among them) keep the standard form.
 */

/** TorchServe's frontend, system and model metric names (ts/configs/metrics.yaml, MetricBuilder.java). */
const TORCHSERVE_NAMES: ReadonlySet<string> = new Set([
  'Requests2XX',
  'Requests4XX',
  'Requests5XX',
  'QueueTime',
  'WorkerThreadTime',
  'WorkerLoadTime',
  'CPUUtilization',
  'MemoryUsed',
  'MemoryAvailable',
  'MemoryUtilization',
  'DiskUsage',
  'DiskAvailable',
  'DiskUtilization',
  'GPUMemoryUtilization',
  'GPUMemoryUsed',
  'GPUUtilization',
  'HandlerTime',
  'PredictionTime',
]);

/** Whether a metric family is one of TorchServe's own (`ts_*` and the names above); Marina's and Node's keep the standard form. */
function isTorchServeMetric(name: string): boolean {
  return name.startsWith('ts_') || TORCHSERVE_NAMES.has(name);
}

/**
 * Java's `Double.toString`: at least one digit after the point (`9.0`), plain decimals for
 * 10⁻³ ≤ |v| < 10⁷, else computerized scientific notation (`1.2345678E7`, `1.0E-4`); `NaN`,
 * `+Inf`, `-Inf` as simpleclient writes them.
 */
export function javaDoubleString(value: number): string {
  if (Number.isNaN(value)) return 'NaN';
  if (value === Number.POSITIVE_INFINITY) return '+Inf';
  if (value === Number.NEGATIVE_INFINITY) return '-Inf';
  if (value === 0) return Object.is(value, -0) ? '-0.0' : '0.0';
  const magnitude = Math.abs(value);
  if (magnitude >= 1e-3 && magnitude < 1e7) {
    const plain = String(value);
    // String() switches to exponents only below 1e-6, outside this range; integers need ".0".
    return plain.includes('.') ? plain : `${plain}.0`;
  }
  const [mantissa = '0', exponent = '0'] = value.toExponential().split('e');
  const digits = mantissa.includes('.') ? mantissa : `${mantissa}.0`;
  return `${digits}E${Number(exponent)}`;
}

const SAMPLE = /^([A-Za-z_:][A-Za-z0-9_:]*)(\{.*\})?\s+(\S+)(\s+\S+)?$/;

/** Rewrites the sample lines of TorchServe's metric families in `text` into TorchServe's form; other lines stay. */
export function toTorchServeExposition(text: string): string {
  return text
    .split('\n')
    .map((line) => {
      if (line === '' || line.startsWith('#')) return line;
      const match = SAMPLE.exec(line);
      if (!match) return line;
      const [, name = '', labels, value = '', timestamp = ''] = match;
      if (!isTorchServeMetric(name)) return line;
      const number =
        value === '+Inf' ? Number.POSITIVE_INFINITY : value === '-Inf' ? Number.NEGATIVE_INFINITY : Number(value);
      const shown = Number.isNaN(number) && value !== 'NaN' ? value : javaDoubleString(number);
      const withComma = labels === undefined || labels === '{}' ? (labels ?? '') : `${labels.slice(0, -1)},}`;
      return `${name}${withComma} ${shown}${timestamp}`;
    })
    .join('\n');
}
