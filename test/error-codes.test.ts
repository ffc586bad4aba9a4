/**
 * Every error a user can meet has one stable code: unique across all of Marina's packages,
 * with one meaning and one HTTP status, and listed in the README's error table.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import type { ErrorDefinition } from '@marina/errors';
import { archiveErrors } from '../packages/archive/src/errors.ts';
import { benchErrors } from '../packages/bench/src/errors.ts';
import { handlerErrors } from '../packages/handlers/src/errors.ts';
import { modelZooErrors } from '../packages/model-zoo/src/errors.ts';
import { serveErrors } from '../packages/serve/src/errors.ts';
import { configErrors } from '../packages/serve/src/config/config-errors.ts';
import { authErrors } from '../packages/serve/src/auth/auth-errors.ts';
import { downloadErrors } from '../packages/serve/src/model-download/download-errors.ts';
import { snapshotErrors } from '../packages/serve/src/snapshot/snapshot-errors.ts';
import { managementErrors } from '../packages/serve/src/routes/management.ts';
import { trafficErrors } from '../packages/serve/src/registry/traffic-policy.ts';
import { clientErrorDefinitions } from '../packages/client/src/errors.ts';
import { quantizeErrors } from '../packages/quantize/src/errors.ts';
import { repoRoot } from './helpers.ts';

const registries: Record<string, Record<string, ErrorDefinition>> = {
  archive: archiveErrors.definitions,
  bench: benchErrors.definitions,
  handlers: handlerErrors.definitions,
  'model-zoo': modelZooErrors.definitions,
  serve: serveErrors.definitions,
  'serve/config': configErrors.definitions,
  'serve/auth': authErrors.definitions,
  'serve/model-download': downloadErrors.definitions,
  'serve/snapshot': snapshotErrors.definitions,
  'serve/management': managementErrors.definitions,
  'serve/traffic': trafficErrors.definitions,
  client: clientErrorDefinitions,
  quantize: quantizeErrors.definitions,
};

const allCodes = Object.entries(registries).flatMap(([owner, defs]) =>
  Object.entries(defs).map(([code, def]) => ({ owner, code, def })),
);

describe('error codes', () => {
  it('are defined by exactly one package, or by several with the same HTTP status', () => {
    const byCode = new Map<string, typeof allCodes>();
    for (const entry of allCodes) byCode.set(entry.code, [...(byCode.get(entry.code) ?? []), entry]);
    const conflicts = [...byCode.entries()]
      .filter(([, entries]) => new Set(entries.map((e) => e.def.statusCode)).size > 1)
      .map(([code, entries]) => `${code}: ${entries.map((e) => `${e.owner}=${e.def.statusCode}`).join(', ')}`);
    expect(conflicts).toEqual([]);
  });

  it('each have a description that says when it happens', () => {
    const undescribed = allCodes.filter(({ def }) => def.description.trim().length < 20).map(({ code }) => code);
    expect(undescribed).toEqual([]);
  });

  it('are all listed in the README', () => {
    const readme = readFileSync(path.join(repoRoot, 'README.md'), 'utf8');
    const missing = [...new Set(allCodes.map(({ code }) => code))].filter((code) => !readme.includes(`\`${code}\``));
    expect(missing).toEqual([]);
  });
});
