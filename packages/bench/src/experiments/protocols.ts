import { readOnnxGraph } from '@marina/handlers';
import { emptyRow, type ResultRow } from '../bench-result.ts';
import { runGrpcLoad } from '../grpc-load-generator.ts';
import { runLoad } from '../load-generator.ts';
import { listProcessTree, startProcessSampler } from '../process-sampler.ts';
import type { RunningServer } from '../server-process.ts';
import { summarizeLatencies } from '../stats.ts';
import {
  bestRound,
  measureServerLoad,
  readImage,
  rowFromLoad,
  withServer,
  type ExperimentContext,
} from './experiment-context.ts';

/** Rounds of the protocols comparison at many clients; the three protocols alternate within each. */
const PROTOCOL_ROUNDS = 3;

/** Blocks of the 1 MB round trip; REST and gRPC alternate. */
const ROUND_TRIP_BLOCKS = 4;

/** A v2 REST body in the binary tensor data extension's layout, and its header length. */
function v2BinaryBody(name: string, shape: number[], raw: Buffer): { body: Buffer; headerLength: number } {
  const header = Buffer.from(
    JSON.stringify({
      inputs: [{ name, datatype: 'FP32', shape, parameters: { binary_data_size: raw.length } }],
      parameters: { binary_data_output: true },
    }),
  );
  return { body: Buffer.concat([header, raw]), headerLength: header.length };
}

function randomFloats(count: number): Buffer {
  const values = new Float32Array(count);
  for (let i = 0; i < count; i++) values[i] = Math.sin(i) * 2;
  return Buffer.from(values.buffer);
}

async function measureGrpc(
  context: ExperimentContext,
  server: RunningServer,
  options: {
    label: string;
    request: Record<string, unknown>;
    concurrency: number;
    requests: number;
    warmupRequests: number;
  },
): Promise<ResultRow> {
  context.onProgress({ type: 'phase', label: options.label, total: options.requests });
  await runGrpcLoad({
    target: server.grpcTarget,
    request: options.request,
    concurrency: options.concurrency,
    requests: 0,
    warmupRequests: options.warmupRequests,
  });
  const tree = listProcessTree(server.pid);
  const sampler = startProcessSampler({ getPids: () => tree });
  const load = await runGrpcLoad({
    target: server.grpcTarget,
    request: options.request,
    concurrency: options.concurrency,
    requests: options.requests,
    durationMs: context.plan.maxRunMs,
    onProgress: (done) => context.onProgress({ type: 'tick', done }),
  });
  sampler.sample();
  return rowFromLoad('protocols', options.label, options.concurrency, load, sampler.stop());
}

/**
 * Protocols: the main model through TorchServe's route (a JPEG, decoded in the worker), OIP v2
 * REST with a binary tensor (the preprocessed [1,3,S,S] FP32 input) and OIP v2 gRPC with
 * raw_input_contents, on one server at `plan.concurrency`; then a 1 MB FP32 tensor's round trip
 * (the 2x+1 tensor model, [65536,4] in and out) through REST binary and gRPC at one client.
 * Ratios go to the notes; no target is asserted here.
 */
export async function runProtocols(context: ExperimentContext): Promise<{ rows: ResultRow[]; notes: string[] }> {
  const rows: ResultRow[] = [];
  const notes: string[] = [];
  await compareProtocols(context, { rows, notes });
  const tensorAssets = context.tensorAssets;
  if (tensorAssets) await measureRoundTrip(context, tensorAssets, { rows, notes });
  return { rows, notes };
}

/** The main model through the three protocols on one server, in alternating rounds; each keeps its best round. */
async function compareProtocols(
  context: ExperimentContext,
  out: { rows: ResultRow[]; notes: string[] },
): Promise<void> {
  const { rows, notes } = out;
  const input = (await readOnnxGraph(context.assets.modelPath)).inputs[0]!;
  const size = typeof input.shape[2] === 'number' && input.shape[2] > 0 ? input.shape[2] : 224;
  const shape = [1, 3, size, size];
  const raw = randomFloats(3 * size * size);
  const jpeg = await readImage(context.assets);
  const { plan } = context;
  const warmupRequests = 8;
  await withServer(context, { assets: context.assets, label: 'protocols' }, async (server, path) => {
    const modelName = path.replace('/predictions/', '');
    const v2 = v2BinaryBody(input.name, shape, raw);
    // At least one request per client in each round, so every round runs with the queue full.
    const perRound = Math.max(plan.concurrency, Math.ceil(plan.images / 2));
    const measures: Array<() => Promise<ResultRow>> = [
      () =>
        measureServerLoad(context, server, {
          path,
          body: jpeg,
          experiment: 'protocols',
          label: 'TorchServe REST, JPEG',
          concurrency: plan.concurrency,
          requests: perRound,
          warmupRequests,
        }),
      () =>
        measureServerLoad(context, server, {
          path: `/v2/models/${modelName}/infer`,
          body: v2.body,
          headers: { 'inference-header-content-length': String(v2.headerLength) },
          experiment: 'protocols',
          label: 'OIP v2 REST, binary FP32 tensor',
          concurrency: plan.concurrency,
          requests: perRound,
          warmupRequests,
        }),
      () =>
        measureGrpc(context, server, {
          label: 'OIP v2 gRPC, raw FP32 tensor',
          concurrency: plan.concurrency,
          requests: perRound,
          warmupRequests,
          request: {
            model_name: modelName,
            inputs: [{ name: input.name, datatype: 'FP32', shape }],
            raw_input_contents: [raw],
          },
        }),
    ];
    // The machine's speed drifts over minutes: the three protocols take turns, in rounds (the
    // order rotating), and each keeps its best round, as the overhead experiment does.
    const rounds: ResultRow[][] = measures.map(() => []);
    for (let round = 0; round < PROTOCOL_ROUNDS; round++) {
      for (let k = 0; k < measures.length; k++) {
        const i = (k + round) % measures.length;
        rounds[i]!.push(await measures[i]!());
      }
    }
    const [torchServe, v2Rest, v2Grpc] = rounds.map((measured) => bestRound(measured, 'img/s', 2)) as [
      ResultRow,
      ResultRow,
      ResultRow,
    ];
    rows.push(torchServe, v2Rest, v2Grpc);
    const ratio = (r: ResultRow) => (r.throughputPerSec / torchServe.throughputPerSec).toFixed(3);
    notes.push(
      `Protocols at ${plan.concurrency} clients (${context.assets.model}, best of ${PROTOCOL_ROUNDS} alternating rounds of ${perRound} requests): OIP REST binary ÷ TorchServe route = ${ratio(v2Rest)}, OIP gRPC ÷ TorchServe route = ${ratio(v2Grpc)} (images/s ${torchServe.throughputPerSec.toFixed(1)}, ${v2Rest.throughputPerSec.toFixed(1)}, ${v2Grpc.throughputPerSec.toFixed(1)}). The TorchServe route sends a JPEG that the worker decodes; the v2 rows send the preprocessed tensor (${raw.length} bytes).`,
    );
  });
}

/** A 1 MB FP32 tensor's round trip at one client, REST binary and gRPC in alternating blocks. */
async function measureRoundTrip(
  context: ExperimentContext,
  tensorAssets: NonNullable<ExperimentContext['tensorAssets']>,
  out: { rows: ResultRow[]; notes: string[] },
): Promise<void> {
  const { rows, notes } = out;
  const { plan } = context;
  const rowsPerMb = (1024 * 1024) / 16;
  const mb = randomFloats(rowsPerMb * 4);
  const requests = Math.max(20, Math.min(200, plan.images));
  await withServer(context, { model: tensorAssets, label: 'protocols 1 MB' }, async (server) => {
    const model = tensorAssets.modelName;
    const v2 = v2BinaryBody('input', [rowsPerMb, 4], mb);
    const restPath = `/v2/models/${model}/infer`;
    const restHeaders = { 'inference-header-content-length': String(v2.headerLength) };
    const request = {
      model_name: model,
      inputs: [{ name: 'input', datatype: 'FP32', shape: [rowsPerMb, 4] }],
      raw_input_contents: [mb],
    };
    await runLoad({
      origin: server.origin,
      path: restPath,
      body: v2.body,
      headers: restHeaders,
      concurrency: 1,
      requests: 0,
      warmupRequests: 5,
    });
    await runGrpcLoad({ target: server.grpcTarget, request, concurrency: 1, requests: 0, warmupRequests: 5 });
    // Blocks of each protocol take turns (the order rotating), so a drift of the machine's
    // speed falls on both alike; each protocol's latencies are pooled over its blocks.
    const perBlock = Math.max(5, Math.ceil(requests / ROUND_TRIP_BLOCKS));
    const measured = {
      rest: { latenciesMs: [] as number[], wallMs: 0, errors: 0 },
      grpc: { latenciesMs: [] as number[], wallMs: 0, errors: 0 },
    };
    const runBlock = async (kind: 'rest' | 'grpc') => {
      context.onProgress({
        type: 'phase',
        label: `1 MB FP32 round trip, ${kind === 'rest' ? 'REST binary' : 'gRPC'}`,
        total: perBlock,
      });
      const onProgress = (done: number) => context.onProgress({ type: 'tick', done });
      const load =
        kind === 'rest'
          ? await runLoad({
              origin: server.origin,
              path: restPath,
              body: v2.body,
              headers: restHeaders,
              concurrency: 1,
              requests: perBlock,
              onProgress,
            })
          : await runGrpcLoad({ target: server.grpcTarget, request, concurrency: 1, requests: perBlock, onProgress });
      measured[kind].latenciesMs.push(...load.latenciesMs);
      measured[kind].wallMs += load.wallMs;
      measured[kind].errors += load.errors;
    };
    for (let block = 0; block < ROUND_TRIP_BLOCKS; block++) {
      for (const kind of block % 2 === 0 ? (['rest', 'grpc'] as const) : (['grpc', 'rest'] as const))
        await runBlock(kind);
    }
    const throughputOf = (m: { latenciesMs: number[]; wallMs: number }) =>
      m.wallMs > 0 ? (m.latenciesMs.length * 1000) / m.wallMs : 0;
    const rest = { ...measured.rest, throughputPerSec: throughputOf(measured.rest) };
    const grpc = { ...measured.grpc, throughputPerSec: throughputOf(measured.grpc) };
    const restLatency = summarizeLatencies(rest.latenciesMs);
    const grpcLatency = summarizeLatencies(grpc.latenciesMs);
    for (const [label, latency, load] of [
      ['1 MB FP32 round trip, REST binary', restLatency, rest],
      ['1 MB FP32 round trip, gRPC', grpcLatency, grpc],
    ] as const) {
      rows.push({
        ...emptyRow('protocols', label),
        images: latency.count,
        concurrency: 1,
        throughputPerSec: load.throughputPerSec,
        p50Ms: latency.p50Ms,
        p90Ms: latency.p90Ms,
        p99Ms: latency.p99Ms,
        errors: load.errors,
      });
    }
    notes.push(
      `1 MB FP32 tensor round trip at one client (${rest.latenciesMs.length} and ${grpc.latenciesMs.length} requests in ${ROUND_TRIP_BLOCKS} alternating blocks each; the client reads each answer as bytes): REST binary p50 ${restLatency.p50Ms.toFixed(2)} ms, gRPC p50 ${grpcLatency.p50Ms.toFixed(2)} ms; REST − gRPC = ${(restLatency.p50Ms - grpcLatency.p50Ms).toFixed(2)} ms (target: under 1 ms).`,
    );
  });
}
