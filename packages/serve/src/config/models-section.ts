import type { Node } from 'jsonc-parser';
import type { ModelVersionSettings } from './server-config.ts';
import type { ConfigValue } from './layer-config-values.ts';
import type { ParsedProperties } from './properties-parser.ts';
import { configError } from './config-errors.ts';
import { maskPlaceholders } from './substitute-env-vars.ts';
import { parseTrafficPolicy, type TrafficPolicy } from '../registry/traffic-policy.ts';
import {
  findWorkerRangeProblem,
  normaliseModels,
  parseModelsJsonSyntax,
  positionOfJsonPath,
  TRAFFIC_KEY,
  type ModelsJsonLocation,
} from './models-json.ts';

/** The `models=` value read as JSON, with what is needed to point at a file position later. */
export interface ModelsSection {
  /** The parsed JSON (substituted); undefined when `models` is not set. */
  json?: unknown;
  /** The syntax tree of the unsubstituted text, for positions. */
  tree?: Node;
  location?: ModelsJsonLocation;
}

/**
 * Reads the `models=` value: a strict syntax check of the text as written (placeholders masked, so
 * offsets are file columns), then a parse of the substituted text.
 *
 * @throws MARINA_ERR_CONFIG_MODELS_JSON_INVALID with file:line:column and a caret, or naming the substitution.
 */
export function readModelsSection(options: {
  values: ReadonlyMap<string, ConfigValue>;
  file: ParsedProperties | undefined;
}): ModelsSection {
  const modelsValue = options.values.get('models');
  if (!modelsValue) return {};
  const location: ModelsJsonLocation = {
    filePath: options.file?.filePath ?? modelsValue.origin,
    lines: options.file?.lines ?? [],
    line: modelsValue.entry?.line ?? 0,
    ...(modelsValue.entry?.jsonBlock ? { block: modelsValue.entry.jsonBlock } : {}),
  };
  const tree = parseModelsJsonSyntax(maskPlaceholders(modelsValue.entry?.value ?? modelsValue.value), location);
  try {
    return { json: JSON.parse(modelsValue.value) as unknown, tree, location };
  } catch (error) {
    throw configError.MARINA_ERR_CONFIG_MODELS_JSON_INVALID(
      `${modelsValue.origin}: the models JSON is invalid after $$VAR$$ substitution: ${(error as Error).message}. Check the substituted variables' values.`,
      { cause: error },
    );
  }
}

/**
 * The schema-checked models JSON as ModelVersionSettings per model and version, plus each model's
 * traffic policy. Unknown version settings are added to `warnings`.
 *
 * @throws MARINA_ERR_CONFIG_MODELS_INVALID for a bad traffic policy or maxWorkers below minWorkers,
 *   at the value's file position.
 */
export function resolveModelsSection(options: {
  checked: Record<string, Record<string, Record<string, unknown>>> | undefined;
  section: ModelsSection;
  warnings: string[];
}): {
  models: Record<string, Record<string, ModelVersionSettings>>;
  trafficPolicies: Record<string, TrafficPolicy>;
} {
  const { checked, section } = options;
  const models = checked ? normaliseModels(checked, (message) => options.warnings.push(message)) : {};
  const trafficPolicies: Record<string, TrafficPolicy> = {};
  for (const [modelName, entries] of Object.entries(checked ?? {})) {
    if (entries[TRAFFIC_KEY] === undefined) continue;
    try {
      trafficPolicies[modelName] = parseTrafficPolicy(entries[TRAFFIC_KEY], `models: ${modelName} > ${TRAFFIC_KEY}`);
    } catch (error) {
      throw configError.MARINA_ERR_CONFIG_MODELS_INVALID(
        `${filePrefix(section, [modelName, TRAFFIC_KEY])}${(error as Error).message}`,
        { cause: error },
      );
    }
  }
  const rangeProblem = findWorkerRangeProblem(models);
  if (rangeProblem && section.tree && section.location)
    throw configError.MARINA_ERR_CONFIG_MODELS_INVALID(
      `${filePrefix(section, rangeProblem.path)}${rangeProblem.message}.`,
    );
  return { models, trafficPolicies };
}

/** `config.properties:12:5: ` for a JSON path in the models value, or nothing without a syntax tree. */
function filePrefix(section: ModelsSection, jsonPath: string[]): string {
  if (!section.tree || !section.location) return '';
  const position = positionOfJsonPath(section.tree, jsonPath, section.location);
  return `${section.location.filePath}:${position.line}:${position.column}: `;
}
