import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll } from 'vitest';

const created: string[] = [];
// Registered when the test file imports this module: an afterAll called inside a test would come too late to run.
afterAll(() => Promise.all(created.splice(0).map((dir) => rm(dir, { recursive: true, force: true }))));

/** A fresh temp directory, removed after the test file finishes (also when called inside a test). */
export async function useTempDir(prefix: string): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), `marina-model-zoo-${prefix}-`));
  created.push(dir);
  return dir;
}

export function softmax(logits: ArrayLike<number>): number[] {
  const values = Array.from(logits);
  const max = Math.max(...values);
  const exps = values.map((v) => Math.exp(v - max));
  const sum = exps.reduce((a, b) => a + b, 0);
  return exps.map((e) => e / sum);
}
