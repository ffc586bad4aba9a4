import { statSync } from 'node:fs';
import { readdir, readFile } from 'node:fs/promises';
import path from 'node:path';
import type { ServerConfig } from './server-config.ts';
import type { ServeCliOptions } from './serve-cli-options.ts';
import { buildServerConfig, resolveLogDir } from './build-server-config.ts';
import { reportConfigKeys } from './config-keys.ts';
import { configError } from './config-errors.ts';
import { layerConfigValues } from './layer-config-values.ts';
import { readModelsSection, resolveModelsSection } from './models-section.ts';
import { parseProperties, type ParsedProperties } from './properties-parser.ts';
import { resolveListeners } from './resolve-listeners.ts';
import { resolveModelSources } from './resolve-model-sources.ts';
import { validateConfigValues } from './validate-config-values.ts';
import { parseSnapshot } from '../snapshot/snapshot-store.ts';

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

/**
 * The synchronous core of loadConfig for an already parsed file (or none), one step per job:
 * layering and substitution, key checks, the models JSON, schema validation, the listeners (with
 * TLS files), model sources, then the ServerConfig. Not frozen, so loadConfig can add notes first.
 */
function resolveServerConfig(
  input: LoadConfigOptions & { file?: ParsedProperties; configFile?: string },
): ServerConfig {
  const { cliOptions, env, cwd, file } = input;
  const warnings: string[] = [];
  const values = layerConfigValues({ file, cliOptions, env, warnings });
  const unknownKeys = reportConfigKeys(values, warnings);
  const section = readModelsSection({ values, file });
  const checked = validateConfigValues({ values, section });
  const origin = (key: string) => values.get(key)?.origin ?? 'default';
  const listeners = resolveListeners({ checked, origin, cwd, warnings });
  const { models, trafficPolicies } = resolveModelsSection({ checked: checked.models, section, warnings });
  const sources = resolveModelSources({
    checked,
    isAllowedUrlsDefault: !values.has('allowed_urls'),
    origin,
    cwd,
    warnings,
  });
  return buildServerConfig({
    checked,
    origin,
    env,
    cwd,
    isSnapshotEnabled: !cliOptions.ncs,
    listeners,
    sources,
    models,
    trafficPolicies,
    unknownKeys,
    warnings,
    ...(input.configFile ? { configFile: input.configFile } : {}),
  });
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

/** Freezes the object and everything reachable from it. */
export function deepFreeze<T>(value: T): T {
  if (value !== null && typeof value === 'object' && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const child of Object.values(value)) deepFreeze(child);
  }
  return value;
}
