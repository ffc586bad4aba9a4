/**
 * Every package's error registry, in the order the error-code reference lists them. The reference page
 * (docs/reference/errors.md, written by scripts/docs-gen.ts) and its drift test read this list: a new
 * registry added here is documented and checked from then on.
 */
import type { ErrorDefinition } from '../packages/errors/src/index.ts';
import { archiveErrors } from '../packages/archive/src/errors.ts';
import { benchErrors } from '../packages/bench/src/errors.ts';
import { clientErrorDefinitions } from '../packages/client/src/errors.ts';
import { handlerErrors } from '../packages/handlers/src/errors.ts';
import { modelZooErrors } from '../packages/model-zoo/src/errors.ts';
import { quantizeErrors } from '../packages/quantize/src/errors.ts';
import { authErrors } from '../packages/serve/src/auth/auth-errors.ts';
import { configErrors } from '../packages/serve/src/config/config-errors.ts';
import { serveErrors } from '../packages/serve/src/errors.ts';
import { downloadErrors } from '../packages/serve/src/model-download/download-errors.ts';
import { managementErrors } from '../packages/serve/src/routes/management.ts';
import { snapshotErrors } from '../packages/serve/src/snapshot/snapshot-errors.ts';

export interface ErrorRegistryGroup {
  /** Who reports these codes, as the reference's "Where" column says it. */
  where: string;
  definitions: Record<string, ErrorDefinition>;
}

export const errorRegistryGroups: readonly ErrorRegistryGroup[] = [
  { where: 'model-archiver and the validator', definitions: archiveErrors.definitions },
  { where: 'serve: configuration and launcher', definitions: configErrors.definitions },
  { where: 'serve: inference and workers', definitions: serveErrors.definitions },
  { where: 'handlers', definitions: handlerErrors.definitions },
  { where: 'serve: management API', definitions: managementErrors.definitions },
  { where: 'serve: token authorization', definitions: authErrors.definitions },
  { where: 'serve: model download', definitions: downloadErrors.definitions },
  { where: 'serve: snapshots', definitions: snapshotErrors.definitions },
  { where: 'marina-models', definitions: modelZooErrors.definitions },
  { where: 'bench', definitions: benchErrors.definitions },
  { where: 'clients (Node and Python)', definitions: clientErrorDefinitions },
  { where: 'model-archiver --quantize', definitions: quantizeErrors.definitions },
];
