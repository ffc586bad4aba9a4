import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { loadConfig } from '../src/config/load-config.ts';
import { useTempDirs } from './temp-dirs.ts';

const newTempDir = useTempDirs('marina-config-defaults-');

function emptyDir(): string {
  return newTempDir();
}

describe('configuration defaults without any file, flag or variable', () => {
  it('binds every API to 127.0.0.1 on TorchServe ports and keeps token authorization on', async () => {
    const cwd = emptyDir();
    const config = await loadConfig({ cliOptions: {}, env: {}, cwd });
    expect(config.inferenceAddress).toEqual({
      protocol: 'http',
      host: '127.0.0.1',
      port: 8080,
      raw: 'http://127.0.0.1:8080',
    });
    expect(config.managementAddress).toMatchObject({ host: '127.0.0.1', port: 8081 });
    expect(config.metricsAddress).toMatchObject({ host: '127.0.0.1', port: 8082 });
    expect(config.disableTokenAuthorization).toBe(false);
    expect(config.enableModelApi).toBe(false);
    expect(config.enableMetricsApi).toBe(true);
  });

  it('uses TorchServe defaults for queue, timeouts and sizes, and 1 worker per model', async () => {
    const cwd = emptyDir();
    const config = await loadConfig({ cliOptions: {}, env: {}, cwd });
    expect(config).toMatchObject({
      modelStore: undefined,
      loadModels: [],
      models: {},
      defaultWorkersPerModel: undefined,
      jobQueueSize: 100,
      numberOfNettyThreads: 0,
      defaultResponseTimeoutSec: 120,
      defaultStartupTimeoutSec: 120,
      maxRequestBytes: 6553500,
      maxResponseBytes: 6553500,
      allowedUrls: ['file://.*|http(s)?://.*'],
      isAllowedUrlsDefault: true,
      tokenExpirationMin: 60,
      limitMaxImagePixels: true,
      corsAllowedOrigin: undefined,
      ompNumThreads: undefined,
      isSnapshotEnabled: true,
      unknownKeys: [],
    });
    expect(config.configFile).toBeUndefined();
    expect(config.cpuCount).toBe(os.availableParallelism());
  });

  it('puts logs, snapshots and the key file under the working directory', async () => {
    const cwd = emptyDir();
    const config = await loadConfig({ cliOptions: {}, env: {}, cwd });
    expect(config.logDir).toBe(path.join(cwd, 'logs'));
    expect(config.snapshotDir).toBe(path.join(cwd, 'logs', 'config'));
    expect(config.keyFilePath).toBe(path.join(cwd, 'key_file.json'));
  });

  it('honours LOG_LOCATION for the log folder, as TorchServe', async () => {
    const cwd = emptyDir();
    const config = await loadConfig({ cliOptions: {}, env: { LOG_LOCATION: 'elsewhere' }, cwd });
    expect(config.logDir).toBe(path.join(cwd, 'elsewhere'));
  });

  it('warns that the allow-everything allowed_urls default is in use when the model API is on', async () => {
    const config = await loadConfig({ cliOptions: { enableModelApi: true }, env: {}, cwd: emptyDir() });
    expect(config.warnings.some((warning) => warning.includes('allowed_urls is the default'))).toBe(true);
  });

  it('says nothing about allowed_urls when the model API is off (nothing can register a URL)', async () => {
    const config = await loadConfig({ cliOptions: {}, env: {}, cwd: emptyDir() });
    expect(config.enableModelApi).toBe(false);
    expect(config.warnings).toEqual([]);
  });

  it('returns a deeply frozen object', async () => {
    const config = await loadConfig({ cliOptions: {}, env: {}, cwd: emptyDir() });
    expect(Object.isFrozen(config)).toBe(true);
    expect(Object.isFrozen(config.inferenceAddress)).toBe(true);
    expect(Object.isFrozen(config.warnings)).toBe(true);
    expect(() => {
      (config as { jobQueueSize: number }).jobQueueSize = 1;
    }).toThrow(TypeError);
  });
});
