#!/usr/bin/env node
// Start-up time and memory of `serve`, sources (tsx) against compiled code (dist/):
// process start to the first `GET /ping` 200 {"status":"Healthy"} with a ResNet-18 loaded
// (token authorization on, one worker), and the resident memory of the server's processes then.
//
//   node scripts/measure-startup.mjs [--runs 5] [--serve source=packages/serve/bin/serve.js] ...
//
// Default: the repository's bin twice, once as is (a clone runs src/ through tsx) and once with
// MARINA_COMPILED=1 (dist/, which must be built: pnpm build). --serve label=path adds another bin,
// e.g. an installed one. Runs alternate between the bins. Polls /ping every 5 ms.
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(fileURLToPath(new URL('..', import.meta.url)));
const args = process.argv.slice(2);
const runs = Number(args.includes('--runs') ? args[args.indexOf('--runs') + 1] : 5);
const repoBin = join(root, 'packages/serve/bin/serve.js');
const targets = [
  { label: 'sources (tsx)', bin: repoBin, env: {} },
  { label: 'compiled (dist/)', bin: repoBin, env: { MARINA_COMPILED: '1' } },
];
args.forEach((arg, i) => {
  if (arg !== '--serve') return;
  const [label, bin] = args[i + 1].split('=');
  targets.push({ label, bin: resolve(bin), env: {} });
});

const work = mkdtempSync(join(tmpdir(), 'marina-startup-'));
const freePort = () =>
  new Promise((done) => {
    const s = createServer();
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => done(port));
    });
  });

/** Resident memory (MB) of a process and its descendants, from /proc. */
function treeRssMb(pid) {
  let total = 0;
  const visit = (p) => {
    try {
      total += Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${p}/status`, 'utf8'))[1]) / 1024;
    } catch {
      return;
    }
    for (const task of readdirSync(`/proc/${p}/task`)) {
      let children = '';
      try {
        children = readFileSync(`/proc/${p}/task/${task}/children`, 'utf8');
      } catch {
        /* gone */
      }
      for (const child of children.trim().split(/\s+/).filter(Boolean)) visit(child);
    }
  };
  visit(pid);
  return total;
}

async function measure(target) {
  const dir = mkdtempSync(join(work, 'run-'));
  const port = await freePort();
  writeFileSync(
    join(dir, 'config.properties'),
    [
      `inference_address=http://127.0.0.1:${port}`,
      `management_address=http://127.0.0.1:${await freePort()}`,
      `metrics_address=http://127.0.0.1:${await freePort()}`,
      'grpc_inference_port=0',
      'grpc_management_port=0',
      `model_store=${join(work, 'store')}`,
      'load_models=resnet-18.mar',
      'default_workers_per_model=1',
      '',
    ].join('\n'),
  );
  const started = performance.now();
  const child = spawn(
    process.execPath,
    [target.bin, '--foreground', '--ncs', '--ts-config', join(dir, 'config.properties')],
    {
      cwd: dir,
      stdio: 'ignore',
      env: { ...process.env, TMPDIR: dir, ...target.env },
    },
  );
  const exited = new Promise((done) => child.on('exit', done));
  let healthyMs;
  for (;;) {
    const status = await fetch(`http://127.0.0.1:${port}/ping`).then(
      (r) => r.status,
      () => 0,
    );
    if (status === 200) {
      healthyMs = performance.now() - started;
      break;
    }
    if (child.exitCode !== null) throw new Error(`${target.label}: serve exited with ${child.exitCode}`);
    await new Promise((done) => setTimeout(done, 5));
  }
  const rssMb = treeRssMb(child.pid);
  child.kill('SIGTERM');
  await exited;
  rmSync(dir, { recursive: true, force: true });
  return { healthyMs, rssMb };
}

try {
  const bins = {
    models: join(root, 'packages/model-zoo/bin/marina-models.js'),
    archiver: join(root, 'packages/model-archiver/bin/model-archiver.js'),
  };
  execFileSync(process.execPath, [bins.models, 'generate', '--out', 'generated', '--models', 'resnet-18'], {
    cwd: work,
    stdio: 'ignore',
  });
  execFileSync(
    process.execPath,
    [
      bins.archiver,
      '--model-name',
      'resnet-18',
      '--version',
      '1.0',
      '--serialized-file',
      'generated/resnet-18.onnx',
      '--handler',
      'image_classifier',
      '--extra-files',
      'generated/index_to_name.json',
      '--export-path',
      'store',
    ],
    { cwd: work, stdio: 'ignore' },
  );
  const results = new Map(targets.map((target) => [target.label, []]));
  for (let run = 0; run < runs; run++) {
    for (const target of targets) results.get(target.label).push(await measure(target));
  }
  const median = (values) => values.slice().sort((a, b) => a - b)[Math.floor(values.length / 2)];
  console.log(`| serve | start to /ping Healthy, median (min–max) | RSS at Healthy, median (min–max) |`);
  console.log('|---|---|---|');
  for (const [label, rows] of results) {
    const ms = rows.map((row) => row.healthyMs);
    const mb = rows.map((row) => row.rssMb);
    console.log(
      `| ${label} | ${median(ms).toFixed(0)} ms (${Math.min(...ms).toFixed(0)}–${Math.max(...ms).toFixed(0)}) | ${median(mb).toFixed(0)} MB (${Math.min(...mb).toFixed(0)}–${Math.max(...mb).toFixed(0)}) |`,
    );
  }
  console.log(
    `\n${runs} runs each, alternating; ResNet-18, one worker, token authorization on; ${new Date().toISOString()}; load average ${readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ')}`,
  );
} finally {
  rmSync(work, { recursive: true, force: true });
}
