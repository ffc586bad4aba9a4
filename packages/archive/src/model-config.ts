import { readFile } from 'node:fs/promises';
import { parse as parseYaml } from 'yaml';
import { archiveErrors } from './errors.ts';
import type { Manifest } from './manifest.ts';
import { resolveManifestPath } from './safe-path.ts';
import { describeSchemaErrors, validateModelConfigSchema } from './schemas.ts';

/**
 * Parses model-config.yaml text and checks it against schemas/model-config.schema.json.
 * An empty document is `{}`.
 * @throws MARINA_ERR_MODEL_CONFIG_INVALID (YAML syntax, not a mapping, or schema errors, all listed in `details.errors`).
 */
export function parseModelConfig(text: string, source = 'model-config.yaml'): Record<string, unknown> {
  let value: unknown;
  try {
    value = parseYaml(text);
  } catch (error) {
    throw archiveErrors.create.MARINA_ERR_MODEL_CONFIG_INVALID(
      `${source} is not valid YAML: ${(error as Error).message.split('\n')[0]}`,
      { cause: error, details: { errors: [(error as Error).message] } },
    );
  }
  if (value === null || value === undefined) return {};
  if (typeof value !== 'object' || Array.isArray(value)) {
    const message = `${source} must be a mapping of keys to values, got ${Array.isArray(value) ? 'a list' : typeof value}`;
    throw archiveErrors.create.MARINA_ERR_MODEL_CONFIG_INVALID(message, { details: { errors: [message] } });
  }
  if (!validateModelConfigSchema(value)) {
    const errors = describeSchemaErrors(validateModelConfigSchema.errors, source);
    throw archiveErrors.create.MARINA_ERR_MODEL_CONFIG_INVALID(
      `${source} does not match the model-config schema: ${errors.join('; ')}`,
      { details: { errors } },
    );
  }
  return value as Record<string, unknown>;
}

/**
 * Reads the archive's model config, the file the manifest names in `model.configFile`
 * (TorchServe reads none when that key is absent). Returns `{}` when there is none.
 * Every key is returned: the frontend keys and everything else, which handlers get as
 * `modelYamlConfig`.
 * @throws MARINA_ERR_ARCHIVE_FILE_MISSING when the named file is not in `modelDir`;
 *   MARINA_ERR_ARCHIVE_PATH_ESCAPE when the name points outside it;
 *   MARINA_ERR_MODEL_CONFIG_INVALID when it is not valid.
 */
export async function readModelConfig(modelDir: string, manifest: Manifest): Promise<Record<string, unknown>> {
  const configFile = manifest.model.configFile;
  if (configFile === undefined) return {};
  const path = await resolveManifestPath(modelDir, configFile, 'model.configFile');
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') {
      throw archiveErrors.create.MARINA_ERR_ARCHIVE_FILE_MISSING(
        `the manifest names configFile '${configFile}' but the archive has no such file; add it or remove configFile from the manifest`,
        { details: { file: configFile } },
      );
    }
    throw error;
  }
  return parseModelConfig(text, configFile);
}
