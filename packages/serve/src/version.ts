import { readFileSync } from 'node:fs';

/**
 * Marina's one version: `version` of packages/serve/package.json (read from src/ and from dist/
 * alike, both one folder below it). `serve --version`, the OIP server metadata and the snapshots report it.
 */
export const MARINA_VERSION = (
  JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string }
).version;
