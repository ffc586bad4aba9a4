#!/usr/bin/env node
// The compiled CLI (dist/bin.js). In a clone of the repository, where src/ is present, the
// TypeScript sources run instead, through tsx (MARINA_COMPILED=1 runs dist/ there too).
import { existsSync } from 'node:fs';

if (existsSync(new URL('../src/bin.ts', import.meta.url)) && process.env.MARINA_COMPILED !== '1') {
  const { runSources } = await import('../../../scripts/run-sources.mjs');
  runSources();
  await import('../src/bin.ts');
} else {
  await import('../dist/bin.js');
}
