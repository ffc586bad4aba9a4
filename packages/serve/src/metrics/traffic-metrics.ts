import { Counter, Gauge, type Registry } from 'prom-client';
import type { ModelRegistryApi, ShadowStats } from '../registry/model-registry-api.ts';

const MODEL_LABELS = ['model_name', 'model_version'] as const;

/**
 * Traffic per version: the shadow's counters and agreement, and the traffic policy's weights. Read
 * at scrape time from their one owner (the registry); present at 0 for every registered version,
 * so rate() and the dashboard's panels work before the first shadow copy.
 */
export function registerTrafficMetrics(options: { promRegistry: Registry; registry: ModelRegistryApi }): void {
  const { promRegistry, registry } = options;
  const shadowCounter = (name: string, help: string, value: (s: ShadowStats) => number) =>
    new Counter({
      name,
      help,
      labelNames: MODEL_LABELS,
      registers: [promRegistry],
      collect() {
        this.reset();
        for (const s of registry.shadowStats())
          this.inc({ model_name: s.modelName, model_version: s.modelVersion }, value(s));
      },
    });
  new Counter({
    name: 'marina_shadow_requests_total',
    help: 'Shadow copies of live requests a shadow version ran, by result (ok: answered, error: failed); their answers reach no client.',
    labelNames: [...MODEL_LABELS, 'result'] as const,
    registers: [promRegistry],
    collect() {
      this.reset();
      for (const s of registry.shadowStats()) {
        const labels = { model_name: s.modelName, model_version: s.modelVersion };
        this.inc({ ...labels, result: 'ok' }, s.requests - s.failed);
        this.inc({ ...labels, result: 'error' }, s.failed);
      }
    },
  });
  shadowCounter(
    'marina_shadow_dropped_total',
    'Shadow copies shed before they ran: no headroom (no idle worker of the shadow version, requests waiting for the live version, or CPU pressure at or above shadow_max_cpu_pressure) until the shadow queue was full or 10 s passed, or the version refused the copy.',
    (s) => s.dropped,
  );
  shadowCounter(
    'marina_shadow_compared_total',
    "Shadow answers compared with the live answer (the same handler's output: top-1, IoU or cosine).",
    (s) => s.compared,
  );
  shadowCounter(
    'marina_shadow_agreement_sum',
    'Sum of the per-request agreement (0 to 1) of the compared shadow answers; divided by marina_shadow_compared_total it is the mean agreement over any window.',
    (s) => s.agreementSum,
  );
  new Gauge({
    name: 'marina_shadow_agreement',
    help: "A shadow version's mean agreement with the live answers so far, 0 to 1 (present once an answer was compared).",
    labelNames: MODEL_LABELS,
    registers: [promRegistry],
    collect() {
      this.reset();
      for (const s of registry.shadowStats())
        if (s.compared > 0)
          this.set({ model_name: s.modelName, model_version: s.modelVersion }, s.agreementSum / s.compared);
    },
  });
  registerTrafficWeights(options);
}

/** marina_traffic_weight: each version's share of the requests that name no version. */
function registerTrafficWeights(options: { promRegistry: Registry; registry: ModelRegistryApi }): void {
  const { registry } = options;
  new Gauge({
    name: 'marina_traffic_weight',
    help: "A version's share of the requests that name no version, percent, from its model's traffic policy (100 for the default version without one).",
    labelNames: MODEL_LABELS,
    registers: [options.promRegistry],
    collect() {
      this.reset();
      for (const model of registry.list()) {
        let weights: Record<string, number>;
        try {
          weights = registry.getTrafficPolicy(model.modelName).weights ?? {};
        } catch {
          continue; // Unregistered between list() and here.
        }
        for (const version of model.versions)
          this.set({ model_name: model.modelName, model_version: version }, weights[version] ?? 0);
      }
    },
  });
}
