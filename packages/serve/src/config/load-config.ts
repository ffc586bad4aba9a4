import { accessSync, constants, readFileSync, statSync } from 'node:fs';
import { readdir, readFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { closestName } from '@marina/errors';
import { Ajv, type ErrorObject } from 'ajv';
import type { Node } from 'jsonc-parser';
import type { ServerConfig } from './server-config.ts';
import { defaultExtractionCacheDir } from '../cache/model-caches.ts';
import { configError } from './config-errors.ts';
import { parseProperties, type ParsedProperties, type PropertyEntry } from './properties-parser.ts';
import { parseListenAddress, isLoopbackHost } from './parse-listen-address.ts';
import { parseLoadModels } from './parse-load-models.ts';
import { parseMemoryBudget } from './parse-memory-budget.ts';
import { parseSnapshot } from '../snapshot/snapshot-store.ts';
import { parseTrafficPolicy, type TrafficPolicy } from '../registry/traffic-policy.ts';
import {
  findWorkerRangeProblem,
  normaliseModels,
  TRAFFIC_KEY,
  parseModelsJsonSyntax,
  positionOfJsonPath,
  type ModelsJsonLocation,
} from './models-json.ts';

/** The launcher flags that feed the configuration (see cli.ts). */
export interface ServeCliOptions {
  /** --ts-config FILE */
  tsConfig?: string;
  /** --model-store DIR */
  modelStore?: string;
  /** --models entries (`all`, `file.mar`, `name=file.mar`, URL); joined with commas into load_models. */
  models?: string[];
  /** --ncs / --no-config-snapshots: do not read (or write) config snapshots. */
  ncs?: boolean;
  /** --disable-token-auth / --dt: only ever turns token authorization off. */
  disableTokenAuth?: boolean;
  /** --enable-model-api: only ever turns the model API on. */
  enableModelApi?: boolean;
  /** --log-config FILE: must exist (TorchServe exits 1 otherwise); Marina's log layout is fixed, so it is not applied. */
  logConfig?: string;
  /** --workflow-store DIR (workflow_store). */
  workflowStore?: string;
  /** --plugins-path / --ppath DIR (plugins_path). */
  pluginsPath?: string;
  /** --foreground */
  foreground?: boolean;
}

export interface LoadConfigOptions {
  cliOptions: ServeCliOptions;
  env: NodeJS.ProcessEnv;
  /** Folder relative paths are resolved against (TorchServe: the working directory). */
  cwd: string;
}

/** Where the config file came from, in TorchServe's search order. */
export interface ConfigFileSource {
  path: string;
  origin: 'TS_CONFIG_FILE' | '--ts-config' | 'snapshot' | 'working directory';
}

/** Config snapshots are `<snapshotDir>/<yyyyMMddHHmmssSSS>-{snapshot,startup,shutdown}.cfg`, in config.properties format (TorchServe's names). */
const SNAPSHOT_FILE_PATTERN = /^\d+-(snapshot|startup|shutdown)\.cfg$/;

/** Keys without a TS_* variable, as in TorchServe. */
const KEYS_WITHOUT_ENV = new Set(['models', 'enable_envvars_config', 'model_snapshot']);

/** TorchServe keys Marina accepts and does not act on (one informational warning lists those present). */
const IGNORED_TORCHSERVE_KEYS = new Set([
  'vmargs',
  'number_of_gpu',
  'model_snapshot',
  'model_server_home',
  'debug',
  'netty_client_threads',
  'unregister_model_timeout',
  'metrics_config',
  'metrics_format',
  'disable_system_metrics',
  'system_metrics_cmd',
  'metric_time_interval',
  'model_metrics_auto_detect',
  'keystore',
  'keystore_pass',
  'keystore_type',
  'install_py_dep_per_model',
  'blacklist_env_vars',
  'initial_worker_port',
  'initial_distribution_port',
  'decode_input_request',
  'default_service_handler',
  'service_envelope',
  'prefer_direct_buffer',
  'async_logging',
  'ipex_enable',
  'ipex_gpu_enable',
  'cpu_launcher_enable',
  'cpu_launcher_args',
  'ts_open_inference_protocol',
  'ts_header_key_sequence_id',
  'ts_header_key_sequence_start',
  'ts_header_key_sequence_end',
  'use_native_io',
  'io_ratio',
  'enable_envvars_config_check',
  'max_workers',
  'workflow_api',
]);

const DEFAULT_ALLOWED_URLS = 'file://.*|http(s)?://.*';

interface ConfigSchema {
  properties: Record<string, { type?: string; $ref?: string; description?: string; default?: unknown }>;
  definitions: Record<string, { type?: string; description?: string }>;
}

// The repository's schemas/ folder when running the sources; the build's copy in dist/schemas/ when compiled.
const SCHEMA_DIR = import.meta.url.endsWith('.ts')
  ? new URL('../../../../schemas/', import.meta.url)
  : new URL('../schemas/', import.meta.url);
const schema = JSON.parse(readFileSync(new URL('config.schema.json', SCHEMA_DIR), 'utf8')) as ConfigSchema;
const KNOWN_KEYS = new Set(Object.keys(schema.properties));
const BOOLEAN_KEYS = new Set(
  Object.entries(schema.properties)
    .filter(([, property]) => property.type === 'boolean')
    .map(([key]) => key),
);

// One Ajv instance, schema compiled once at import: a broken schema fails at boot, not on first use.
const ajv = new Ajv({ coerceTypes: true, useDefaults: true, allErrors: true, strict: true });
const validateRawConfig = ajv.compile<RawConfig>(schema);

/** The snake_case view of the configuration after coercion and defaults (what the schema checks). */
interface RawConfig {
  inference_address: string;
  management_address: string;
  metrics_address: string;
  model_store?: string;
  load_models?: string;
  models?: Record<string, Record<string, Record<string, unknown>>>;
  default_workers_per_model?: number;
  job_queue_size: number;
  number_of_netty_threads: number;
  default_response_timeout: number;
  default_startup_timeout: number;
  max_request_size: number;
  max_response_size: number;
  allowed_urls: string;
  use_env_allowed_urls: boolean;
  disable_token_authorization: boolean;
  token_expiration_min: number;
  token_key_file?: string;
  enable_model_api: boolean;
  strict_parameters: boolean;
  snapshot_skip_missing_archives: boolean;
  token_failure_status: 400 | 401;
  ping_requires_token: boolean;
  batch_wait_when_idle: boolean;
  enable_metrics_api: boolean;
  enable_tracing: boolean;
  enable_envvars_config: boolean;
  limit_max_image_pixels: boolean;
  metrics_mode: 'log' | 'prometheus' | 'legacy';
  workflow_store?: string;
  plugins_path?: string;
  cors_allowed_origin?: string;
  cors_allowed_methods?: string;
  cors_allowed_headers?: string;
  private_key_file?: string;
  certificate_file?: string;
  grpc_inference_address: string;
  grpc_management_address: string;
  grpc_inference_port: number;
  grpc_management_port: number;
  grpc_inference_max_connection_age_ms?: number;
  grpc_management_max_connection_age_ms?: number;
  grpc_inference_max_connection_age_grace_ms?: number;
  grpc_management_max_connection_age_grace_ms?: number;
  enable_grpc_ssl: boolean;
  modelmesh_runtime_port?: number;
  modelmesh_runtime_address: string;
  autoscale_interval_ms: number;
  autoscale_scale_up_queue_depth: number;
  autoscale_scale_up_after_ms: number;
  autoscale_scale_down_idle_ms: number;
  shadow_max_cpu_pressure: number;
  request_timeout_ms: number;
  download_timeout_ms: number;
  download_idle_timeout_ms: number;
  max_concurrent_downloads: number;
  extraction_cache_max_bytes: number;
  optimized_model_cache_max_bytes: number;
  response_write_timeout: number;
  max_pending_response_bytes: number;
  log_max_line_bytes: number;
  log_max_file_bytes: number;
  log_max_backup_files: number;
  model_memory_budget?: string;
  idle_unload_seconds: number;
  unload_grace_seconds: number;
}

interface RawValue {
  value: string;
  /** For messages: `config.properties:12`, `--model-store`, `environment variable TS_JOB_QUEUE_SIZE`. */
  origin: string;
  entry?: PropertyEntry;
}

/**
 * Builds the server configuration the way TorchServe does: finds the config file
 * (TS_CONFIG_FILE > --ts-config > newest snapshot unless --ncs > ./config.properties > none), parses it,
 * replaces `$$VAR$$` placeholders, applies CLI overrides, then with `enable_envvars_config=true`
 * the `TS_*` variables; validates every value against schemas/config.schema.json and returns a
 * deeply frozen ServerConfig. Warnings (unknown keys, ignored TorchServe keys, ...) are in `warnings`.
 *
 * @throws MarinaError with a MARINA_ERR_CONFIG_* code (see docs/reference/errors.md) naming the key, where it
 *   came from (file:line, flag or variable) and what is allowed.
 */
export async function loadConfig(options: LoadConfigOptions): Promise<ServerConfig> {
  const logConfig = options.cliOptions.logConfig;
  if (logConfig !== undefined) {
    try {
      await readFile(path.resolve(options.cwd, logConfig));
    } catch (error) {
      throw configError.MARINA_ERR_CONFIG_FILE_UNREADABLE(
        `--log-config file not found: ${logConfig} (${(error as Error).message}); give an existing log4j2 file or leave the flag out.`,
        { cause: error, details: { path: logConfig, origin: '--log-config' } },
      );
    }
  }
  const source = await findConfigFile(options);
  let file: ParsedProperties | undefined;
  if (source) {
    let text: string;
    try {
      text = await readFile(source.path, 'utf8');
    } catch (error) {
      throw configError.MARINA_ERR_CONFIG_FILE_UNREADABLE(
        `cannot read the config file ${source.path} (from ${source.origin}): ${(error as Error).message}. Check the path, or unset ${source.origin === 'TS_CONFIG_FILE' ? 'TS_CONFIG_FILE' : 'the flag'}.`,
        { cause: error, details: { path: source.path, origin: source.origin } },
      );
    }
    file = parseProperties(text, { filePath: displayPath(source.path, options.cwd) });
  }
  const config = resolveServerConfig({ ...options, file, ...(source ? { configFile: source.path } : {}) });
  if (source) config.configFileOrigin = source.origin;
  if (source?.origin === 'snapshot')
    (config.warnings as string[]).unshift(
      `restored the configuration from the snapshot ${source.path} (start with --ncs to ignore snapshots)`,
    );
  return deepFreeze(config);
}

/** The config file to read, in TorchServe's order; undefined when there is none (defaults apply). */
export async function findConfigFile(options: LoadConfigOptions): Promise<ConfigFileSource | undefined> {
  const fromEnv = options.env.TS_CONFIG_FILE?.trim();
  if (fromEnv) return { path: path.resolve(options.cwd, fromEnv), origin: 'TS_CONFIG_FILE' };
  if (options.cliOptions.tsConfig)
    return { path: path.resolve(options.cwd, options.cliOptions.tsConfig), origin: '--ts-config' };
  if (!options.cliOptions.ncs) {
    const snapshotDir = path.join(resolveLogDir(options), 'config');
    const snapshots = (await readdir(snapshotDir).catch(() => [] as string[])).filter((name) =>
      SNAPSHOT_FILE_PATTERN.test(name),
    );
    // Fixed-width timestamps sort by name; compare numerically in case a writer drops leading zeros.
    const newestFirst = snapshots.sort((a, b) => (BigInt(a.split('-')[0]!) < BigInt(b.split('-')[0]!) ? 1 : -1));
    // A snapshot without a complete model_snapshot (cut short, corrupt) is skipped for the one before it (TorchServe would fail to start).
    for (const name of newestFirst) {
      const file = path.join(snapshotDir, name);
      try {
        parseSnapshot(file, await readFile(file, 'utf8'));
        return { path: file, origin: 'snapshot' };
      } catch {}
    }
  }
  const local = path.join(options.cwd, 'config.properties');
  if (isFile(local)) return { path: local, origin: 'working directory' };
  return undefined;
}

/** LOG_LOCATION (as TorchServe) or `<cwd>/logs`. */
function resolveLogDir(options: { env: NodeJS.ProcessEnv; cwd: string }): string {
  return path.resolve(options.cwd, options.env.LOG_LOCATION?.trim() || 'logs');
}

/** METRICS_LOCATION (as TorchServe's log4j2.xml: the metric log files) or `<cwd>/logs`. */
function resolveMetricsLogDir(options: { env: NodeJS.ProcessEnv; cwd: string }): string {
  return path.resolve(options.cwd, options.env.METRICS_LOCATION?.trim() || 'logs');
}

/**
 * The synchronous core of loadConfig for an already parsed file (or none): substitution,
 * overrides, validation, normalisation. Not frozen, so loadConfig can add notes first.
 */
function resolveServerConfig(
  input: LoadConfigOptions & { file?: ParsedProperties; configFile?: string },
): ServerConfig {
  const { cliOptions, env, cwd, file } = input;
  const warnings: string[] = [];
  const values = new Map<string, RawValue>();
  const fileName = file?.filePath ?? '';

  for (const entry of file?.entries ?? []) {
    const origin = `${fileName}:${entry.line}`;
    const previous = values.get(entry.key);
    if (previous)
      warnings.push(`${origin}: '${entry.key}' is set again (first at ${previous.origin}); the last value wins`);
    if (entry.value.trim() === '') {
      values.delete(entry.key);
      warnings.push(`${origin}: '${entry.key}' has an empty value; using the default`);
      continue;
    }
    values.set(entry.key, {
      value: substituteEnvVars({ key: entry.key, value: entry.value, origin, env }),
      origin,
      entry,
    });
  }

  if (cliOptions.modelStore) values.set('model_store', { value: cliOptions.modelStore, origin: '--model-store' });
  if (cliOptions.models && cliOptions.models.length > 0)
    values.set('load_models', { value: cliOptions.models.join(','), origin: '--models' });
  if (cliOptions.enableModelApi) values.set('enable_model_api', { value: 'true', origin: '--enable-model-api' });
  if (cliOptions.disableTokenAuth)
    values.set('disable_token_authorization', { value: 'true', origin: '--disable-token-auth' });
  if (cliOptions.workflowStore)
    values.set('workflow_store', { value: cliOptions.workflowStore, origin: '--workflow-store' });
  if (cliOptions.pluginsPath) values.set('plugins_path', { value: cliOptions.pluginsPath, origin: '--plugins-path' });
  if (cliOptions.logConfig)
    warnings.push(
      `--log-config ${cliOptions.logConfig} is read but not applied: Marina writes TorchServe's log files (access_log.log, ts_log.log, model_log.log) under LOG_LOCATION without log4j2`,
    );

  if (values.get('enable_envvars_config')?.value.trim().toLowerCase() === 'true') {
    const allowEnvUrls =
      (env.TS_USE_ENV_ALLOWED_URLS ?? values.get('use_env_allowed_urls')?.value ?? '').trim().toLowerCase() === 'true';
    for (const key of [...KNOWN_KEYS, ...IGNORED_TORCHSERVE_KEYS]) {
      if (KEYS_WITHOUT_ENV.has(key)) continue;
      const name = `TS_${key.toUpperCase()}`;
      const value = env[name];
      if (value === undefined || value.trim() === '') continue;
      if (key === 'allowed_urls' && !allowEnvUrls) {
        warnings.push(`${name} is ignored: set use_env_allowed_urls=true to take allowed_urls from the environment`);
        continue;
      }
      values.set(key, { value, origin: `environment variable ${name}` });
    }
  }

  const unknownKeys = [...values.keys()].filter((key) => !KNOWN_KEYS.has(key) && !IGNORED_TORCHSERVE_KEYS.has(key));
  if (unknownKeys.length > 0) {
    const described = unknownKeys.map((key) => {
      const suggestion = closestName(key, KNOWN_KEYS);
      return `${key} (${values.get(key)!.origin}${suggestion ? `; did you mean ${suggestion}?` : ''})`;
    });
    warnings.push(`unknown config key(s) ignored: ${described.join(', ')}`);
  }
  // model_snapshot is the snapshot's own record (read by the snapshot store), not a user setting.
  const ignoredKeys = [...values.keys()].filter((key) => IGNORED_TORCHSERVE_KEYS.has(key) && key !== 'model_snapshot');
  if (ignoredKeys.length > 0)
    warnings.push(`TorchServe key(s) that Marina does not use, ignored: ${ignoredKeys.join(', ')}`);

  const raw: Record<string, unknown> = {};
  for (const [key, rawValue] of values) {
    if (!KNOWN_KEYS.has(key) || key === 'models') continue;
    raw[key] = BOOLEAN_KEYS.has(key) ? rawValue.value.trim().toLowerCase() : rawValue.value.trim();
  }
  let modelsTree: Node | undefined;
  let modelsLocation: ModelsJsonLocation | undefined;
  const modelsValue = values.get('models');
  if (modelsValue) {
    modelsLocation = {
      filePath: file?.filePath ?? modelsValue.origin,
      lines: file?.lines ?? [],
      line: modelsValue.entry?.line ?? 0,
      ...(modelsValue.entry?.jsonBlock ? { block: modelsValue.entry.jsonBlock } : {}),
    };
    // Placeholders become same-length numbers for the syntax check, so `"batchSize": $$BATCH$$` passes
    // and offsets still map to file columns; the substituted text is parsed next.
    const unsubstituted = (modelsValue.entry?.value ?? modelsValue.value).replace(/\$\$[^$]+\$\$/g, (placeholder) =>
      '0'.padEnd(placeholder.length),
    );
    modelsTree = parseModelsJsonSyntax(unsubstituted, modelsLocation);
    try {
      raw.models = JSON.parse(modelsValue.value) as unknown;
    } catch (error) {
      throw configError.MARINA_ERR_CONFIG_MODELS_JSON_INVALID(
        `${modelsValue.origin}: the models JSON is invalid after $$VAR$$ substitution: ${(error as Error).message}. Check the substituted variables' values.`,
        { cause: error },
      );
    }
  }

  if (!validateRawConfig(raw)) {
    throw schemaError(validateRawConfig.errors ?? [], { values, modelsTree, modelsLocation });
  }
  const checked = raw as unknown as RawConfig;

  const origin = (key: string) => values.get(key)?.origin ?? 'default';
  const inferenceAddress = parseListenAddress({
    key: 'inference_address',
    value: checked.inference_address,
    origin: origin('inference_address'),
  });
  const managementAddress = parseListenAddress({
    key: 'management_address',
    value: checked.management_address,
    origin: origin('management_address'),
  });
  const metricsAddress = parseListenAddress({
    key: 'metrics_address',
    value: checked.metrics_address,
    origin: origin('metrics_address'),
  });

  const hasHttps =
    [inferenceAddress, managementAddress, metricsAddress].some((address) => address.protocol === 'https') ||
    checked.enable_grpc_ssl;
  if (hasHttps && (!checked.private_key_file || !checked.certificate_file)) {
    throw configError.MARINA_ERR_CONFIG_TLS_FILES_MISSING(
      checked.enable_grpc_ssl
        ? 'enable_grpc_ssl=true needs private_key_file and certificate_file (PEM files); set both, or turn enable_grpc_ssl off.'
        : 'an https:// address needs private_key_file and certificate_file (PEM files); set both, or use http:// behind a TLS proxy.',
    );
  }
  if (hasHttps) {
    for (const key of ['private_key_file', 'certificate_file'] as const)
      assertReadableTlsFile({ key, value: checked[key]!, origin: origin(key), cwd });
  }
  if (checked.modelmesh_runtime_port !== undefined && checked.model_memory_budget === undefined)
    throw configError.MARINA_ERR_CONFIG_VALUE_INVALID(
      `${origin('modelmesh_runtime_port')}: modelmesh_runtime_port needs model_memory_budget: ModelMesh places models by the capacity the runtime reports, and Marina reports its budget. Set model_memory_budget (e.g. 60% or 3GB), or remove modelmesh_runtime_port`,
      { details: { key: 'modelmesh_runtime_port' } },
    );
  if (checked.modelmesh_runtime_port !== undefined && !isLoopbackHost(checked.modelmesh_runtime_address))
    warnings.push(
      `${origin('modelmesh_runtime_address')}: the ModelMesh model-runtime SPI (no token authorization: ModelMesh sends no key) listens on ${checked.modelmesh_runtime_address}, which other machines can reach; keep it on 127.0.0.1, where ModelMesh's container calls it`,
    );
  if (checked.disable_token_authorization) {
    const exposed = [inferenceAddress, managementAddress].filter((address) => !isLoopbackHost(address.host));
    if (exposed.length > 0)
      warnings.push(
        `token authorization is disabled while ${exposed.map((address) => address.raw).join(' and ')} can be reached from other machines`,
      );
  }

  const models = checked.models ? normaliseModels(checked.models, (message) => warnings.push(message)) : {};
  const trafficPolicies: Record<string, TrafficPolicy> = {};
  for (const [modelName, entries] of Object.entries(checked.models ?? {})) {
    if (entries[TRAFFIC_KEY] === undefined) continue;
    try {
      trafficPolicies[modelName] = parseTrafficPolicy(entries[TRAFFIC_KEY], `models: ${modelName} > ${TRAFFIC_KEY}`);
    } catch (error) {
      const position =
        modelsTree && modelsLocation
          ? positionOfJsonPath(modelsTree, [modelName, TRAFFIC_KEY], modelsLocation)
          : undefined;
      throw configError.MARINA_ERR_CONFIG_MODELS_INVALID(
        `${position ? `${fileName}:${position.line}:${position.column}: ` : ''}${(error as Error).message}`,
        { cause: error },
      );
    }
  }
  const rangeProblem = findWorkerRangeProblem(models);
  if (rangeProblem && modelsTree && modelsLocation) {
    const position = positionOfJsonPath(modelsTree, rangeProblem.path, modelsLocation);
    throw configError.MARINA_ERR_CONFIG_MODELS_INVALID(
      `${fileName}:${position.line}:${position.column}: ${rangeProblem.message}.`,
    );
  }

  const allowedUrls = checked.allowed_urls
    .split(',')
    .map((pattern) => pattern.trim())
    .filter((pattern) => pattern !== '');
  for (const pattern of allowedUrls) {
    try {
      new RegExp(`^(?:${pattern})$`, 'i');
    } catch (error) {
      throw configError.MARINA_ERR_CONFIG_ALLOWED_URLS_INVALID(
        `${origin('allowed_urls')}: allowed_urls entry '${pattern}' is not a valid regular expression (${(error as Error).message}). Entries are comma-separated, so a regex cannot contain ','.`,
        { cause: error, details: { pattern } },
      );
    }
  }
  const isAllowedUrlsDefault = !values.has('allowed_urls');
  // Only the model API registers URLs from outside; with it off, the operator's own load_models are the only URLs.
  if (isAllowedUrlsDefault && checked.enable_model_api)
    warnings.push(
      `allowed_urls is the default '${DEFAULT_ALLOWED_URLS}': any file:// or http(s):// URL can be registered when the model API is enabled; set allowed_urls to restrict it`,
    );

  let modelStore: string | undefined;
  if (checked.model_store !== undefined) {
    modelStore = path.resolve(cwd, checked.model_store);
    if (!isDirectory(modelStore)) {
      throw configError.MARINA_ERR_CONFIG_MODEL_STORE_NOT_FOUND(
        `${origin('model_store')}: the model store ${modelStore} does not exist or is not a folder. Create it, or point --model-store at the folder holding your .mar files.`,
        { details: { modelStore } },
      );
    }
  }

  const loadModels =
    checked.load_models === undefined
      ? []
      : parseLoadModels({ value: checked.load_models, origin: origin('load_models') });
  if (checked.default_workers_per_model === 0)
    warnings.push(
      `${origin('default_workers_per_model')}: default_workers_per_model=0 means 1 worker per model in Marina (TorchServe: one per core)`,
    );

  const ompNumThreads = parseOmpNumThreads(env.OMP_NUM_THREADS);
  const logDir = resolveLogDir({ env, cwd });

  return {
    inferenceAddress,
    managementAddress,
    metricsAddress,
    modelStore,
    loadModels,
    models,
    trafficPolicies,
    shadowMaxCpuPressurePercent: checked.shadow_max_cpu_pressure,
    defaultWorkersPerModel: checked.default_workers_per_model ? checked.default_workers_per_model : undefined,
    jobQueueSize: checked.job_queue_size,
    numberOfNettyThreads: checked.number_of_netty_threads,
    defaultResponseTimeoutSec: checked.default_response_timeout,
    defaultStartupTimeoutSec: checked.default_startup_timeout,
    maxRequestBytes: checked.max_request_size,
    maxResponseBytes: checked.max_response_size,
    allowedUrls,
    isAllowedUrlsDefault,
    disableTokenAuthorization: checked.disable_token_authorization,
    enableModelApi: checked.enable_model_api,
    strictParameters: checked.strict_parameters,
    snapshotSkipMissingArchives: checked.snapshot_skip_missing_archives,
    tokenFailureStatus: checked.token_failure_status,
    pingRequiresToken: checked.ping_requires_token,
    batchWaitWhenIdle: checked.batch_wait_when_idle,
    enableMetricsApi: checked.enable_metrics_api,
    enableTracing: checked.enable_tracing,
    tokenExpirationMin: checked.token_expiration_min,
    keyFilePath: checked.token_key_file ? path.resolve(cwd, checked.token_key_file) : path.join(cwd, 'key_file.json'),
    isKeyFileProvided: Boolean(checked.token_key_file),
    ompNumThreads,
    cpuCount: os.availableParallelism(),
    extractionCacheDir: defaultExtractionCacheDir(),
    snapshotDir: path.join(logDir, 'config'),
    isSnapshotEnabled: !cliOptions.ncs,
    logDir,
    metricsLogDir: resolveMetricsLogDir({ env, cwd }),
    metricsMode: checked.metrics_mode,
    ...(checked.workflow_store ? { workflowStore: path.resolve(cwd, checked.workflow_store) } : {}),
    ...(checked.plugins_path ? { pluginsPath: path.resolve(cwd, checked.plugins_path) } : {}),
    corsAllowedOrigin: checked.cors_allowed_origin,
    corsAllowedMethods: checked.cors_allowed_methods,
    corsAllowedHeaders: checked.cors_allowed_headers,
    limitMaxImagePixels: checked.limit_max_image_pixels,
    unknownKeys,
    warnings,
    autoscaling: {
      intervalMs: checked.autoscale_interval_ms,
      scaleUpQueueDepth: checked.autoscale_scale_up_queue_depth,
      scaleUpAfterMs: checked.autoscale_scale_up_after_ms,
      scaleDownIdleMs: checked.autoscale_scale_down_idle_ms,
    },
    grpc: {
      inference: {
        host: checked.grpc_inference_address,
        port: checked.grpc_inference_port,
        maxConnectionAgeMs: checked.grpc_inference_max_connection_age_ms,
        maxConnectionAgeGraceMs: checked.grpc_inference_max_connection_age_grace_ms,
      },
      management: {
        host: checked.grpc_management_address,
        port: checked.grpc_management_port,
        maxConnectionAgeMs: checked.grpc_management_max_connection_age_ms,
        maxConnectionAgeGraceMs: checked.grpc_management_max_connection_age_grace_ms,
      },
      isSslEnabled: checked.enable_grpc_ssl,
    },
    ...(checked.modelmesh_runtime_port === undefined
      ? {}
      : { modelMeshRuntime: { host: checked.modelmesh_runtime_address, port: checked.modelmesh_runtime_port } }),
    resourceLimits: {
      requestTimeoutMs: checked.request_timeout_ms,
      downloadTimeoutMs: checked.download_timeout_ms,
      downloadIdleTimeoutMs: checked.download_idle_timeout_ms,
      maxConcurrentDownloads: checked.max_concurrent_downloads,
      extractionCacheMaxBytes: checked.extraction_cache_max_bytes,
      optimizedModelCacheMaxBytes: checked.optimized_model_cache_max_bytes,
      responseWriteTimeoutMs: Math.round(checked.response_write_timeout * 1000),
      maxPendingResponseBytes: checked.max_pending_response_bytes,
      logMaxLineBytes: checked.log_max_line_bytes,
      logMaxFileBytes: checked.log_max_file_bytes,
      logMaxBackupFiles: checked.log_max_backup_files,
    },
    residency: {
      ...(checked.model_memory_budget !== undefined
        ? {
            memoryBudgetBytes: parseMemoryBudget({
              value: checked.model_memory_budget,
              origin: origin('model_memory_budget'),
            }),
          }
        : {}),
      idleUnloadSeconds: checked.idle_unload_seconds,
      unloadGraceSeconds: checked.unload_grace_seconds,
    },
    ...(checked.private_key_file ? { privateKeyFile: path.resolve(cwd, checked.private_key_file) } : {}),
    ...(checked.certificate_file ? { certificateFile: path.resolve(cwd, checked.certificate_file) } : {}),
    ...(input.configFile ? { configFile: input.configFile } : {}),
  };
}

/**
 * A configuration from key/value pairs as they would appear in config.properties, with no file,
 * CLI or environment: for tests and embedding. Same validation and freezing as loadConfig.
 *
 * @example configFromProperties({ model_store: dir, load_models: 'all', inference_address: 'http://127.0.0.1:0' })
 */
export function configFromProperties(
  properties: Record<string, string>,
  options: { cwd?: string; env?: NodeJS.ProcessEnv } = {},
): ServerConfig {
  const text = Object.entries(properties)
    .map(([key, value]) => `${key}=${value.replace(/\\/g, '\\\\').replace(/\n/g, '\\n')}`)
    .join('\n');
  const file = parseProperties(text, { filePath: '<properties>' });
  return deepFreeze(
    resolveServerConfig({ cliOptions: { ncs: true }, env: options.env ?? {}, cwd: options.cwd ?? process.cwd(), file }),
  );
}

/**
 * The launcher's rule (TorchServe's too): serving needs a model store, from --model-store or model_store.
 *
 * @throws MARINA_ERR_CONFIG_MODEL_STORE_MISSING
 */
export function assertModelStoreConfigured(
  config: ServerConfig,
): asserts config is ServerConfig & { modelStore: string } {
  if (config.modelStore === undefined) {
    throw configError.MARINA_ERR_CONFIG_MODEL_STORE_MISSING(
      'Missing mandatory parameter --model-store: pass --model-store DIR or set model_store in config.properties.',
    );
  }
}

/**
 * The TLS files are read when the https listener starts; checked here so a wrong path is a
 * configuration error naming the key, not a raw ENOENT after the models have loaded.
 *
 * @throws MARINA_ERR_CONFIG_TLS_FILES_MISSING
 */
function assertReadableTlsFile(options: {
  key: 'private_key_file' | 'certificate_file';
  value: string;
  origin: string;
  cwd: string;
}): void {
  const filePath = path.resolve(options.cwd, options.value);
  let problem: string | undefined;
  try {
    if (statSync(filePath).isFile()) accessSync(filePath, constants.R_OK);
    else problem = 'is not a file';
  } catch (error) {
    problem = `cannot be read (${(error as NodeJS.ErrnoException).code ?? (error as Error).message})`;
  }
  if (problem === undefined) return;
  const what = options.key === 'private_key_file' ? 'the PEM private key' : 'the PEM certificate (chain)';
  throw configError.MARINA_ERR_CONFIG_TLS_FILES_MISSING(
    `${options.origin}: ${options.key}=${options.value}: ${filePath} ${problem}. Point ${options.key} at ${what} (relative paths are resolved against ${options.cwd}) and check its permissions, or use http:// behind a TLS proxy.`,
    { details: { key: options.key, path: filePath, origin: options.origin } },
  );
}

/** Replaces `$$NAME$$` with the environment variable NAME, as TorchServe does for every value. */
function substituteEnvVars(options: { key: string; value: string; origin: string; env: NodeJS.ProcessEnv }): string {
  return options.value.replace(/\$\$([^$]+)\$\$/g, (_match, name: string) => {
    const value = options.env[name];
    if (value === undefined) {
      throw configError.MARINA_ERR_CONFIG_ENV_VAR_UNSET(
        `${options.origin}: '${options.key}' uses $$${name}$$ but the environment variable ${name} is not set. Export ${name} or write the value directly.`,
        { details: { key: options.key, variable: name, origin: options.origin } },
      );
    }
    return value;
  });
}

function parseOmpNumThreads(value: string | undefined): number | undefined {
  if (value === undefined || value.trim() === '') return undefined;
  const threads = Number(value.trim());
  if (!Number.isInteger(threads) || threads < 1) {
    throw configError.MARINA_ERR_CONFIG_VALUE_INVALID(
      `environment variable OMP_NUM_THREADS='${value}' is not a whole number >= 1. Set it to the threads per worker (e.g. 1) or unset it.`,
      { details: { variable: 'OMP_NUM_THREADS', value } },
    );
  }
  return threads;
}

function schemaError(
  errors: ErrorObject[],
  context: {
    values: Map<string, RawValue>;
    modelsTree: Node | undefined;
    modelsLocation: ModelsJsonLocation | undefined;
  },
): Error {
  const problems = errors.map((error) => {
    const segments = error.instancePath
      .split('/')
      .slice(1)
      .map((segment) => segment.replace(/~1/g, '/').replace(/~0/g, '~'));
    const key = segments[0] ?? '';
    const source = context.values.get(key);
    if (key === 'models' && context.modelsTree && context.modelsLocation) {
      const jsonPath = segments.slice(1);
      const position = positionOfJsonPath(context.modelsTree, jsonPath, context.modelsLocation);
      const fileName = context.modelsLocation.filePath;
      return {
        isModels: true,
        text: `${fileName}:${position.line}:${position.column}: models ${jsonPath.join(' > ')} ${error.message ?? 'is invalid'}`,
      };
    }
    const property = schema.properties[key];
    const reference = property?.$ref ? schema.definitions[property.$ref.split('/').at(-1)!] : undefined;
    const description = property?.description ?? reference?.description;
    const defaultText = property?.default === undefined ? '' : `default ${String(property.default)}`;
    const hint = [description?.replace(/\.$/, ''), defaultText].filter(Boolean).join('; ');
    return {
      isModels: false,
      text: `${source?.origin ?? 'config'}: ${key}=${source?.value.trim() ?? ''} ${error.message ?? 'is invalid'}${hint ? ` (${hint})` : ''}`,
    };
  });
  const code = problems[0]?.isModels ? 'MARINA_ERR_CONFIG_MODELS_INVALID' : 'MARINA_ERR_CONFIG_VALUE_INVALID';
  return configError[code](
    `invalid configuration:\n  ${problems.map((problem) => problem.text).join('\n  ')}\nFix the value(s) and start again.`,
    {
      details: { problems: problems.map((problem) => problem.text) },
    },
  );
}

/** The path as people typed it: relative to the working directory when inside it, else absolute. */
function displayPath(filePath: string, cwd: string): string {
  const relative = path.relative(cwd, filePath);
  return relative === '' || relative.startsWith('..') || path.isAbsolute(relative) ? filePath : relative;
}

function isFile(filePath: string): boolean {
  try {
    return statSync(filePath).isFile();
  } catch {
    return false;
  }
}

function isDirectory(filePath: string): boolean {
  try {
    return statSync(filePath).isDirectory();
  } catch {
    return false;
  }
}

/** Freezes the object and everything reachable from it. */
export function deepFreeze<T>(value: T): T {
  if (value !== null && typeof value === 'object' && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const child of Object.values(value)) deepFreeze(child);
  }
  return value;
}
