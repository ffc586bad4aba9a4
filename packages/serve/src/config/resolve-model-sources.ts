import { statSync } from 'node:fs';
import path from 'node:path';
import type { LoadModelSpec } from './server-config.ts';
import type { RawConfig } from './validate-config-values.ts';
import { configError } from './config-errors.ts';
import { parseLoadModels } from './parse-load-models.ts';

const DEFAULT_ALLOWED_URLS = 'file://.*|http(s)?://.*';

/** Where models may come from: the URL patterns, the model store and the models to load at start. */
export interface ModelSources {
  allowedUrls: string[];
  isAllowedUrlsDefault: boolean;
  modelStore: string | undefined;
  loadModels: 'all' | LoadModelSpec[];
}

/**
 * Checks allowed_urls (each entry a regular expression), that the model store is a folder, and
 * parses load_models.
 *
 * @param isAllowedUrlsDefault true when no layer set allowed_urls (a warning, with the model API on).
 * @throws MARINA_ERR_CONFIG_ALLOWED_URLS_INVALID, MARINA_ERR_CONFIG_MODEL_STORE_NOT_FOUND and load_models' errors.
 */
export function resolveModelSources(options: {
  checked: RawConfig;
  isAllowedUrlsDefault: boolean;
  origin: (key: string) => string;
  cwd: string;
  warnings: string[];
}): ModelSources {
  const { checked, origin } = options;
  const allowedUrls = parseAllowedUrls({ value: checked.allowed_urls, origin: origin('allowed_urls') });
  // Only the model API registers URLs from outside; with it off, the operator's own load_models are the only URLs.
  if (options.isAllowedUrlsDefault && checked.enable_model_api)
    options.warnings.push(
      `allowed_urls is the default '${DEFAULT_ALLOWED_URLS}': any file:// or http(s):// URL can be registered when the model API is enabled; set allowed_urls to restrict it`,
    );
  const modelStore =
    checked.model_store === undefined
      ? undefined
      : resolveModelStore({ value: checked.model_store, origin: origin('model_store'), cwd: options.cwd });
  const loadModels =
    checked.load_models === undefined
      ? []
      : parseLoadModels({ value: checked.load_models, origin: origin('load_models') });
  return { allowedUrls, isAllowedUrlsDefault: options.isAllowedUrlsDefault, modelStore, loadModels };
}

/** The comma-separated patterns, each compiled once here so a bad one fails at start. */
function parseAllowedUrls(options: { value: string; origin: string }): string[] {
  const allowedUrls = options.value
    .split(',')
    .map((pattern) => pattern.trim())
    .filter((pattern) => pattern !== '');
  for (const pattern of allowedUrls) {
    try {
      new RegExp(`^(?:${pattern})$`, 'i');
    } catch (error) {
      throw configError.MARINA_ERR_CONFIG_ALLOWED_URLS_INVALID(
        `${options.origin}: allowed_urls entry '${pattern}' is not a valid regular expression (${(error as Error).message}). Entries are comma-separated, so a regex cannot contain ','.`,
        { cause: error, details: { pattern } },
      );
    }
  }
  return allowedUrls;
}

/** The model store as an absolute path; it must be an existing folder. */
function resolveModelStore(options: { value: string; origin: string; cwd: string }): string {
  const modelStore = path.resolve(options.cwd, options.value);
  if (!isDirectory(modelStore)) {
    throw configError.MARINA_ERR_CONFIG_MODEL_STORE_NOT_FOUND(
      `${options.origin}: the model store ${modelStore} does not exist or is not a folder. Create it, or point --model-store at the folder holding your .mar files.`,
      { details: { modelStore } },
    );
  }
  return modelStore;
}

function isDirectory(filePath: string): boolean {
  try {
    return statSync(filePath).isDirectory();
  } catch {
    return false;
  }
}
