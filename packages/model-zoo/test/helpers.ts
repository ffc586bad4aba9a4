import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll } from 'vitest';

/** A fresh temp directory, removed after the test file finishes. */
export async function useTempDir(prefix: string): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), `marina-model-zoo-${prefix}-`));
  afterAll(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

export function softmax(logits: ArrayLike<number>): number[] {
  const values = Array.from(logits);
  const max = Math.max(...values);
  const exps = values.map((v) => Math.exp(v - max));
  const sum = exps.reduce((a, b) => a + b, 0);
  return exps.map((e) => e / sum);
}
