import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { configFromProperties, loadConfig } from '../src/config/load-config.ts';
import { useTempDirs } from './temp-dirs.ts';

const newTempDir = useTempDirs('marina-config-keys-');

function dirWithConfig(text: string): string {
  const cwd = newTempDir();
  mkdirSync(path.join(cwd, 'store'));
  writeFileSync(path.join(cwd, 'config.properties'), text);
  return cwd;
}

describe('config.properties keys', () => {
  it('reads every key Marina serves with, converting units and types', async () => {
    const cwd = dirWithConfig(
      [
        '# every key',
        '! a bang comment too',
        'inference_address=http://0.0.0.0:9080',
        'management_address: https://[::1]:9081',
        'metrics_address = http://localhost',
        'model_store=store',
        'load_models=a.mar,b=b.mar',
        'default_workers_per_model=3',
        'job_queue_size=7',
        'number_of_netty_threads=4',
        'default_response_timeout=30',
        'default_startup_timeout=45',
        'max_request_size=1024',
        'max_response_size=2048',
        // java.util.Properties unescapes: the file needs \\. for a regex \. (as in TorchServe)
        'allowed_urls=https://models\\\\.example\\\\.com/.*,file:///srv/.*',
        'disable_token_authorization=TRUE',
        'token_expiration_min=1.5',
        'enable_model_api=true',
        'enable_metrics_api=false',
        'limit_max_image_pixels=false',
        'cors_allowed_origin=*',
        'cors_allowed_methods=GET, POST',
        'cors_allowed_headers=X-Custom',
        'private_key_file=key.pem',
        'certificate_file=cert.pem',
      ].join('\n'),
    );
    // management_address is https://, so the TLS files must exist (their content is read at listen).
    writeFileSync(path.join(cwd, 'key.pem'), '');
    writeFileSync(path.join(cwd, 'cert.pem'), '');
    const config = await loadConfig({ cliOptions: {}, env: { OMP_NUM_THREADS: '2' }, cwd });
    expect(config.inferenceAddress).toEqual({
      protocol: 'http',
      host: '0.0.0.0',
      port: 9080,
      raw: 'http://0.0.0.0:9080',
    });
    expect(config.managementAddress).toMatchObject({ protocol: 'https', host: '::1', port: 9081 });
    expect(config.metricsAddress).toMatchObject({ protocol: 'http', host: 'localhost', port: 80 });
    expect(config).toMatchObject({
      modelStore: path.join(cwd, 'store'),
      loadModels: [{ url: 'a.mar' }, { name: 'b', url: 'b.mar' }],
      defaultWorkersPerModel: 3,
      jobQueueSize: 7,
      numberOfNettyThreads: 4,
      defaultResponseTimeoutSec: 30,
      defaultStartupTimeoutSec: 45,
      maxRequestBytes: 1024,
      maxResponseBytes: 2048,
      allowedUrls: ['https://models\\.example\\.com/.*', 'file:///srv/.*'],
      isAllowedUrlsDefault: false,
      disableTokenAuthorization: true,
      tokenExpirationMin: 1.5,
      enableModelApi: true,
      enableMetricsApi: false,
      limitMaxImagePixels: false,
      corsAllowedOrigin: '*',
      corsAllowedMethods: 'GET, POST',
      corsAllowedHeaders: 'X-Custom',
      privateKeyFile: path.join(cwd, 'key.pem'),
      certificateFile: path.join(cwd, 'cert.pem'),
      ompNumThreads: 2,
      configFile: path.join(cwd, 'config.properties'),
      unknownKeys: [],
    });
  });

  it('warns when token authorization is off on an address other machines can reach', async () => {
    const config = await loadConfig({
      cliOptions: {},
      env: {},
      cwd: dirWithConfig('inference_address=http://0.0.0.0:8080\ndisable_token_authorization=true'),
    });
    expect(
      config.warnings.some((warning) => warning.includes('token authorization is disabled while http://0.0.0.0:8080')),
    ).toBe(true);
  });

  it('takes java.util.Properties syntax: whitespace separator and backslash continuations', async () => {
    const config = await loadConfig({
      cliOptions: {},
      env: {},
      cwd: dirWithConfig('job_queue_size 12\nload_models=a.mar,\\\n    b.mar'),
    });
    expect(config.jobQueueSize).toBe(12);
    expect(config.loadModels).toEqual([{ url: 'a.mar' }, { url: 'b.mar' }]);
  });

  it('reads load_models=all in any case', () => {
    expect(configFromProperties({ load_models: 'ALL' }).loadModels).toBe('all');
  });

  it('does not take the query string of a URL in load_models for name=', () => {
    expect(configFromProperties({ load_models: 'https://example.com/m.mar?sig=abc' }).loadModels).toEqual([
      { url: 'https://example.com/m.mar?sig=abc' },
    ]);
  });

  it('treats default_workers_per_model=0 (TorchServe: one per core) as unset, with a note', () => {
    const config = configFromProperties({ default_workers_per_model: '0' });
    expect(config.defaultWorkersPerModel).toBeUndefined();
    expect(config.warnings.some((warning) => warning.includes('default_workers_per_model=0 means 1 worker'))).toBe(
      true,
    );
  });

  it('uses the default for a key with an empty value, and says so', () => {
    const config = configFromProperties({ job_queue_size: '' });
    expect(config.jobQueueSize).toBe(100);
    expect(config.warnings.some((warning) => warning.includes("'job_queue_size' has an empty value"))).toBe(true);
  });

  it('lets the last of a repeated key win, with a warning naming both lines', async () => {
    const config = await loadConfig({
      cliOptions: {},
      env: {},
      cwd: dirWithConfig('job_queue_size=5\njob_queue_size=6'),
    });
    expect(config.jobQueueSize).toBe(6);
    expect(config.warnings).toContain(
      "config.properties:2: 'job_queue_size' is set again (first at config.properties:1); the last value wins",
    );
  });
});
