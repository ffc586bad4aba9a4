import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { findConfigFile, loadConfig } from '../src/config/load-config.ts';
import { isMarinaError } from '@marina/errors';
import { useTempDirs } from './temp-dirs.ts';

const newTempDir = useTempDirs('marina-config-precedence-');

function tempDir(): string {
  return newTempDir();
}

function write(dir: string, name: string, text: string): string {
  const file = path.join(dir, name);
  mkdirSync(path.dirname(file), { recursive: true });
  writeFileSync(file, text);
  return file;
}

/** A snapshot's model_snapshot with no models: what makes a snapshot file usable. */
const EMPTY_SNAPSHOT = 'model_snapshot={"name":"s","modelCount":0,"created":0,"models":{}}';

describe('where the config file comes from', () => {
  it('prefers TS_CONFIG_FILE over --ts-config, snapshots and ./config.properties', async () => {
    const cwd = tempDir();
    write(cwd, 'env.properties', 'job_queue_size=1');
    write(cwd, 'flag.properties', 'job_queue_size=2');
    write(cwd, 'logs/config/20250101000000000-snapshot.cfg', `job_queue_size=3\n${EMPTY_SNAPSHOT}`);
    write(cwd, 'config.properties', 'job_queue_size=4');
    const env = { TS_CONFIG_FILE: 'env.properties' };
    expect((await loadConfig({ cliOptions: { tsConfig: 'flag.properties' }, env, cwd })).jobQueueSize).toBe(1);
    expect((await loadConfig({ cliOptions: { tsConfig: 'flag.properties' }, env: {}, cwd })).jobQueueSize).toBe(2);
    expect((await loadConfig({ cliOptions: {}, env: {}, cwd })).jobQueueSize).toBe(3);
    expect((await loadConfig({ cliOptions: { ncs: true }, env: {}, cwd })).jobQueueSize).toBe(4);
  });

  it('restores the newest snapshot and says so', async () => {
    const cwd = tempDir();
    write(cwd, 'logs/config/20250101000000000-snapshot.cfg', `job_queue_size=3\n${EMPTY_SNAPSHOT}`);
    write(cwd, 'logs/config/20250102000000000-snapshot.cfg', `job_queue_size=5\n${EMPTY_SNAPSHOT}`);
    write(cwd, 'logs/config/startup.cfg', 'job_queue_size=9');
    const source = await findConfigFile({ cliOptions: {}, env: {}, cwd });
    expect(source).toEqual({ path: path.join(cwd, 'logs/config/20250102000000000-snapshot.cfg'), origin: 'snapshot' });
    const config = await loadConfig({ cliOptions: {}, env: {}, cwd });
    expect(config.jobQueueSize).toBe(5);
    expect(config.warnings[0]).toContain('restored the configuration from the snapshot');
  });

  it('reports a named file that cannot be read with its path and origin', async () => {
    const cwd = tempDir();
    const error = await loadConfig({ cliOptions: { tsConfig: 'missing.properties' }, env: {}, cwd }).catch(
      (caught: unknown) => caught,
    );
    expect(isMarinaError(error) && error.code).toBe('MARINA_ERR_CONFIG_FILE_UNREADABLE');
    expect((error as Error).message).toContain(path.join(cwd, 'missing.properties'));
  });
});

describe('order of precedence: file < CLI < TS_* environment (with enable_envvars_config=true)', () => {
  it('lets --model-store and --models override model_store and load_models', async () => {
    const cwd = tempDir();
    mkdirSync(path.join(cwd, 'a'));
    mkdirSync(path.join(cwd, 'b'));
    write(cwd, 'config.properties', 'model_store=a\nload_models=x.mar');
    const config = await loadConfig({ cliOptions: { modelStore: 'b', models: ['all'] }, env: {}, cwd });
    expect(config.modelStore).toBe(path.join(cwd, 'b'));
    expect(config.loadModels).toBe('all');
  });

  it('joins space-separated --models into one load_models list', async () => {
    const config = await loadConfig({ cliOptions: { models: ['a=a.mar', 'b.mar'] }, env: {}, cwd: tempDir() });
    expect(config.loadModels).toEqual([{ name: 'a', url: 'a.mar' }, { url: 'b.mar' }]);
  });

  it('only ever turns the model API on and token authorization off from the CLI', async () => {
    const cwd = tempDir();
    write(cwd, 'config.properties', 'enable_model_api=false\ndisable_token_authorization=false');
    const withFlags = await loadConfig({ cliOptions: { enableModelApi: true, disableTokenAuth: true }, env: {}, cwd });
    expect(withFlags.enableModelApi).toBe(true);
    expect(withFlags.disableTokenAuthorization).toBe(true);
    write(cwd, 'config.properties', 'enable_model_api=true\ndisable_token_authorization=true');
    const withoutFlags = await loadConfig({ cliOptions: {}, env: {}, cwd });
    expect(withoutFlags.enableModelApi).toBe(true);
    expect(withoutFlags.disableTokenAuthorization).toBe(true);
  });

  it('ignores TS_* variables unless enable_envvars_config=true', async () => {
    const cwd = tempDir();
    write(cwd, 'config.properties', 'job_queue_size=5');
    const config = await loadConfig({ cliOptions: {}, env: { TS_JOB_QUEUE_SIZE: '9' }, cwd });
    expect(config.jobQueueSize).toBe(5);
  });

  it('lets TS_* variables override the file and the CLI with enable_envvars_config=true', async () => {
    const cwd = tempDir();
    mkdirSync(path.join(cwd, 'from-cli'));
    mkdirSync(path.join(cwd, 'from-env'));
    write(
      cwd,
      'config.properties',
      'enable_envvars_config=true\njob_queue_size=5\ninference_address=http://127.0.0.1:8080',
    );
    const config = await loadConfig({
      cliOptions: { modelStore: 'from-cli' },
      env: {
        TS_JOB_QUEUE_SIZE: '9',
        TS_INFERENCE_ADDRESS: 'http://127.0.0.1:9999',
        TS_MODEL_STORE: 'from-env',
        TS_ENABLE_MODEL_API: 'true',
      },
      cwd,
    });
    expect(config.jobQueueSize).toBe(9);
    expect(config.inferenceAddress.port).toBe(9999);
    expect(config.modelStore).toBe(path.join(cwd, 'from-env'));
    expect(config.enableModelApi).toBe(true);
  });

  it('names the variable when a TS_* value is invalid', async () => {
    const cwd = tempDir();
    write(cwd, 'config.properties', 'enable_envvars_config=true');
    const error = await loadConfig({ cliOptions: {}, env: { TS_JOB_QUEUE_SIZE: 'many' }, cwd }).catch(
      (caught: unknown) => caught,
    );
    expect(isMarinaError(error) && error.code).toBe('MARINA_ERR_CONFIG_VALUE_INVALID');
    expect((error as Error).message).toContain(
      'environment variable TS_JOB_QUEUE_SIZE: job_queue_size=many must be integer',
    );
  });

  it('takes TS_ALLOWED_URLS only with use_env_allowed_urls=true', async () => {
    const cwd = tempDir();
    write(cwd, 'config.properties', 'enable_envvars_config=true\nallowed_urls=file:///a/.*');
    const ignored = await loadConfig({ cliOptions: {}, env: { TS_ALLOWED_URLS: 'https://.*' }, cwd });
    expect(ignored.allowedUrls).toEqual(['file:///a/.*']);
    expect(ignored.warnings.some((warning) => warning.includes('TS_ALLOWED_URLS is ignored'))).toBe(true);
    write(cwd, 'config.properties', 'enable_envvars_config=true\nuse_env_allowed_urls=true\nallowed_urls=file:///a/.*');
    const taken = await loadConfig({ cliOptions: {}, env: { TS_ALLOWED_URLS: 'https://.*' }, cwd });
    expect(taken.allowedUrls).toEqual(['https://.*']);
  });
});

describe('$$VAR$$ substitution', () => {
  it('replaces placeholders in values with environment variables', async () => {
    const cwd = tempDir();
    write(
      cwd,
      'config.properties',
      'inference_address=http://$$HOST$$:$$PORT$$\nmodels={"m": {"1.0": {"batchSize": $$BATCH$$}}}',
    );
    const config = await loadConfig({ cliOptions: {}, env: { HOST: '127.0.0.2', PORT: '7777', BATCH: '4' }, cwd });
    expect(config.inferenceAddress).toMatchObject({ host: '127.0.0.2', port: 7777 });
    expect(config.models).toEqual({ m: { '1.0': { batchSize: 4 } } });
  });

  it('stops with the key, the variable and the line when a variable is unset', async () => {
    const cwd = tempDir();
    write(cwd, 'config.properties', '# a comment\nmodel_store=$$STORE_DIR$$');
    const error = await loadConfig({ cliOptions: {}, env: {}, cwd }).catch((caught: unknown) => caught);
    expect(isMarinaError(error) && error.code).toBe('MARINA_ERR_CONFIG_ENV_VAR_UNSET');
    expect((error as Error).message).toContain(
      "config.properties:2: 'model_store' uses $$STORE_DIR$$ but the environment variable STORE_DIR is not set",
    );
  });
});
