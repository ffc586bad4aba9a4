#!/usr/bin/env node
// Where a server's CPU goes, per thread, under load: the profile behind the report's
// "Best server ≥ 95% of the ceiling" explanation.
//
//   node packages/bench/src/jobs/thread-profile.mjs <model-store> <model-name> <image.jpg> <workers> <threads> [requests=120] [clients=100]
//
// Starts `serve --foreground` on port 18080 with batchSize 8 / maxBatchDelay 100 and the given
// workers × intra-op threads, warms up, sends the requests from `clients` concurrent clients, and
// prints the CPU seconds each thread of the server spent during the measured part (from
// /proc/<pid>/task/<tid>/stat): the HTTP main thread, libvips' decode threads, and the worker /
// onnxruntime threads (named "node").
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const [store, model, imagePath, workers, threads, requestsArg = '120', clientsArg = '100'] = process.argv.slice(2);
if (!store || !model || !imagePath || !workers || !threads) {
  console.error(
    'usage: thread-profile.mjs <model-store> <model-name> <image.jpg> <workers> <threads> [requests] [clients]',
  );
  process.exit(2);
}
const serveBin = fileURLToPath(new URL('../../../serve/bin/serve.js', import.meta.url));
const dir = mkdtempSync(join(tmpdir(), 'marina-thread-profile-'));
const port = 18080;
writeFileSync(
  join(dir, 'config.properties'),
  [
    `inference_address=http://127.0.0.1:${port}`,
    `management_address=http://127.0.0.1:${port + 1}`,
    'enable_metrics_api=false',
    `model_store=${store}`,
    `load_models=${model}=${model}.mar`,
    'disable_token_authorization=true',
    'job_queue_size=1000',
    `models={"${model}":{"1.0":{"minWorkers":${workers},"maxWorkers":${workers},"intraOpNumThreads":${threads},"batchSize":8,"maxBatchDelay":100}}}`,
  ].join('\n'),
);
const child = spawn(process.execPath, [serveBin, '--foreground', '--ts-config', 'config.properties', '--ncs'], {
  cwd: dir,
  env: { ...process.env, MARINA_NO_REEXEC: '1', MALLOC_MMAP_THRESHOLD_: '1048576', TMPDIR: dir },
  stdio: ['ignore', 'ignore', 'inherit'],
});
const url = `http://127.0.0.1:${port}/predictions/${model}`;
for (let i = 0; i < 600; i++) {
  try {
    if ((await fetch(`http://127.0.0.1:${port}/ping`)).ok) break;
  } catch {
    /* not up yet */
  }
  await new Promise((r) => setTimeout(r, 200));
}
const body = readFileSync(imagePath);
const ticksPerSecond = 100;
function threadCpu() {
  const out = new Map();
  for (const tid of readdirSync(`/proc/${child.pid}/task`)) {
    try {
      const stat = readFileSync(`/proc/${child.pid}/task/${tid}/stat`, 'utf8');
      const comm = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      const name = tid === String(child.pid) ? 'main (HTTP)' : comm === 'node' ? `node thread ${tid}` : comm;
      out.set(tid, { name, seconds: (Number(fields[11]) + Number(fields[12])) / ticksPerSecond });
    } catch {
      /* the thread ended */
    }
  }
  return out;
}
async function load(requests, clients) {
  let next = 0;
  await Promise.all(
    Array.from({ length: clients }, async () => {
      while (next++ < requests) {
        const response = await fetch(url, {
          method: 'POST',
          headers: { 'content-type': 'application/octet-stream' },
          body,
        });
        if (!response.ok) throw new Error(`HTTP ${response.status}: ${await response.text()}`);
        await response.arrayBuffer();
      }
    }),
  );
}
try {
  await load(16, 8);
  const before = threadCpu();
  const started = Date.now();
  await load(Number(requestsArg), Number(clientsArg));
  const wallSeconds = (Date.now() - started) / 1000;
  const byName = new Map();
  for (const [tid, { name, seconds }] of threadCpu())
    byName.set(name, (byName.get(name) ?? 0) + seconds - (before.get(tid)?.seconds ?? 0));
  console.log(
    `${workers} worker(s) × ${threads} thread(s): ${(Number(requestsArg) / wallSeconds).toFixed(2)} img/s over ${wallSeconds.toFixed(1)} s`,
  );
  for (const [name, seconds] of [...byName].sort((a, b) => b[1] - a[1])) {
    if (seconds >= 0.05)
      console.log(
        `  ${name.padEnd(20)} ${seconds.toFixed(2)} s CPU = ${((100 * seconds) / wallSeconds).toFixed(1)}% of one core`,
      );
  }
} finally {
  child.kill('SIGTERM');
}
