// Per-operator profile of one model in two session configurations, side by side: the in-process
// ceiling (onnxruntime-node's own defaults: optimisation 'all', spinning allowed) and Marina's
// worker session (the optimised copy with external weights loaded at 'disabled', spinning as set).
// Usage: node packages/bench/src/jobs/op-profile.mjs <model.onnx> <runs> <intraOpThreads> [allowSpinning 0|1]
// Prints, per operator type, node count and mean µs per run for each configuration.
import { readdirSync, readFileSync, rmSync, mkdtempSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import * as ort from 'onnxruntime-node';
import { createSession } from '../../../serve/src/backend/ort-session.ts';

const [modelPath, runsArg = '20', threadsArg = '2', spinArg = '0'] = process.argv.slice(2);
const runs = Number(runsArg);
const threads = Number(threadsArg);
const work = mkdtempSync(path.join(os.tmpdir(), 'marina-op-profile-'));

async function profile(label, make) {
  const session = await make();
  const meta = session.inputMetadata[0];
  const dims = meta.shape.map((d) => (typeof d === 'number' && d > 0 ? d : 1));
  const feed = {
    [meta.name]: new ort.Tensor('float32', new Float32Array(dims.reduce((a, b) => a * b, 1)).fill(0.5), dims),
  };
  for (let i = 0; i < 3; i++) await session.run(feed);
  session.startProfiling?.();
  const started = performance.now();
  for (let i = 0; i < runs; i++) await session.run(feed);
  const wallMs = (performance.now() - started) / runs;
  session.endProfiling();
  await session.release();
  // onnxruntime-node writes <prefix>_<timestamp>.json and returns nothing: take the newest file of this label.
  const files = readdirSync(work)
    .filter((f) => f.startsWith(label) && f.endsWith('.json'))
    .sort();
  const file = path.join(work, files.at(-1));
  const events = JSON.parse(readFileSync(file, 'utf8'));
  for (const f of files) rmSync(path.join(work, f), { force: true });
  const byOp = new Map();
  for (const e of events) {
    if (e.cat !== 'Node' || !e.name.endsWith('_kernel_time')) continue;
    const op = e.args?.op_name ?? '?';
    const entry = byOp.get(op) ?? { us: 0, nodes: new Set() };
    entry.us += e.dur;
    entry.nodes.add(e.name);
    byOp.set(op, entry);
  }
  return { label, wallMs, byOp };
}

process.chdir(work);
const ceiling = await profile('ceiling', () =>
  ort.InferenceSession.create(modelPath, {
    intraOpNumThreads: threads,
    enableProfiling: true,
    profileFilePrefix: path.join(work, 'ceiling'),
  }),
);
const marina = await profile('marina', async () => {
  // Marina's own session factory, with profiling switched on through the same options object.
  const original = ort.InferenceSession.create.bind(ort.InferenceSession);
  ort.InferenceSession.create = (p, o) =>
    original(p, { ...o, enableProfiling: true, profileFilePrefix: path.join(work, 'marina') });
  try {
    return await createSession(modelPath, {
      threading: { intraOpNumThreads: threads },
      ort: { allowSpinning: spinArg === '1', cacheOptimizedModel: true },
      cacheOptimizedModelDefault: undefined,
    });
  } finally {
    ort.InferenceSession.create = original;
  }
});
const ops = new Set([...ceiling.byOp.keys(), ...marina.byOp.keys()]);
console.log(
  `runs ${runs}, ${threads} intra-op threads, Marina spinning ${spinArg === '1' ? 'on' : 'off'}; load ${os
    .loadavg()
    .map((l) => l.toFixed(1))
    .join(' ')}`,
);
console.log(
  `wall per run: ceiling ${ceiling.wallMs.toFixed(2)} ms, marina ${marina.wallMs.toFixed(2)} ms (ratio ${(ceiling.wallMs / marina.wallMs).toFixed(3)})`,
);
console.log(['op type'.padEnd(28), 'nodes c/m'.padEnd(12), 'ceiling µs/run'.padEnd(17), 'marina µs/run'].join(''));
for (const op of [...ops].sort((a, b) => (marina.byOp.get(b)?.us ?? 0) - (marina.byOp.get(a)?.us ?? 0))) {
  const c = ceiling.byOp.get(op);
  const m = marina.byOp.get(op);
  console.log(
    op.padEnd(28) +
      `${c?.nodes.size ?? 0}/${m?.nodes.size ?? 0}`.padEnd(12) +
      String(Math.round((c?.us ?? 0) / runs)).padEnd(17) +
      String(Math.round((m?.us ?? 0) / runs)),
  );
}
rmSync(work, { recursive: true, force: true });
