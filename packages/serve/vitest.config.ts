import { availableParallelism } from 'node:os';
import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    // A TMPDIR per run, checked for leftovers at teardown.
    globalSetup: ['../../scripts/vitest-temp-guard.ts'],
    // A hang guard only: on a loaded 2-core CI machine vitest's 5 s / 10 s defaults fail tests that do
    // real work (loading models, starting servers). Tests still wait on events, never on the clock.
    testTimeout: 120_000,
    hookTimeout: 120_000,
    // Two test files at once even on 2 cores (vitest's default is one fewer than the cores): most of a
    // file's time is spent waiting on servers, child processes and module loading, not computing.
    maxWorkers: Math.max(2, availableParallelism() - 1),
    // Each of the two test processes keeps the modules it has loaded from file to file instead of
    // loading serve (fastify, grpc-js, prom-client, ...) afresh for each of the 79 files: 5 min 26 s ->
    // 4 min 4 s, and 157 s less CPU, on 2 cores. The price: a file must leave no state behind. Tests
    // build their own app, close it, and restore any environment variable they set.
    isolate: false,
  },
});
