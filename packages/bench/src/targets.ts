import type { MemoryVariant, ReferenceTimings, ResultRow, TargetCheck } from './bench-result.ts';
import { ceilingRowAtBatch1 } from './experiments/ceiling.ts';
import type { Int8LayoutServer, Int8Summary } from './bench-result.ts';
import { explainInt8Time } from './experiments/int8.ts';
import { LONE_CLIENT_BLOCK, summarizeLoneClient } from './experiments/server-experiments.ts';
import { median } from './stats.ts';
import { isVnniIn } from './machine-info.ts';

const fmt = (value: number, digits = 1): string => (Number.isFinite(value) ? value.toFixed(digits) : 'n/a');
/** A difference with its sign: +6.8 or −1.3. */
const signed = (value: number, digits = 1): string =>
  value < 0 ? `−${fmt(-value, digits)}` : `+${fmt(value, digits)}`;
const pct = (value: number): string => (Number.isFinite(value) ? `${(value * 100).toFixed(0)}%` : 'n/a');

function best(rows: readonly ResultRow[]): ResultRow | undefined {
  return rows
    .filter((r) => Number.isFinite(r.throughputPerSec))
    .reduce<ResultRow | undefined>(
      (acc, r) => (acc === undefined || r.throughputPerSec > acc.throughputPerSec ? r : acc),
      undefined,
    );
}

/** The best-throughput row among the server experiments at the load concurrency (centralized, batched under load, workers). */
export function bestServerRow(rows: readonly ResultRow[]): ResultRow | undefined {
  return best(
    rows.filter(
      (r) =>
        (r.experiment === 'centralized' || r.experiment === 'workers' || r.experiment === 'batched') &&
        r.concurrency > 1,
    ),
  );
}

export function bestOf(rows: readonly ResultRow[], experiment: ResultRow['experiment']): ResultRow | undefined {
  return best(rows.filter((r) => r.experiment === experiment));
}

const unmeasured = (name: string, target: string): TargetCheck => ({
  name,
  target,
  measured: 'not measured in this run',
  isMet: undefined,
  explanation: '',
});

/**
 * Checks Marina's performance targets against one run; where a target is missed the explanation
 * gives the shortfall and the measured components behind it. The image-model targets (ceiling,
 * centralized, batching wait, worker memory) are set for ResNet-152 and also checked, so labelled,
 * for the other ResNets; they are left out for the tiny model, whose run time is microseconds (the
 * smoke run). The server-overhead targets use the tensor model and apply to every run.
 */
export function checkTargets(input: TargetInputs['input']): TargetCheck[] {
  const { rows } = input;
  const ceiling = bestOf(rows, 'ceiling');
  const bestServer = bestServerRow(rows);
  const t: TargetInputs = {
    input,
    ref: input.references,
    ceiling,
    // Issue 16 defines the ceiling as onnxruntime alone with its own defaults at batch 1; the best
    // batch size is the stricter yardstick, and both ratios are printed.
    ceilingBatch1: ceilingRowAtBatch1(rows.filter((r) => r.experiment === 'ceiling')),
    decentralized: bestOf(rows, 'decentralized'),
    server: best([...rows.filter((r) => r.experiment === 'sweep'), ...(bestServer ? [bestServer] : [])]),
    onModel: input.model === 'resnet-152' ? '' : ` (set for ResNet-152; this run: ${input.model})`,
  };
  const isImageModelTarget = input.model !== 'tiny';
  const checks: TargetCheck[] = [
    ...(isImageModelTarget ? [ceilingTarget(t), centralizedTarget(t)] : []),
    overheadThroughputTarget(t),
    overheadLatencyTarget(t),
    ...(isImageModelTarget ? [batchingWaitTarget(t), workerMemoryTarget(t)] : []),
  ];
  if (input.int8 !== undefined || input.model !== 'tiny')
    checks.push(
      ...checkInt8Targets(input.int8, t.onModel, {
        fp32CeilingBatch1PerSec: t.ceilingBatch1?.throughputPerSec,
        cpuFlags: input.cpuFlags,
      }),
    );
  return checks;
}

/** One run's rows and references, and the rows the targets compare. */
interface TargetInputs {
  input: {
    model: string;
    rows: readonly ResultRow[];
    references: ReferenceTimings;
    memory: readonly MemoryVariant[];
    modelSizeMb: number;
    cpuCount: number;
    int8?: Int8Summary | undefined;
    cpuFlags?: readonly string[] | undefined;
  };
  ref: ReferenceTimings;
  ceiling: ResultRow | undefined;
  ceilingBatch1: ResultRow | undefined;
  decentralized: ResultRow | undefined;
  /** The best server configuration: the sweep's rows and the best server experiment's. */
  server: ResultRow | undefined;
  /** ` (set for ResNet-152; this run: <model>)`, or nothing for ResNet-152. */
  onModel: string;
}

/** Best server ≥ 95% of the ceiling (onnxruntime alone at batch 1). */
function ceilingTarget(t: TargetInputs): TargetCheck {
  const { input, ref, ceiling, ceilingBatch1, server, onModel } = t;
  const name = 'Best server ≥ 95% of the ceiling';
  const target = `best server configuration ≥ 0.95 × the ceiling (onnxruntime alone with its own defaults at batch 1, preprocessed input), JPEG decoding included${onModel}`;
  const yardstick = ceilingBatch1 ?? ceiling;
  if (!ceiling || !yardstick || !server) return unmeasured(name, target);
  const ratio = server.throughputPerSec / yardstick.throughputPerSec;
  const decodeShare = (ref.ownEndToEndP50Ms - ref.ownInferP50Ms) / ref.ownEndToEndP50Ms;
  const bestBatchText =
    yardstick === ceiling
      ? ''
      : `; against the ceiling's best batch size (${ceiling.config.replace(/^.*, /, '')}, ${fmt(ceiling.throughputPerSec)} img/s): ${pct(server.throughputPerSec / ceiling.throughputPerSec)}`;
  return {
    name,
    target,
    measured: `${fmt(server.throughputPerSec)} vs ${fmt(yardstick.throughputPerSec)} img/s = ${pct(ratio)} (${server.config}, ${server.concurrency} clients${bestBatchText})`,
    isMet: ratio >= 0.95,
    explanation:
      ratio >= 0.95
        ? ''
        : [
            `short by ${pct(0.95 - ratio)} of the ceiling (${fmt(0.95 * yardstick.throughputPerSec - server.throughputPerSec)} img/s).`,
            `Measured components: one image's decode + preprocess takes ${fmt(ref.ownEndToEndP50Ms - ref.ownInferP50Ms)} ms of its ${fmt(ref.ownEndToEndP50Ms)} ms in one process (${pct(decodeShare)}), work the ceiling leaves out by definition;`,
            `the server used ${fmt(server.meanCpuPercent, 0)}% CPU on average (ceiling ${fmt(ceiling.meanCpuPercent, 0)}%, machine ${input.cpuCount * 100}%).`,
            server.meanCpuPercent < ceiling.meanCpuPercent * 0.9
              ? 'The server left cores idle: the model was not kept busy (queueing or hand-off gaps).'
              : 'The server kept the cores as busy as the ceiling: the gap is CPU spent outside the model (decoding, HTTP, copies) competing with inference threads.',
          ].join(' '),
  };
}

/** Centralized ≥ 4× the best decentralized jobs. */
function centralizedTarget(t: TargetInputs): TargetCheck {
  const { decentralized, server, onModel } = t;
  const name = 'Centralized ≥ 4× decentralized';
  const target = `best server configuration ≥ 4 × best decentralized throughput${onModel}`;
  if (!decentralized || !server) return unmeasured(name, target);
  const ratio = server.throughputPerSec / decentralized.throughputPerSec;
  return {
    name,
    target,
    measured: `${fmt(server.throughputPerSec)} vs ${fmt(decentralized.throughputPerSec)} img/s = ${fmt(ratio, 2)}× (decentralized ${decentralized.config}, ${pct(decentralized.loadShare)} of each job loading the model)`,
    isMet: ratio >= 4,
    explanation:
      ratio >= 4
        ? ''
        : `short by ${fmt(4 - ratio, 2)}×. A job spends ${pct(decentralized.loadShare)} of its time loading the model; the 4× target assumes loading dominates, which holds less for smaller models (the reference measured 61–65% for ResNet-152, 38–43% for ResNet-18).`,
  };
}

/** Server overhead: the tensor model at ≥ half a bare fastify route's requests/s. */
function overheadThroughputTarget(t: TargetInputs): TargetCheck {
  const { ref } = t;
  const { rows } = t.input;
  const bareMany = rows.find((r) => r.experiment === 'overhead' && r.config.startsWith('bare') && r.concurrency > 1);
  // The target is about the server's own overhead: judge its best configuration for the model (the row's config says which).
  const serverMany = rows
    .filter((r) => r.experiment === 'overhead' && r.config.startsWith('Marina') && r.concurrency > 1)
    .reduce<ResultRow | undefined>(
      (best, r) => (best === undefined || r.throughputPerSec > best.throughputPerSec ? r : best),
      undefined,
    );
  const name = 'Server overhead: ≥ half a bare fastify route';
  const target =
    'tensor model (2x+1) requests/s ≥ 0.5 × a bare fastify route returning a constant (same client, same JSON body, same concurrency)';
  const rounds = ref.overheadRounds;
  if (!bareMany || !serverMany || rounds.length === 0) return unmeasured(name, target);
  // Judged on the median of the rounds' own ratios (bare and server measured one right after the other).
  const ratios = rounds.map((r) => r.serverReqPerSec / r.bareReqPerSec);
  const ratio = median(ratios);
  const perRequestMs = 1000 / serverMany.throughputPerSec - 1000 / bareMany.throughputPerSec;
  return {
    name,
    target: `${target}, median of ${rounds.length} rounds side by side`,
    measured: `${pct(ratio)} (rounds: ${rounds.map((r) => `${fmt(r.serverReqPerSec, 0)} vs ${fmt(r.bareReqPerSec, 0)} = ${pct(r.serverReqPerSec / r.bareReqPerSec)}`).join('; ')}); best rounds ${fmt(serverMany.throughputPerSec, 0)} vs ${fmt(bareMany.throughputPerSec, 0)} req/s at ${serverMany.concurrency} clients (${serverMany.config})`,
    isMet: ratio >= 0.5,
    explanation:
      ratio >= 0.5
        ? ''
        : `short by ${pct(0.5 - ratio)}. The server spends ${fmt(perRequestMs, 2)} ms of machine time more per request than the bare route (best rounds); the model's own parse + run + serialise is ${fmt(ref.tinyOwnEndToEndP50Ms, 3)} ms of it (run alone ${fmt(ref.tinyOwnInferP50Ms, 3)} ms), the rest is the server's HTTP handling, queueing, the worker hand-off and the response (server CPU ${fmt(serverMany.meanCpuPercent, 0)}% vs bare ${fmt(bareMany.meanCpuPercent, 0)}%).`,
  };
}

/** Server overhead: the tensor model's p50 at one client ≤ its own time + 2 ms. */
function overheadLatencyTarget(t: TargetInputs): TargetCheck {
  const { ref } = t;
  const { rows } = t.input;
  const serverOne = rows.find(
    (r) => r.experiment === 'overhead' && r.config.startsWith('Marina') && r.concurrency === 1,
  );
  const name = 'Server overhead: p50 at one client within 2 ms';
  const target = 'tensor model (2x+1) p50 at 1 client ≤ its own time (parse + run + serialise in one process) + 2 ms';
  if (!serverOne || !Number.isFinite(ref.tinyOwnEndToEndP50Ms)) return unmeasured(name, target);
  const excess = serverOne.p50Ms - ref.tinyOwnEndToEndP50Ms;
  return {
    name,
    target,
    measured: `p50 ${fmt(serverOne.p50Ms, 2)} ms vs own ${fmt(ref.tinyOwnEndToEndP50Ms, 2)} ms: +${fmt(excess, 2)} ms`,
    isMet: excess <= 2,
    explanation: excess <= 2 ? '' : `over by ${fmt(excess - 2, 2)} ms.`,
  };
}

/** A lone client's p50 with batching on ≤ the model's own time + 5 ms. */
function batchingWaitTarget(t: TargetInputs): TargetCheck {
  const { ref } = t;
  const name = 'Batching wastes no wait';
  const target = `batchSize 8 / maxBatchDelay 100: lone client p50 ≤ the model's own time + 5 ms (both p50s over the same turns of ${LONE_CLIENT_BLOCK} lone requests and ${LONE_CLIENT_BLOCK} own-time runs, side by side)`;
  const s = summarizeLoneClient(ref.loneClientPairs);
  if (!s) return unmeasured(name, target);
  const excess = s.excessMs;
  const split = Number.isFinite(s.outsideRunMs)
    ? `; of the difference, outside the model's run ${signed(s.outsideRunMs)} ms and in the run itself ${signed(s.runMs)} ms (Server-Timing inference vs the own run, paired medians)`
    : '';
  const control = Number.isFinite(s.controlExcessMs)
    ? `. Control, a second own-time process in the same turns: p50 ${signed(s.controlExcessMs)} ms from the first, its run ${signed(s.controlRunMs)} ms (paired median): how far two identical processes lie apart here`
    : '';
  return {
    name,
    target,
    measured: `p50 ${fmt(s.loneP50Ms)} ms vs own ${fmt(s.ownEndToEndP50Ms)} ms (run alone ${fmt(s.ownInferP50Ms)} ms) over ${s.pairs} of each: ${signed(excess)} ms, ratio ${fmt(s.loneP50Ms / s.ownEndToEndP50Ms, 3)}. Paired median ${signed(s.pairedMedianMs)} ms (95% interval ${signed(s.pairedLowMs)} to ${signed(s.pairedHighMs)})${split}${control}`,
    isMet: excess <= 5,
    explanation:
      excess <= 5
        ? ''
        : excess > 50
          ? `over by ${fmt(excess - 5)} ms: close to maxBatchDelay, so the batcher waited for a full batch that never came.`
          : `over by ${fmt(excess - 5)} ms, well under maxBatchDelay: not a batching wait; HTTP, hand-off and scheduling noise on a shared machine.`,
  };
}

/** A second worker costs ≤ half the model size in PSS. */
function workerMemoryTarget(t: TargetInputs): TargetCheck {
  const { input } = t;
  const name = 'Each extra worker costs well under the model size';
  const target = `PSS of 2 workers − 1 worker ≤ 0.5 × model size (${fmt(input.modelSizeMb, 0)} MB), best variant`;
  const pairs = new Map<string, { one?: MemoryVariant; two?: MemoryVariant }>();
  for (const v of input.memory) {
    const key = `${v.weights}|${v.isMallocThresholdSet}`;
    const entry = pairs.get(key) ?? {};
    if (v.workers === 1) entry.one = v;
    else entry.two = v;
    pairs.set(key, entry);
  }
  const costs = [...pairs.entries()]
    .filter(([, p]) => p.one && p.two)
    .map(([key, p]) => ({
      key,
      label: p.two!.label.replace(/^2 workers, /, ''),
      costMb: Number.isFinite(p.two!.pssMb) ? p.two!.pssMb - p.one!.pssMb : p.two!.rssMb - p.one!.rssMb,
    }));
  if (costs.length === 0) return unmeasured(name, target);
  const cheapest = costs.reduce((a, b) => (b.costMb < a.costMb ? b : a));
  return {
    name,
    target,
    measured: costs.map((c) => `${c.label}: +${fmt(c.costMb, 0)} MB`).join('; '),
    isMet: cheapest.costMb <= 0.5 * input.modelSizeMb,
    explanation:
      cheapest.costMb <= 0.5 * input.modelSizeMb
        ? `cheapest: ${cheapest.label}`
        : `cheapest (${cheapest.label}) is over by ${fmt(cheapest.costMb - 0.5 * input.modelSizeMb, 0)} MB: each session keeps private copies of the weights (graph optimisation 'all' reorders convolution weights into its own buffers).`,
  };
}

/** What the int8 speed target's line adds from the rest of the run: the fp32 ceiling at batch 1 and the CPU's flags. */
interface Int8Machine {
  fp32CeilingBatch1PerSec?: number | undefined;
  cpuFlags?: readonly string[] | undefined;
}

/**
 * The int8 experiment's targets (issue 18): int8 server ≥ 2.8 × the fp32 server's images/s, judged per layout with both
 * archives in the same configuration (the default one worker, and one single-threaded worker per core), ≥ 0.8 × the
 * int8 ceiling, and less PSS than the fp32 server. Set for ResNet-152; `onModel` labels other models. `machine` adds, to
 * the speed target's line, onnxruntime's own int8 ÷ fp32 ratio at batch 1 where the run measured the fp32 ceiling, and
 * whether this CPU has VNNI: the server cannot gain more from int8 than the kernels do.
 */
export function checkInt8Targets(s: Int8Summary | undefined, onModel = '', machine: Int8Machine = {}): TargetCheck[] {
  const speedName = 'int8 server ≥ 2.8× the fp32 server';
  const speedTarget = `int8 archive's images/s ≥ 2.8 × its fp32 archive's, same server configuration (${s?.serverConfig ?? 'the default'}), interleaved rounds, 640×480 JPEG bodies${onModel}`;
  const workersSpeedName = 'int8 server ≥ 2.8× the fp32 server, one single-threaded worker per core';
  const workersSpeedTarget = `int8 archive's images/s ≥ 2.8 × its fp32 archive's, both served by ${s?.workers.config ?? 'one single-threaded worker per core'}, interleaved rounds, 640×480 JPEG bodies${onModel}`;
  const ceilingName = 'int8 server ≥ 80% of the int8 ceiling';
  const ceilingTarget = `the better int8 server configuration's images/s ≥ 0.8 × onnxruntime alone on the int8 model (its own defaults at batch 1, as the fp32 ceiling), JPEG decoding included${onModel}`;
  const memoryName = 'int8 server uses less memory than fp32';
  const memoryTarget = `PSS of the int8 server's process tree < the fp32 server's, both serving, in each layout${onModel}`;
  if (!s)
    return [
      unmeasured(speedName, speedTarget),
      unmeasured(workersSpeedName, workersSpeedTarget),
      unmeasured(ceilingName, ceilingTarget),
      unmeasured(memoryName, memoryTarget),
    ];
  const where = explainInt8Time(s);
  const layouts = int8Layouts(s);
  const [main, workers] = layouts;
  const comparison = compareInt8Layouts(layouts);
  const isWorkersBest = s.workers.int8.perSec > s.int8PerSec;
  const bestPerSec = isWorkersBest ? s.workers.int8.perSec : s.int8PerSec;
  const bestConfig = isWorkersBest ? s.workers.config : s.serverConfig;
  const ceilingRatio = bestPerSec / s.int8CeilingBatch1PerSec;
  const bestBatchRatio = bestPerSec / s.int8CeilingPerSec;
  const kernelsText = describeKernelsRatio(s, main.ratio, machine);
  const speedCheck = (layout: Int8Layout, name: string, target: string, why: string): TargetCheck => ({
    name,
    target,
    measured: `${layout.paired.length > 0 ? `median of the paired rounds ${fmt(layout.ratio, 2)}× (each round int8 ÷ fp32: ${roundsText(layout.paired)}); pooled ` : ''}${fmt(layout.int8.perSec, 2)} vs ${fmt(layout.fp32.perSec, 2)} img/s = ${fmt(layout.pooled, 2)}× (rounds int8 ${roundsText(layout.int8.roundsPerSec)}, fp32 ${roundsText(layout.fp32.roundsPerSec)}; ${layout.config}; PSS int8 ${fmt(layout.int8.pssMb, 0)} MB, fp32 ${fmt(layout.fp32.pssMb, 0)} MB; agreement ${s.agreement})`,
    isMet: layout.ratio >= 2.8,
    explanation: [layout.ratio >= 2.8 ? '' : `short by ${fmt(2.8 - layout.ratio, 2)}×.`, why, comparison]
      .filter(Boolean)
      .join(' '),
  });
  const workersMemory = `${s.workers.config}: int8 ${fmt(s.workers.int8.pssMb, 0)} MB vs fp32 ${fmt(s.workers.fp32.pssMb, 0)} MB`;
  const isMemoryMeasured = [s.int8PssMb, s.fp32PssMb, s.workers.int8.pssMb, s.workers.fp32.pssMb].every(
    Number.isFinite,
  );
  const isMemoryMet = s.int8PssMb < s.fp32PssMb && s.workers.int8.pssMb < s.workers.fp32.pssMb;
  return [
    speedCheck(main, speedName, speedTarget, [kernelsText, main.ratio >= 2.8 ? '' : where].filter(Boolean).join(' ')),
    speedCheck(workers, workersSpeedName, workersSpeedTarget, ''),
    {
      name: ceilingName,
      target: ceilingTarget,
      measured: `${fmt(bestPerSec, 2)} vs ${fmt(s.int8CeilingBatch1PerSec, 2)} img/s = ${pct(ceilingRatio)}; against the int8 ceiling's best batch size (${fmt(s.int8CeilingPerSec, 2)} img/s): ${pct(bestBatchRatio)} (the better int8 server: ${bestConfig}; ${s.serverConfig} ${fmt(s.int8PerSec, 2)}, rounds ${roundsText(s.int8RoundsPerSec)}; ${s.workers.config} ${fmt(s.workers.int8.perSec, 2)}, rounds ${roundsText(s.workers.int8.roundsPerSec)})`,
      isMet: ceilingRatio >= 0.8,
      explanation: ceilingRatio >= 0.8 ? '' : `short by ${pct(0.8 - ceilingRatio)} of the int8 ceiling. ${where}`,
    },
    {
      name: memoryName,
      target: memoryTarget,
      measured: `${s.serverConfig}: PSS int8 ${fmt(s.int8PssMb, 0)} MB vs fp32 ${fmt(s.fp32PssMb, 0)} MB (RSS ${fmt(s.int8RssMb, 0)} vs ${fmt(s.fp32RssMb, 0)} MB); ${workersMemory} (RSS ${fmt(s.workers.int8.rssMb, 0)} vs ${fmt(s.workers.fp32.rssMb, 0)} MB); model ${fmt(s.int8ModelMb, 1)} vs ${fmt(s.fp32ModelMb, 1)} MB`,
      isMet: isMemoryMeasured ? isMemoryMet : undefined,
      explanation: isMemoryMet
        ? ''
        : 'an int8 server held as much memory as its fp32 one: onnxruntime may keep dequantised copies of the weights (check the optimised model) or the allocator arenas dominate.',
    },
  ];
}

const roundsText = (values: readonly number[]): string => values.map((v) => fmt(v, 2)).join(' / ');

/** One layout of the int8 experiment: both archives in the same configuration, and their ratio. */
interface Int8Layout {
  config: string;
  /** Intra-op threads per worker in this layout (the default layout: every core, the server's split for one worker). */
  threads: number;
  fp32: Int8LayoutServer;
  int8: Int8LayoutServer;
  /** int8 ÷ fp32 of each pair of rounds (round i of each), their median (the verdict), and the pooled ratio. */
  paired: number[];
  ratio: number;
  pooled: number;
}

/** The two layouts, default first, each with its paired-rounds ratio. */
function int8Layouts(s: Int8Summary): [Int8Layout, Int8Layout] {
  const layout = (config: string, threads: number, fp32: Int8LayoutServer, int8: Int8LayoutServer): Int8Layout => {
    const paired = pairedRoundRatios(int8.roundsPerSec, fp32.roundsPerSec);
    const pooled = int8.perSec / fp32.perSec;
    // The verdict takes the median of the paired rounds: one round disturbed by a neighbour's load moves the pooled
    // ratio, not the median (rounds 2-3x slower than the rest, on either side, in most runs on a shared 2-core
    // machine: packages/bench/docs/measurements.md, 2026-11-28).
    return { config, threads, fp32, int8, paired, pooled, ratio: paired.length > 0 ? median(paired) : pooled };
  };
  const mainServer = (which: 'fp32' | 'int8'): Int8LayoutServer => ({
    perSec: which === 'fp32' ? s.fp32PerSec : s.int8PerSec,
    roundsPerSec: which === 'fp32' ? s.fp32RoundsPerSec : s.int8RoundsPerSec,
    pssMb: which === 'fp32' ? s.fp32PssMb : s.int8PssMb,
    rssMb: which === 'fp32' ? s.fp32RssMb : s.int8RssMb,
    meanCpuPercent: which === 'fp32' ? s.fp32MeanCpuPercent : s.int8MeanCpuPercent,
    stages: which === 'fp32' ? s.fp32Stages : s.int8Stages,
  });
  return [
    layout(s.serverConfig, s.cores, mainServer('fp32'), mainServer('int8')),
    layout(s.workers.config, 1, s.workers.fp32, s.workers.int8),
  ];
}

/**
 * Which layout meets 2.8× and which does not, and why, from measured numbers only: per layout the verdict's ratio, the
 * model's run per image in each server (Server-Timing) and its int8 ÷ fp32 ratio, and each server's CPU per image (mean
 * CPU ÷ images/s), whose int8 ÷ fp32 ratio bounds the servers' where both keep the cores busy. The two reasons are
 * given only where the numbers show them: a CPU-per-image ratio below the run's (CPU outside the model, the same for
 * both archives), and int8's run gaining more over fp32's with one thread than with several.
 */
function compareInt8Layouts(layouts: readonly [Int8Layout, Int8Layout]): string {
  const verdict = (l: Int8Layout) => `${l.config} ${fmt(l.ratio, 2)}× (${l.ratio >= 2.8 ? 'meets' : 'misses'} 2.8×)`;
  const cpuMs = (x: Int8LayoutServer) => (x.meanCpuPercent * 10) / x.perSec;
  const modelMs = (x: Int8LayoutServer) => x.stages.inference ?? Number.NaN;
  const runRatio = (l: Int8Layout) => modelMs(l.fp32) / modelMs(l.int8);
  const cpuRatio = (l: Int8Layout) => cpuMs(l.fp32) / cpuMs(l.int8);
  const threads = (l: Int8Layout) => `${l.threads} intra-op thread${l.threads === 1 ? '' : 's'}`;
  const detail = (l: Int8Layout) =>
    `${l.config} (${threads(l)}): the model's run ${fmt(modelMs(l.fp32))} vs ${fmt(modelMs(l.int8))} ms = ${fmt(runRatio(l), 2)}×, CPU per image ${fmt(cpuMs(l.fp32))} vs ${fmt(cpuMs(l.int8))} ms = ${fmt(cpuRatio(l), 2)}× at ${fmt(l.fp32.meanCpuPercent / 100, 2)} and ${fmt(l.int8.meanCpuPercent / 100, 2)} cores busy`;
  const parts = [
    `Same configuration per layout, int8 ÷ fp32 (median of the paired rounds): ${layouts.map(verdict).join('; ')}.`,
    `fp32 vs int8 per image in the server: ${layouts.map(detail).join('; ')}; where both servers keep the cores busy, the CPU-per-image ratio bounds the servers' ratio.`,
  ];
  const diluted = layouts.filter((l) => cpuRatio(l) < runRatio(l));
  if (diluted.length > 0)
    parts.push(
      `The CPU-per-image ratio is below the run's in ${diluted.map((l) => l.config).join(' and ')}: each image also costs CPU outside the model (JPEG decode, HTTP, the hand-off to the worker), about the same for both archives and so a larger share of int8's.`,
    );
  const [few, one] = [...layouts].sort((a, b) => b.threads - a.threads) as [Int8Layout, Int8Layout];
  if (one.threads === 1 && few.threads > 1 && runRatio(one) > runRatio(few))
    parts.push(
      `int8's run gains more over fp32's at 1 thread (${fmt(runRatio(one), 2)}×) than at ${few.threads} (${fmt(runRatio(few), 2)}×): splitting one image's run over ${few.threads} threads costs int8's shorter run a larger share.`,
    );
  return parts.join(' ');
}

/** int8 ÷ fp32 images/s of each pair of rounds taken one after the other (round i of each server). */
function pairedRoundRatios(int8: readonly number[], fp32: readonly number[]): number[] {
  const count = Math.min(int8.length, fp32.length);
  return Array.from({ length: count }, (_, i) => int8[i]! / fp32[i]!).filter(Number.isFinite);
}

/**
 * What onnxruntime alone gains from int8 on this CPU (both ceilings at batch 1, measured in this run), beside the
 * server's ratio, and whether the CPU has VNNI; '' when neither is known.
 */
function describeKernelsRatio(s: Int8Summary, serverRatio: number, machine: Int8Machine): string {
  const parts: string[] = [];
  const fp32 = machine.fp32CeilingBatch1PerSec;
  if (fp32 !== undefined && Number.isFinite(fp32) && fp32 > 0 && Number.isFinite(s.int8CeilingBatch1PerSec)) {
    const kernels = s.int8CeilingBatch1PerSec / fp32;
    parts.push(
      `onnxruntime alone on this CPU, batch 1: int8 ${fmt(s.int8CeilingBatch1PerSec, 2)} vs fp32 ${fmt(fp32, 2)} img/s = ${fmt(kernels, 2)}× (the server's ${fmt(serverRatio, 2)}× is ${pct(serverRatio / kernels)} of it)`,
    );
  }
  const vnni = isVnniIn(machine.cpuFlags);
  if (vnni !== undefined) {
    parts.push(
      vnni
        ? `this CPU has VNNI (${machine.cpuFlags!.join(', ')})`
        : `this CPU has no VNNI (${machine.cpuFlags!.join(', ')}): onnxruntime's int8 kernels gain less on AVX2 alone than with VNNI, and the archiver makes 7-bit weights on such a CPU`,
    );
  }
  return parts.length === 0 ? '' : `${parts.join('; ')}.`;
}
