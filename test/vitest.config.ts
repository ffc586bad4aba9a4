import { availableParallelism } from 'node:os';
import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    // A TMPDIR per run, checked for leftovers at teardown.
    globalSetup: ['../scripts/vitest-temp-guard.ts'],
    // A hang guard only: on a loaded 2-core CI machine vitest's 5 s / 10 s defaults fail tests that do
    // real work (loading models, starting servers). Tests still wait on events, never on the clock.
    testTimeout: 120_000,
    hookTimeout: 120_000,
    // Two test files at once even on 2 cores (vitest's default is one fewer than the cores): most of a
    // file's time is spent waiting on servers, child processes and module loading, not computing.
    maxWorkers: Math.max(2, availableParallelism() - 1),
  },
});
