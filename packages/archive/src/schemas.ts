import { readFileSync } from 'node:fs';
import { Ajv, type ErrorObject, type ValidateFunction } from 'ajv';

// One strict Ajv instance; both schemas compile when this module loads, so a broken
// schema fails at start-up rather than on the first archive.
const ajv = new Ajv({ strict: true, allErrors: true });

// The repository's schemas/ folder when running the sources; the copy the build puts in dist/schemas/
// when running compiled code (an installed package has no repository around it).
const SCHEMA_DIR = import.meta.url.endsWith('.ts')
  ? new URL('../../../schemas/', import.meta.url)
  : new URL('./schemas/', import.meta.url);

function compile(fileName: string): ValidateFunction {
  const schema = JSON.parse(readFileSync(new URL(fileName, SCHEMA_DIR), 'utf8')) as object;
  return ajv.compile(schema);
}

export const validateManifestSchema = compile('manifest.schema.json');
export const validateModelConfigSchema = compile('model-config.schema.json');

/** One readable sentence per Ajv error: "model.modelVersion: must be string". */
export function describeSchemaErrors(errors: ErrorObject[] | null | undefined, root: string): string[] {
  return (errors ?? []).map((error) => {
    const where = error.instancePath === '' ? root : `${root}${error.instancePath.replaceAll('/', '.')}`;
    if (error.keyword === 'required')
      return `${where}: missing required key '${String((error.params as { missingProperty?: string }).missingProperty)}'`;
    if (error.keyword === 'additionalProperties')
      return `${where}: unknown key '${String((error.params as { additionalProperty?: string }).additionalProperty)}'`;
    if (error.keyword === 'enum')
      return `${where}: must be one of ${((error.params as { allowedValues?: unknown[] }).allowedValues ?? []).map((v) => JSON.stringify(v)).join(', ')}`;
    return `${where}: ${error.message ?? 'is invalid'}`;
  });
}
