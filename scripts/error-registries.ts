/**
 * The one index of Marina's error registries: every package's `defineErrors` registry, with the
 * heading its codes get in the error reference. The error reference (docs/reference/errors.md, written by
 * scripts/docs-gen.ts), the error-code tests and the per-protocol error table test all read it, so a new
 * registry is added here once.
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
import { managementErrors } from '../packages/serve/src/routes/management-errors.ts';
import { snapshotErrors } from '../packages/serve/src/snapshot/snapshot-errors.ts';
import { trafficErrors } from '../packages/serve/src/registry/traffic-policy.ts';

/** One registry: who owns it, where its codes come from (the reference's column), and its codes. */
export interface ErrorRegistryEntry {
  owner: string;
  where: string;
  definitions: Readonly<Record<string, ErrorDefinition>>;
  /** Old names of merged codes → the code each became (still created by the registry's factories). */
  aliases?: Readonly<Record<string, string>>;
  /** Whether its errors can reach a server's answer (REST or gRPC), so the per-protocol table covers them. */
  isServed: boolean;
}

export const errorRegistries: readonly ErrorRegistryEntry[] = [
  {
    owner: 'archive',
    where: 'model-archiver and the validator',
    definitions: archiveErrors.definitions,
    isServed: true,
  },
  {
    owner: 'serve/config',
    where: 'serve: configuration and launcher',
    definitions: configErrors.definitions,
    isServed: false,
  },
  {
    owner: 'serve',
    where: 'serve: inference and workers',
    definitions: serveErrors.definitions,
    aliases: serveErrors.aliases,
    isServed: true,
  },
  { owner: 'handlers', where: 'handlers', definitions: handlerErrors.definitions, isServed: true },
  {
    owner: 'serve/management',
    where: 'serve: management API',
    definitions: managementErrors.definitions,
    isServed: true,
  },
  { owner: 'serve/auth', where: 'serve: token authorization', definitions: authErrors.definitions, isServed: true },
  {
    owner: 'serve/model-download',
    where: 'serve: model download',
    definitions: downloadErrors.definitions,
    isServed: true,
  },
  { owner: 'serve/snapshot', where: 'serve: snapshots', definitions: snapshotErrors.definitions, isServed: true },
  {
    owner: 'serve/traffic',
    where: 'serve: traffic policies',
    definitions: trafficErrors.definitions,
    isServed: true,
  },
  { owner: 'model-zoo', where: 'marina-models', definitions: modelZooErrors.definitions, isServed: false },
  { owner: 'bench', where: 'bench', definitions: benchErrors.definitions, isServed: false },
  { owner: 'client', where: 'clients (Node and Python)', definitions: clientErrorDefinitions, isServed: false },
  { owner: 'quantize', where: 'model-archiver --quantize', definitions: quantizeErrors.definitions, isServed: false },
];

/** Every code once, with its definition and the first registry that defines it. */
export function allErrorCodes(): Array<{ code: string; definition: ErrorDefinition; registry: ErrorRegistryEntry }> {
  const seen = new Set<string>();
  const out: Array<{ code: string; definition: ErrorDefinition; registry: ErrorRegistryEntry }> = [];
  for (const registry of errorRegistries)
    for (const [code, definition] of Object.entries(registry.definitions)) {
      if (seen.has(code)) continue;
      seen.add(code);
      out.push({ code, definition, registry });
    }
  return out;
}

/** Every alias once: the old name, the code it became, and the registry that keeps it. */
export function allErrorAliases(): Array<{ alias: string; code: string; registry: ErrorRegistryEntry }> {
  return errorRegistries.flatMap((registry) =>
    Object.entries(registry.aliases ?? {}).map(([alias, code]) => ({ alias, code, registry })),
  );
}
