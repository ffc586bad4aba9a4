import { defineConfig } from 'vitest/config';

export default defineConfig({
  // A TMPDIR per run, checked for leftovers at teardown.
  test: { globalSetup: ['../../scripts/vitest-temp-guard.ts'] },
});
