#!/usr/bin/env node
// The tensor model's own time per request in one process, as the server's tensor handler does
// it: parse the JSON body, build the input tensor, run, serialise the answer to JSON.
// argv[2] is a JSON object: { modelPath, body, runs }. Prints one JSON line {type:'own-time', inferMs, endToEndMs}.
import * as ort from 'onnxruntime-node';

const options = JSON.parse(process.argv[2]);
const session = await ort.InferenceSession.create(options.modelPath, {
  intraOpNumThreads: 1,
  interOpNumThreads: 1,
  graphOptimizationLevel: 'all',
});
const inputName = session.inputNames[0];
const outputName = session.outputNames[0];
const body = Buffer.from(options.body);
const once = async () => {
  const t0 = performance.now();
  const rows = JSON.parse(body.toString('utf8')).data;
  const feeds = {
    [inputName]: new ort.Tensor('float32', Float32Array.from(rows.flat()), [rows.length, rows[0].length]),
  };
  const t1 = performance.now();
  const out = (await session.run(feeds))[outputName];
  const t2 = performance.now();
  Buffer.from(JSON.stringify({ outputs: { [outputName]: { shape: out.dims, data: Array.from(out.data) } } }));
  return { inferMs: t2 - t1, endToEndMs: performance.now() - t0 };
};
for (let i = 0; i < 50; i++) await once();
const inferMs = [];
const endToEndMs = [];
for (let i = 0; i < options.runs; i++) {
  const r = await once();
  inferMs.push(r.inferMs);
  endToEndMs.push(r.endToEndMs);
}
process.stdout.write(`${JSON.stringify({ type: 'own-time', inferMs, endToEndMs })}\n`);
