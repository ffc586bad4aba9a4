/**
 * Run by memory-after-unload.test.ts in a process of its own (so its memory is only the server's,
 * with the environment serve sets): registers the model folder given, then `cycles` times sends
 * one request (a demand load) and unloads it, printing the process's PSS at each step as JSON.
 * Usage: node --expose-gc --conditions=development --import tsx memory-cycles-child.ts <modelDir> <jpeg> <cycles> <rootDir>
 */
import { readFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { buildApp } from '../src/index.ts';
import { readProcessMemoryBytes } from '../src/metrics/process-memory.ts';
import { testConfig } from './helpers.ts';

const [modelDir, jpegPath, cyclesText, rootDir] = process.argv.slice(2);
const jpeg = await readFile(jpegPath!);
const settle = async () => {
  // Collect what JavaScript let go of, twice, so PSS shows native memory, not garbage waiting.
  (globalThis as { gc?: () => void }).gc?.();
  await new Promise((resolve) => setTimeout(resolve, 200));
  (globalThis as { gc?: () => void }).gc?.();
};
const app = await buildApp(testConfig({ cpuCount: 2 }, rootDir ?? tmpdir()));
const base = await app.inference.listen({ host: '127.0.0.1', port: 0 });
await app.registry.register({ url: 'model', archivePath: modelDir!, modelName: 'model', load: false });
await settle();
const result = { before: readProcessMemoryBytes(), cycles: [] as Array<Record<string, number>> };
for (let i = 0; i < Number(cyclesText); i++) {
  const response = await fetch(`${base}/predictions/model`, {
    method: 'POST',
    body: new Uint8Array(jpeg),
    headers: { 'content-type': 'image/jpeg' },
  });
  await response.arrayBuffer();
  const loaded = readProcessMemoryBytes();
  const residentBytes = app.registry.describe('model')[0]!.residentBytes ?? 0;
  await app.registry.unload('model');
  await settle();
  result.cycles.push({ status: response.status, loaded, residentBytes, unloaded: readProcessMemoryBytes() });
}
await app.close();
process.stdout.write(`${JSON.stringify(result)}\n`);
