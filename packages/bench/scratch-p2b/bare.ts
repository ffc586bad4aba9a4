import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { runLoad } from '../src/load-generator.ts';
import { summarizeLatencies } from '../src/stats.ts';
const child = spawn(process.execPath, [new URL('../src/jobs/bare-server.mjs', import.meta.url).pathname], { stdio: ['ignore', 'pipe', 'inherit'] });
const port = await new Promise<number>((r) => createInterface({ input: child.stdout! }).once('line', (l) => r(JSON.parse(l).port)));
const body = Buffer.from(JSON.stringify({ data: [[1, 2, 3, 4]] }));
for (const c of [1, 32]) {
  const o = { origin: `http://127.0.0.1:${port}`, path: '/predictions/tt', body, contentType: 'application/json', concurrency: c };
  await runLoad({ ...o, requests: 0, warmupRequests: 200 });
  const r = await runLoad({ ...o, requests: 1e7, durationMs: 3000 });
  const l = summarizeLatencies(r.latenciesMs);
  console.log(JSON.stringify({ c, rps: +r.throughputPerSec.toFixed(1), p50: +l.p50Ms.toFixed(2), p99: +l.p99Ms.toFixed(2) }));
}
child.kill();
