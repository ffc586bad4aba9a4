#!/usr/bin/env node
// The bench runs from the repository only (it is not published): the TypeScript sources, through tsx.
const { runSources } = await import('../../../scripts/run-sources.mjs');
runSources();
await import('../src/bin.ts');
