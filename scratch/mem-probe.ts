import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { writeResnet, writeSampleJpeg } from '@marina/model-zoo';
import { buildApp } from '../packages/serve/src/index.ts';
import { testConfig } from '../packages/serve/test/helpers.ts';
import { readProcessMemoryBytes } from '../packages/serve/src/metrics/process-memory.ts';

const root = process.argv[2]!;
const cycles = Number(process.argv[3] ?? 4);
const dir = join(root, 'r18');
await mkdir(join(dir, 'MAR-INF'), { recursive: true });
try { await readFile(join(dir, 'model.onnx')); } catch {
  await writeResnet({ depth: 18, outputPath: join(dir, 'model.onnx'), seed: 7 });
}
await writeFile(join(dir, 'MAR-INF', 'MANIFEST.json'), JSON.stringify({ runtime: 'python', model: { modelName: 'r18', modelVersion: '1.0', handler: 'image_classifier', serializedFile: 'model.onnx' }, archiverVersion: '0.1.0', createdOn: '01/01/2026 00:00:00' }));
await writeSampleJpeg({ outputPath: join(root, 's.jpg'), width: 320, height: 240 });
const jpeg = await readFile(join(root, 's.jpg'));
const mib = (b: number) => (b / 2 ** 20).toFixed(1);
const gc = () => { (globalThis as any).gc?.(); };
const app = await buildApp(testConfig({ cpuCount: 2 }, root));
const base = await app.inference.listen({ host: '127.0.0.1', port: 0 });
await app.registry.register({ url: 'r18', archivePath: dir, load: false });
gc(); await new Promise((r) => setTimeout(r, 300)); gc();
console.log('start', mib(readProcessMemoryBytes()));
for (let i = 0; i < cycles; i++) {
  const r = await fetch(`${base}/predictions/r18`, { method: 'POST', body: new Uint8Array(jpeg), headers: { 'content-type': 'image/jpeg' } });
  await r.text();
  const loaded = readProcessMemoryBytes();
  await app.registry.unload('r18');
  gc(); await new Promise((r) => setTimeout(r, 500)); gc();
  console.log(`cycle ${i} status ${r.status} loaded ${mib(loaded)} measured ${mib(app.registry.getVersion('r18').residentBytes)} after-unload ${mib(readProcessMemoryBytes())}`);
}
await app.close();
