import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll } from 'vitest';

/**
 * Returns a maker of fresh temp folders named `<prefix>XXXXXX`; every folder it made is removed
 * after the test file's tests. Call once at module level.
 */
export function useTempDirs(prefix: string): () => string {
  const created: string[] = [];
  afterAll(() => {
    for (const dir of created) rmSync(dir, { recursive: true, force: true });
  });
  return () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), prefix));
    created.push(dir);
    return dir;
  };
}
