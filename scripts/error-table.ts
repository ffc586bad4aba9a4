// Prints the README's error-code table from the packages' error registries (the source of truth).
// Run: node --conditions=development --import tsx scripts/error-table.ts
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
import { clientErrorDefinitions } from '../packages/client/src/errors.ts';
import { quantizeErrors } from '../packages/quantize/src/errors.ts';

const groups: Array<[string, Record<string, ErrorDefinition>]> = [
  ['model-archiver and the validator', archiveErrors.definitions],
  ['serve: configuration and launcher', configErrors.definitions],
  ['serve: inference and workers', serveErrors.definitions],
  ['handlers', handlerErrors.definitions],
  ['serve: management API', managementErrors.definitions],
  ['serve: token authorization', authErrors.definitions],
  ['serve: model download', downloadErrors.definitions],
  ['serve: snapshots', snapshotErrors.definitions],
  ['marina-models', modelZooErrors.definitions],
  ['bench', benchErrors.definitions],
  ['clients (Node and Python)', clientErrorDefinitions],
  ['model-archiver --quantize', quantizeErrors.definitions],
];
const seen = new Set<string>();
const lines = ['| code | HTTP | where | when it happens, what to do |', '|---|---|---|---|'];
for (const [where, defs] of groups) {
  for (const [code, def] of Object.entries(defs)) {
    if (seen.has(code)) continue;
    seen.add(code);
    lines.push(
      `| \`${code}\` | ${def.statusCode} | ${where} | ${def.description.replaceAll('|', '\\|').replaceAll('\n', ' ')} |`,
    );
  }
}
process.stdout.write(lines.join('\n') + '\n');
