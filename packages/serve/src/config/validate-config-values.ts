import { Ajv, type ErrorObject } from 'ajv';
import type { ConfigValue } from './layer-config-values.ts';
import type { ModelsSection } from './models-section.ts';
import { BOOLEAN_KEYS, configSchema, KNOWN_KEYS } from './config-keys.ts';
import { configError } from './config-errors.ts';
import { positionOfJsonPath } from './models-json.ts';

// One Ajv instance, schema compiled once at import: a broken schema fails at boot, not on first use.
const ajv = new Ajv({ coerceTypes: true, useDefaults: true, allErrors: true, strict: true });
const validateRawConfig = ajv.compile<RawConfig>(configSchema);

/** The snake_case view of the configuration after coercion and defaults (what the schema checks). */
export interface RawConfig {
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

/**
 * Checks the known keys' values against schemas/config.schema.json: coerces types, fills in the
 * defaults and returns the snake_case view. Unknown keys were reported before and are left out.
 *
 * @throws MARINA_ERR_CONFIG_VALUE_INVALID (or MARINA_ERR_CONFIG_MODELS_INVALID when the first problem
 *   is in the models JSON) listing every problem with its origin and the key's description.
 */
export function validateConfigValues(options: {
  values: ReadonlyMap<string, ConfigValue>;
  section: ModelsSection;
}): RawConfig {
  const raw: Record<string, unknown> = {};
  for (const [key, rawValue] of options.values) {
    if (!KNOWN_KEYS.has(key) || key === 'models') continue;
    raw[key] = BOOLEAN_KEYS.has(key) ? rawValue.value.trim().toLowerCase() : rawValue.value.trim();
  }
  if (options.values.has('models')) raw.models = options.section.json;
  if (!validateRawConfig(raw)) throw schemaError(validateRawConfig.errors ?? [], options);
  return raw as unknown as RawConfig;
}

/** One error listing every schema problem, each at its origin (or file position, for models). */
function schemaError(
  errors: ErrorObject[],
  context: {
    values: ReadonlyMap<string, ConfigValue>;
    section: ModelsSection;
  },
): Error {
  const problems = errors.map((error) => {
    const segments = error.instancePath
      .split('/')
      .slice(1)
      .map((segment) => segment.replace(/~1/g, '/').replace(/~0/g, '~'));
    const key = segments[0] ?? '';
    const source = context.values.get(key);
    if (key === 'models' && context.section.tree && context.section.location) {
      const jsonPath = segments.slice(1);
      const position = positionOfJsonPath(context.section.tree, jsonPath, context.section.location);
      const fileName = context.section.location.filePath;
      return {
        isModels: true,
        text: `${fileName}:${position.line}:${position.column}: models ${jsonPath.join(' > ')} ${error.message ?? 'is invalid'}`,
      };
    }
    const property = configSchema.properties[key];
    const reference = property?.$ref ? configSchema.definitions[property.$ref.split('/').at(-1)!] : undefined;
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
