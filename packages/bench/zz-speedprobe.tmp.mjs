// onnxruntime alone: models taking turns, median ms per run at batch 1 with 1 and 2 intra-op threads;
// then one profiled session per model: ms per op type (summed over 20 runs), to see where int8 loses.
import * as ort from 'onnxruntime-node';
import { readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
const models = process.argv.slice(2).map((a) => a.split('='));
const dims = (process.env.DIMS ?? '1,3,320,320').split(',').map(Number);
const input = new ort.Tensor(
  'float32',
  new Float32Array(dims.reduce((a, b) => a * b, 1)).map((_, i) => ((i * 2654435761) % 1000) / 1000 - 0.5),
  dims,
);
const median = (t) => [...t].sort((a, b) => a - b)[Math.floor(t.length / 2)];
console.log(
  `load ${os
    .loadavg()
    .map((x) => x.toFixed(2))
    .join(' ')}`,
);
for (const threads of [1, 2]) {
  const sessions = [];
  for (const [, p] of models)
    sessions.push(await ort.InferenceSession.create(p, { intraOpNumThreads: threads, graphOptimizationLevel: 'all' }));
  const times = models.map(() => []);
  for (let i = 0; i < 25; i++)
    for (const [k, s] of sessions.entries()) {
      const t = performance.now();
      await s.run({ [s.inputNames[0]]: input });
      if (i >= 3) times[k].push(performance.now() - t);
    }
  console.log(`threads ${threads}: ` + models.map(([l], k) => `${l} ${median(times[k]).toFixed(2)} ms`).join(', '));
  for (const s of sessions) await s.release();
}
for (const [label, p] of models) {
  const s = await ort.InferenceSession.create(p, {
    intraOpNumThreads: 1,
    graphOptimizationLevel: 'all',
    enableProfiling: true,
    profileFilePrefix: `/tmp/q33/det/prof-${label}`,
  });
  for (let i = 0; i < 20; i++) await s.run({ [s.inputNames[0]]: input });
  const file = s.endProfiling ? s.endProfiling() : undefined;
  await s.release();
  const { readdirSync } = await import('node:fs');
  const f =
    file ??
    readdirSync('/tmp/q33/det')
      .filter((n) => n.startsWith(`prof-${label}`))
      .map((n) => `/tmp/q33/det/${n}`)
      .pop();
  const events = JSON.parse(readFileSync(f, 'utf8'));
  const byOp = {};
  let total = 0;
  for (const e of events)
    if (e.cat === 'Node' && e.name.endsWith('_kernel_time')) {
      const op = e.args?.op_name ?? '?';
      byOp[op] = (byOp[op] ?? 0) + e.dur / 1000 / 20;
      total += e.dur / 1000 / 20;
    }
  console.log(
    `${label} profile (1 thread, ms per run by op): total ${total.toFixed(2)}; ` +
      Object.entries(byOp)
        .sort((a, b) => b[1] - a[1])
        .slice(0, 12)
        .map(([o, ms]) => `${o} ${ms.toFixed(2)}`)
        .join(', '),
  );
}
console.log(
  `load ${os
    .loadavg()
    .map((x) => x.toFixed(2))
    .join(' ')}`,
);
