import type { LoadModelSpec } from './server-config.ts';
import { configError } from './config-errors.ts';

const MODEL_NAME_PATTERN = /^[A-Za-z0-9][A-Za-z0-9_\-.]*$/;

/**
 * Parses `load_models` (and `--models`, joined with commas): `all` in any case, or a comma list
 * of `file.mar`, `name=file.mar`, folders and URLs. Unlike TorchServe, an `=` inside a URL's query
 * string is not taken as `name=`: a name is only split off when the text before `=` has no `/` or `:`.
 * An empty value gives an empty list.
 *
 * @throws MARINA_ERR_CONFIG_LOAD_MODELS_INVALID for an empty name or URL, a name with other
 *   characters than TorchServe allows, or `all` mixed with other entries.
 */
export function parseLoadModels(options: { value: string; origin: string }): 'all' | LoadModelSpec[] {
  const value = options.value.trim();
  if (value.toLowerCase() === 'all') return 'all';
  const entries = value
    .split(',')
    .map((entry) => entry.trim())
    .filter((entry) => entry !== '');
  const fail = (entry: string, why: string) =>
    configError.MARINA_ERR_CONFIG_LOAD_MODELS_INVALID(
      `${options.origin}: load_models entry '${entry}' ${why}. Use all, file.mar, name=file.mar or a URL, separated by commas.`,
      { details: { value, entry, origin: options.origin } },
    );
  return entries.map((entry) => {
    if (entry.toLowerCase() === 'all')
      throw fail(entry, "cannot be combined with other entries ('all' already loads every archive)");
    const equals = entry.indexOf('=');
    const before = equals < 0 ? '' : entry.slice(0, equals);
    if (equals < 0 || /[/:\\]/.test(before)) return { url: entry };
    const name = before.trim();
    const url = entry.slice(equals + 1).trim();
    if (!MODEL_NAME_PATTERN.test(name))
      throw fail(entry, `has an invalid model name '${name}' (allowed: ${MODEL_NAME_PATTERN.source})`);
    if (url === '') throw fail(entry, 'has no archive after =');
    return { name, url };
  });
}
