import { readFileSync } from 'node:fs';
import { closestName } from '@marina/errors';

/** The parts of schemas/config.schema.json that messages and key lists read. */
export interface ConfigSchema {
  properties: Record<string, { type?: string; $ref?: string; description?: string; default?: unknown }>;
  definitions: Record<string, { type?: string; description?: string }>;
}

// The repository's schemas/ folder when running the sources; the build's copy in dist/schemas/ when compiled.
const SCHEMA_DIR = import.meta.url.endsWith('.ts')
  ? new URL('../../../../schemas/', import.meta.url)
  : new URL('../schemas/', import.meta.url);

/** schemas/config.schema.json, read once at import. */
export const configSchema = JSON.parse(readFileSync(new URL('config.schema.json', SCHEMA_DIR), 'utf8')) as ConfigSchema;

/** Every key the schema defines. */
export const KNOWN_KEYS: ReadonlySet<string> = new Set(Object.keys(configSchema.properties));

/** Keys whose values are compared case-insensitively (`TRUE` is true). */
export const BOOLEAN_KEYS: ReadonlySet<string> = new Set(
  Object.entries(configSchema.properties)
    .filter(([, property]) => property.type === 'boolean')
    .map(([key]) => key),
);

/** Keys without a TS_* variable, as in TorchServe. */
export const KEYS_WITHOUT_ENV: ReadonlySet<string> = new Set(['models', 'enable_envvars_config', 'model_snapshot']);

/** TorchServe keys Marina accepts and does not act on (one informational warning lists those present). */
export const IGNORED_TORCHSERVE_KEYS = new Set([
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

/**
 * Warns about keys Marina does not know (with the closest known name) and TorchServe keys it ignores.
 *
 * @returns the unknown keys, for ServerConfig.unknownKeys.
 */
export function reportConfigKeys(values: ReadonlyMap<string, { origin: string }>, warnings: string[]): string[] {
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
  return unknownKeys;
}
