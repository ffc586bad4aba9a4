import type { ServeCliOptions } from './serve-cli-options.ts';
import type { ParsedProperties, PropertyEntry } from './properties-parser.ts';
import { IGNORED_TORCHSERVE_KEYS, KEYS_WITHOUT_ENV, KNOWN_KEYS } from './config-keys.ts';
import { substituteEnvVars } from './substitute-env-vars.ts';

/** One configuration value as written, before schema coercion, with where it came from. */
export interface ConfigValue {
  value: string;
  /** For messages: `config.properties:12`, `--model-store`, `environment variable TS_JOB_QUEUE_SIZE`. */
  origin: string;
  /** The file entry it came from (line, JSON block), when it came from the file. */
  entry?: PropertyEntry;
}

/**
 * The configuration's raw values, layered as TorchServe layers them: the file (with `$$VAR$$`
 * replaced), then the launcher flags, then, with `enable_envvars_config=true`, the `TS_*` variables.
 * A later layer replaces a key; what a user may not expect (a key set twice, an empty value, an
 * ignored variable or flag) is added to `warnings`.
 *
 * @throws MARINA_ERR_CONFIG_ENV_VAR_UNSET for a `$$VAR$$` whose variable is not set.
 */
export function layerConfigValues(options: {
  file: ParsedProperties | undefined;
  cliOptions: ServeCliOptions;
  env: NodeJS.ProcessEnv;
  warnings: string[];
}): Map<string, ConfigValue> {
  const values = new Map<string, ConfigValue>();
  if (options.file) applyFileLayer({ values, file: options.file, env: options.env, warnings: options.warnings });
  applyCliLayer({ values, cliOptions: options.cliOptions, warnings: options.warnings });
  if (values.get('enable_envvars_config')?.value.trim().toLowerCase() === 'true')
    applyEnvLayer({ values, env: options.env, warnings: options.warnings });
  return values;
}

/** The file's entries in order: the last of a repeated key wins, an empty value means the default. */
function applyFileLayer(options: {
  values: Map<string, ConfigValue>;
  file: ParsedProperties;
  env: NodeJS.ProcessEnv;
  warnings: string[];
}): void {
  const { values, warnings } = options;
  for (const entry of options.file.entries) {
    const origin = `${options.file.filePath}:${entry.line}`;
    const previous = values.get(entry.key);
    if (previous)
      warnings.push(`${origin}: '${entry.key}' is set again (first at ${previous.origin}); the last value wins`);
    if (entry.value.trim() === '') {
      values.delete(entry.key);
      warnings.push(`${origin}: '${entry.key}' has an empty value; using the default`);
      continue;
    }
    values.set(entry.key, {
      value: substituteEnvVars({ key: entry.key, value: entry.value, origin, env: options.env }),
      origin,
      entry,
    });
  }
}

/** The launcher flags that set keys; the boolean ones can only turn their setting one way. */
function applyCliLayer(options: {
  values: Map<string, ConfigValue>;
  cliOptions: ServeCliOptions;
  warnings: string[];
}): void {
  const { values, cliOptions } = options;
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
    options.warnings.push(
      `--log-config ${cliOptions.logConfig} is read but not applied: Marina writes TorchServe's log files (access_log.log, ts_log.log, model_log.log) under LOG_LOCATION without log4j2`,
    );
}

/**
 * `TS_<KEY>` for every key that has one. allowed_urls is taken from the environment only with
 * use_env_allowed_urls=true (TorchServe's guard against a variable widening what may be downloaded).
 */
function applyEnvLayer(options: {
  values: Map<string, ConfigValue>;
  env: NodeJS.ProcessEnv;
  warnings: string[];
}): void {
  const { values, env } = options;
  const allowEnvUrls =
    (env.TS_USE_ENV_ALLOWED_URLS ?? values.get('use_env_allowed_urls')?.value ?? '').trim().toLowerCase() === 'true';
  for (const key of [...KNOWN_KEYS, ...IGNORED_TORCHSERVE_KEYS]) {
    if (KEYS_WITHOUT_ENV.has(key)) continue;
    const name = `TS_${key.toUpperCase()}`;
    const value = env[name];
    if (value === undefined || value.trim() === '') continue;
    if (key === 'allowed_urls' && !allowEnvUrls) {
      options.warnings.push(
        `${name} is ignored: set use_env_allowed_urls=true to take allowed_urls from the environment`,
      );
      continue;
    }
    values.set(key, { value, origin: `environment variable ${name}` });
  }
}
