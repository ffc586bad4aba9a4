/**
 * Load check (not part of the suite): a generated ResNet-18 behind the image_classifier over
 * real HTTP, 100 concurrent clients each POSTing a 640x480 JPEG as application/octet-stream.
 * Run: cd packages/serve && npx tsx test/load/hundred-clients.mts [requestsPerClient=3] [workers=1] [batchSize=8]
 */
import { availableParallelism } from 'node:os';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { loadImagenetClassNames, writeIndexToName, writeResnet, writeSampleJpeg } from '@marina/model-zoo';
import { buildApp } from '../../src/index.ts';
import { tempDir, testConfig, writeModelFolder } from '../helpers.ts';

const perClient = Number(process.argv[2] ?? 3);
const workers = Number(process.argv[3] ?? 1);
const batchSize = Number(process.argv[4] ?? 8);
const clients = 100;

const dir = await tempDir('marina-load-');
const folder = join(dir.path, 'resnet-18');
await writeModelFolder({
  dir: folder,
  modelName: 'resnet-18',
  handler: 'image_classifier',
  writeModel: (p) => writeResnet({ depth: 18, outputPath: p }),
  modelConfigYaml: `minWorkers: ${workers}\nbatchSize: ${batchSize}\nmaxBatchDelay: 50\n`,
});
await writeIndexToName(join(folder, 'index_to_name.json'), await loadImagenetClassNames());
await writeSampleJpeg({ outputPath: join(dir.path, 'sample.jpg') });
const jpeg = await readFile(join(dir.path, 'sample.jpg'));

const app = await buildApp(testConfig({ cpuCount: availableParallelism() }, dir.path));
const batchSizes: number[] = [];
app.registry.events.on('batch', (e) => batchSizes.push(e.batchSize));
await app.registry.register({ url: 'resnet-18', archivePath: folder, synchronous: true });
await app.inference.listen({ host: '127.0.0.1', port: 0 });
const { port } = app.inference.server.address() as { port: number };
const url = `http://127.0.0.1:${port}/predictions/resnet-18`;

const statuses = new Map<number, number>();
let withTop5 = 0;
const latencies: number[] = [];
const started = performance.now();
await Promise.all(
  Array.from({ length: clients }, async () => {
    for (let i = 0; i < perClient; i++) {
      const t0 = performance.now();
      const res = await fetch(url, {
        method: 'POST',
        headers: { 'content-type': 'application/octet-stream' },
        body: jpeg,
      });
      const body = await res.json();
      latencies.push(performance.now() - t0);
      statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
      if (res.status === 200 && Object.keys(body).length === 5) withTop5++;
    }
  }),
);
const seconds = (performance.now() - started) / 1000;
latencies.sort((a, b) => a - b);
const total = clients * perClient;
console.log(
  JSON.stringify({
    requests: total,
    withTop5,
    statuses: Object.fromEntries(statuses),
    seconds: +seconds.toFixed(2),
    imagesPerSecond: +(total / seconds).toFixed(1),
    p50ms: Math.round(latencies[Math.floor(total * 0.5)]!),
    p99ms: Math.round(latencies[Math.floor(total * 0.99)]!),
    workers,
    intraOpNumThreads: app.registry.describe('resnet-18')[0]!.workers.map((w) => w.intraOpNumThreads),
    meanBatch: +(batchSizes.reduce((a, b) => a + b, 0) / batchSizes.length).toFixed(2),
    cores: availableParallelism(),
  }),
);
await app.close();
await dir.cleanup();
