// Scratch profiling harness (deleted before hand-off).
import { mkdir, writeFile } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { packArchive } from '@marina/archive';
import { writeTinyTensorModel } from '@marina/model-zoo';
import { startServer } from '../src/server-process.ts';
import { runLoad } from '../src/load-generator.ts';
import { summarizeLatencies } from '../src/stats.ts';
import { defaultServeBin } from '../src/run-bench.ts';

const store = '/tmp/p2b/store';
async function tensorArchive() {
  if (existsSync(join(store, 'tt.mar'))) return;
  await mkdir('/tmp/p2b/tt', { recursive: true }); await mkdir(store, { recursive: true });
  const m = await writeTinyTensorModel({ outputPath: '/tmp/p2b/tt/model.onnx' });
  await packArchive({ modelName: 'tt', modelVersion: '1.0', handler: 'tensor', serializedFile: m.modelPath, extraFiles: [], exportPath: store, archiveFormat: 'default', isForced: true });
}
const args = JSON.parse(process.argv[2] ?? '{}');
await tensorArchive();
const isImage = !!args.image;
const s = await startServer({
  serveBin: args.serveBin ?? defaultServeBin(), modelStoreDir: isImage ? args.store : store, archiveFileName: isImage ? args.archive : 'tt.mar', modelName: isImage ? args.model : 'tt', modelVersion: '1.0',
  settings: args.settings, env: args.env, workDir: `/tmp/p2b/run-${Date.now()}`, jobQueueSize: 200,
});
const body = isImage ? await (await import('node:fs/promises')).readFile(args.image) : Buffer.from(JSON.stringify({ data: [[1, 2, 3, 4]] }));
const contentType = isImage ? 'application/octet-stream' : 'application/json';
const path = `/predictions/${isImage ? args.model : 'tt'}`;
try {
  for (const c of args.conc ?? [1, 32]) {
    await runLoad({ origin: s.origin, path, body, contentType, concurrency: c, requests: 0, warmupRequests: args.warm ?? 200 });
    const r = await runLoad({ origin: s.origin, path, body, contentType, concurrency: c, requests: args.n ?? 1e7, durationMs: args.ms ?? 3000 });
    const l = summarizeLatencies(r.latenciesMs);
    console.log(JSON.stringify({ c, rps: +r.throughputPerSec.toFixed(1), p50: +l.p50Ms.toFixed(2), p90: +l.p90Ms.toFixed(2), p99: +l.p99Ms.toFixed(2), n: l.count, errors: r.errors, firstError: r.firstError }));
  }
} finally { await s.stop(); console.log('log', s.logPath); }
