import { readFileSync } from 'node:fs';

/** Marina's archiver version, written to the manifest's `archiverVersion`. */
export const ARCHIVER_VERSION: string = (
  JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string }
).version;
