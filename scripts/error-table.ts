// Prints the error-code table from the packages' error registries (the source of truth, indexed in error-registries.ts).
// Run: node --conditions=development --import tsx scripts/error-table.ts
import { allErrorAliases, allErrorCodes } from './error-registries.ts';

const lines = ['| code | HTTP | where | when it happens, what to do |', '|---|---|---|---|'];
for (const { code, definition, registry } of allErrorCodes()) {
  lines.push(
    `| \`${code}\` | ${definition.statusCode} | ${registry.where} | ${definition.description.replaceAll('|', '\\|').replaceAll('\n', ' ')} |`,
  );
}
const statusOf = new Map(allErrorCodes().map(({ code, definition }) => [code, definition.statusCode]));
for (const { alias, code, registry } of allErrorAliases()) {
  lines.push(
    `| \`${alias}\` | ${statusOf.get(code)} | ${registry.where} | Alias of \`${code}\`, into which it was merged: the server answers with \`${code}\`; match on that code. |`,
  );
}
process.stdout.write(`${lines.join('\n')}\n`);
