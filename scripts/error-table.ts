// Prints the error-code table from the packages' error registries (the source of truth, indexed in error-registries.ts).
// Run: node --conditions=development --import tsx scripts/error-table.ts
import { allErrorCodes } from './error-registries.ts';

const lines = ['| code | HTTP | where | when it happens, what to do |', '|---|---|---|---|'];
for (const { code, definition, registry } of allErrorCodes()) {
  lines.push(
    `| \`${code}\` | ${definition.statusCode} | ${registry.where} | ${definition.description.replaceAll('|', '\\|').replaceAll('\n', ' ')} |`,
  );
}
process.stdout.write(`${lines.join('\n')}\n`);
