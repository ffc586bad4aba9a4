import { describe, expect, it } from 'vitest';
import { resolveModelSettings } from '../src/model-settings.ts';

const server = {
  defaultWorkersPerModel: undefined,
  jobQueueSize: 100,
  defaultResponseTimeoutSec: 120,
  defaultStartupTimeoutSec: 120,
};

describe('resolveModelSettings precedence: API > model-config.yaml > models JSON > server defaults', () => {
  it('uses the server defaults when nothing is set', () => {
    const s = resolveModelSettings({ modelName: 'm', modelVersion: '1', server });
    expect(s).toMatchObject({
      batchSize: 1,
      maxBatchDelayMs: 100,
      responseTimeoutMs: 120_000,
      startupTimeoutMs: 120_000,
      minWorkers: 1,
      maxWorkers: 1,
      jobQueueSize: 100,
      intraOpNumThreads: undefined,
    });
    expect(
      resolveModelSettings({ modelName: 'm', modelVersion: '1', server: { ...server, defaultWorkersPerModel: 3 } })
        .minWorkers,
    ).toBe(3);
  });

  it('lets the YAML beat the models JSON, and the API beat both', () => {
    const yaml = { batchSize: 4, maxBatchDelay: 50, responseTimeout: 30 };
    const json = { batchSize: 2, maxBatchDelayMs: 10, responseTimeoutSec: 10, minWorkers: 2, maxWorkers: 4 };
    const s = resolveModelSettings({
      modelName: 'm',
      modelVersion: '1',
      server,
      modelYamlConfig: yaml,
      modelsJson: json,
    });
    expect(s).toMatchObject({
      batchSize: 4,
      maxBatchDelayMs: 50,
      responseTimeoutMs: 30_000,
      minWorkers: 2,
      maxWorkers: 4,
    });
    const api = resolveModelSettings({
      modelName: 'm',
      modelVersion: '1',
      server,
      modelYamlConfig: yaml,
      modelsJson: json,
      api: { batchSize: 8, responseTimeoutSec: 5 },
    });
    expect(api).toMatchObject({ batchSize: 8, responseTimeoutMs: 5000 });
    expect(api.sources).toMatchObject({
      batchSize: 'api',
      maxBatchDelayMs: 'model-config.yaml',
      responseTimeoutMs: 'api',
      workers: 'models JSON',
    });
  });

  it("avoids TorchServe's trap: a YAML without responseTimeout does not force 120 s over the models JSON", () => {
    const s = resolveModelSettings({
      modelName: 'm',
      modelVersion: '1',
      server,
      modelYamlConfig: { batchSize: 2 },
      modelsJson: { responseTimeoutSec: 7 },
    });
    expect(s.responseTimeoutMs).toBe(7000);
  });

  it('ignores 0 like TorchServe, except maxBatchDelay 0 and initial_workers 0', () => {
    const s = resolveModelSettings({
      modelName: 'm',
      modelVersion: '1',
      server,
      modelYamlConfig: { batchSize: 0, maxBatchDelay: 0 },
      api: { initialWorkers: 0 },
    });
    expect(s).toMatchObject({ batchSize: 1, maxBatchDelayMs: 0, minWorkers: 0, maxWorkers: 0 });
  });

  it('rejects a value of the wrong type, naming the key and where it came from', () => {
    expect(() =>
      resolveModelSettings({ modelName: 'm', modelVersion: '1', server, modelYamlConfig: { batchSize: 'eight' } }),
    ).toThrow(/batchSize from model-config.yaml must be an integer, got "eight"/);
  });
});
