import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import type { ModelRegistryApi, RequestDoneEvent, ResidencyEvent } from '../registry/model-registry-api.ts';

/** Buckets of marina_model_load_seconds: a tiny model loads in tens of ms, a large one in seconds. */
const LOAD_BUCKETS = [0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120];

/**
 * The metrics of which models are in memory: marina_resident_models and marina_resident_bytes
 * (read from the registry at scrape time), marina_model_loads_total{model_name,reason},
 * marina_model_evictions_total{model_name}, marina_model_load_seconds and
 * marina_requests_waited_for_load_total{model_name}. Returns the unsubscribe.
 */
export function registerResidencyMetrics(options: { promRegistry: Registry; registry: ModelRegistryApi }): () => void {
  const { promRegistry, registry } = options;
  const residentModels = new Gauge({
    name: 'marina_resident_models',
    help: 'Model versions resident now (sessions created, workers may run).',
    registers: [promRegistry],
  });
  const residentBytes = new Gauge({
    name: 'marina_resident_bytes',
    help: 'Process memory the resident model versions added when they loaded, bytes (measured before and after each load).',
    registers: [promRegistry],
  });
  const collect = (): void => {
    let models = 0;
    let bytes = 0;
    for (const s of registry.stats()) {
      if (s.state !== 'resident') continue;
      models++;
      bytes += s.residentBytes ?? 0;
    }
    residentModels.set(models);
    residentBytes.set(bytes);
  };
  (residentModels as unknown as { collect: () => void }).collect = collect;
  (residentBytes as unknown as { collect: () => void }).collect = collect;
  const loads = new Counter({
    name: 'marina_model_loads_total',
    help: 'Loads of a model (it became resident), by why: startup, demand (a request for a registered model) or api.',
    labelNames: ['model_name', 'reason'] as const,
    registers: [promRegistry],
  });
  const evictions = new Counter({
    name: 'marina_model_evictions_total',
    help: 'Unloads of a model to make room under model_memory_budget (idle models first, the least asked-for and least recently used first).',
    labelNames: ['model_name'] as const,
    registers: [promRegistry],
  });
  const loadSeconds = new Histogram({
    name: 'marina_model_load_seconds',
    help: 'Time from the start of a load (room made under the budget included) to resident, seconds.',
    labelNames: ['model_name'] as const,
    buckets: LOAD_BUCKETS,
    registers: [promRegistry],
  });
  const waited = new Counter({
    name: 'marina_requests_waited_for_load_total',
    help: 'Inference requests that arrived while their model was not resident and waited for its load.',
    labelNames: ['model_name'] as const,
    registers: [promRegistry],
  });
  const onResidency = (event: ResidencyEvent): void => {
    if (event.state === 'resident') {
      loads.inc({ model_name: event.modelName, reason: event.reason });
      if (event.loadMs !== undefined) loadSeconds.observe({ model_name: event.modelName }, event.loadMs / 1000);
    } else if (event.state === 'registered' && event.reason === 'evicted') {
      evictions.inc({ model_name: event.modelName });
    }
  };
  const onRequest = (event: RequestDoneEvent): void => {
    if (event.waitedForLoad) waited.inc({ model_name: event.modelName });
  };
  registry.events.on('residency', onResidency);
  registry.events.on('request', onRequest);
  return () => {
    registry.events.off('residency', onResidency);
    registry.events.off('request', onRequest);
  };
}
