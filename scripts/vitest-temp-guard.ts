/**
 * Vitest globalSetup shared by every package: the test run gets a TMPDIR of its own (so other
 * processes' files in the machine's temp folder are never blamed on it), and at teardown whatever
 * the tests left there fails the run, listed with sizes; the folder is removed either way.
 * Kept: `marina` (the server's extraction and optimised-model cache, bounded by its own cap) and
 * `tsx-*` (tsx's compile cache).
 */
import { mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const KEPT = [/^marina$/, /^tsx-/];

function sizeOf(target: string): number {
  const stats = statSync(target, { throwIfNoEntry: false });
  if (!stats) return 0;
  if (!stats.isDirectory()) return stats.size;
  return readdirSync(target).reduce((sum, name) => sum + sizeOf(path.join(target, name)), 0);
}

export default function setup(): () => void {
  const previous = process.env.TMPDIR;
  const runDir = mkdtempSync(path.join(os.tmpdir(), 'marina-test-run-'));
  process.env.TMPDIR = runDir;
  // Test processes are not Marina's entry points: keep onnxruntime's telemetry files out of the check.
  process.env.ORT_DISABLE_TELEMETRY ??= '1';
  return () => {
    const leftovers = readdirSync(runDir).filter((name) => !KEPT.some((pattern) => pattern.test(name)));
    const report = leftovers.map((name) => `  ${name} (${(sizeOf(path.join(runDir, name)) / 1024).toFixed(1)} KiB)`);
    rmSync(runDir, { recursive: true, force: true });
    if (previous === undefined) delete process.env.TMPDIR;
    else process.env.TMPDIR = previous;
    if (leftovers.length > 0) {
      // Vitest prints an error thrown here but still exits 0, so the exit code is set as well.
      process.exitCode = 1;
      throw new Error(
        `the tests left ${leftovers.length} file(s) or folder(s) in their temporary folder; remove them in afterAll/afterEach:\n${report.join('\n')}`,
      );
    }
  };
}
