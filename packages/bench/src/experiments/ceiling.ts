import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { benchErrors } from '../errors.ts';
import { emptyRow, type OwnTime, type ResultRow } from '../bench-result.ts';
import { runJsonChild } from '../child-process-json.ts';
import { startProcessSampler } from '../process-sampler.ts';
import { bestOfRepeats, median, summarizeLatencies } from '../stats.ts';
import { measuredColumns, type ExperimentContext } from './experiment-context.ts';

const ceilingScript = fileURLToPath(new URL('../jobs/ceiling-child.mjs', import.meta.url));

interface BatchMessage {
  type: 'batch';
  batchSize: number;
  images: number;
  wallMs: number;
  latenciesMs: number[];
}
interface OwnTimeMessage {
  type: 'own-time';
  inferMs: number[];
  endToEndMs: number[];
}

/** A ceiling row's configuration: `batch N`. */
function ceilingBatchLabel(batchSize: number): string {
  return `batch ${batchSize}`;
}

/** The ceiling's row at batch 1 among `rows` (onnxruntime alone with its own defaults: what the ceiling targets compare with). */
export function ceilingRowAtBatch1<R extends ResultRow>(rows: readonly R[]): R | undefined {
  return rows.find((r) => r.config.endsWith(ceilingBatchLabel(1)));
}

/** Repeats of each batch size disagreeing by more than this fraction make the ceiling "noisy". */
export const CEILING_NOISE_TOLERANCE = 0.25;

/** The ceiling's rows and own time, and which batch sizes stayed noisy after a retry. */
export interface CeilingResult {
  rows: ResultRow[];
  ownTime: OwnTime;
  /** Batch sizes whose repeats never agreed within CEILING_NOISE_TOLERANCE. */
  noisyBatchSizes: number[];
}

/**
 * Ceiling: the model in one child process calling onnxruntime-node directly, intra-op threads =
 * cores, graph optimisation 'all', one preprocessed tensor reused, each batch size tried; no HTTP,
 * no decoding. Returns one row per batch size (the best is the ceiling) and the model's own
 * single-image time at the same thread count.
 *
 * Guarded against load spikes from other processes (which only ever slow a run down): each batch
 * size is measured twice, in alternating rounds (ascending, then descending), for half the
 * planned time each; a size whose two repeats differ by more than 25% is measured once more in
 * a fresh child. The best repeat is kept; a size with no two repeats within 25% is reported as
 * noisy (row note and `noisyBatchSizes`). The own time is the lowest p50 of the children run.
 */
export async function runCeiling(context: ExperimentContext): Promise<CeilingResult> {
  const { plan, assets } = context;
  const sizes = plan.ceilingBatchSizes;
  const rounds = [...sizes, ...[...sizes].reverse()];
  const total = rounds.length;
  context.onProgress({
    type: 'phase',
    label: `ceiling: ${assets.model}, ${context.cpuCount} threads, batch ${sizes.join('/')} (2 alternating rounds)`,
    total: total * plan.images,
  });
  let pid = 0;
  const sampler = startProcessSampler({ getPids: () => (pid ? [pid] : []) });
  let finishedImages = 0;
  const runChild = (batchSizes: number[]) =>
    runJsonChild({
      scriptPath: ceilingScript,
      args: [
        JSON.stringify({
          modelPath: assets.modelPath,
          imagePath: assets.imagePath,
          threads: context.cpuCount,
          batchSizes,
          minImages: Math.min(plan.images, 32),
          minDurationMs: Math.ceil(plan.ceilingMinDurationMs / 2),
          ownTimeRuns: 20,
        }),
      ],
      onSpawn: (child) => {
        pid = child.pid ?? 0;
      },
      onMessage: (message) => {
        if (message.type === 'progress')
          context.onProgress({
            type: 'tick',
            done: Math.min(total * plan.images, finishedImages + Number(message.images)),
          });
        if (message.type === 'batch') finishedImages += plan.images;
      },
    });
  const runs = [await runChild(rounds)];
  const batchesOf = () =>
    runs.flatMap((r) => r.messages.filter((m): m is BatchMessage & Record<string, unknown> => m.type === 'batch'));
  const throughput = (m: BatchMessage) => m.images / (m.wallMs / 1000);
  const verdictOf = (size: number) => {
    const repeats = batchesOf().filter((m) => m.batchSize === size);
    return { repeats, verdict: bestOfRepeats(repeats.map(throughput), CEILING_NOISE_TOLERANCE) };
  };
  const retry = sizes.filter((size) => verdictOf(size).verdict.isNoisy);
  if (retry.length > 0) {
    context.onProgress({
      type: 'log',
      message: `ceiling: repeats of batch ${retry.join('/')} disagree by more than ${CEILING_NOISE_TOLERANCE * 100}%; measuring them once more`,
    });
    runs.push(await runChild(retry));
  }
  const usage = sampler.stop();
  const noisyBatchSizes: number[] = [];
  const rows = sizes.map((size) => {
    const { repeats, verdict } = verdictOf(size);
    const m = repeats[verdict.bestIndex]!;
    const latency = summarizeLatencies(m.latenciesMs);
    if (verdict.isNoisy) noisyBatchSizes.push(size);
    const repeatsText = repeats.map((r) => throughput(r).toFixed(throughput(r) >= 100 ? 0 : 2)).join(' / ');
    return {
      ...emptyRow('ceiling', ceilingBatchLabel(m.batchSize)),
      images: m.images,
      concurrency: m.batchSize,
      throughputPerSec: verdict.best,
      // One process runs every batch size, so CPU and memory are for the whole ceiling run.
      ...measuredColumns(latency, usage),
      note: `latency = one batch run; best of repeats ${repeatsText} img/s${verdict.isNoisy ? ' (noisy: rerun on a quiet machine)' : ''}`,
    };
  });
  const best = rows.reduce<ResultRow | undefined>(
    (acc, row) => (acc === undefined || row.throughputPerSec > acc.throughputPerSec ? row : acc),
    undefined,
  );
  if (best) best.note = `${best.note}; best batch size (the ceiling)`;
  const ownP50s = runs
    .map((r) => r.messages.find((m): m is OwnTimeMessage & Record<string, unknown> => m.type === 'own-time'))
    .filter((o) => o !== undefined)
    .map((o) => ({ endToEnd: median(o.endToEndMs), infer: median(o.inferMs) }));
  const ownTime =
    ownP50s.length === 0
      ? { endToEndP50Ms: Number.NaN, inferP50Ms: Number.NaN }
      : {
          endToEndP50Ms: Math.min(...ownP50s.map((o) => o.endToEnd)),
          inferP50Ms: Math.min(...ownP50s.map((o) => o.infer)),
        };
  return { rows, ownTime, noisyBatchSizes };
}

/** One own-time measurement: decode + preprocess + run, and the run alone, ms. */
export interface OwnRun {
  endToEndMs: number;
  inferMs: number;
}

/** A live own-time process that measures one image each time it is asked. */
export interface OwnTimeSteps {
  /** The child's pid (to see when its threads are quiet). */
  pid: number;
  /** Measures one image in the child (decode + preprocess + run). */
  step(): Promise<OwnRun>;
  /** Ends the child and waits for it to exit. */
  stop(): Promise<void>;
}

/**
 * Starts the model's own-time process (as the ceiling's: one session with onnxruntime's defaults
 * at `threads`) and keeps it ready, so its runs can alternate with a server's requests one by one.
 * It runs in a session of its own, as the server does (startServer): with Linux's autogroups each
 * session is one scheduling group, and a process sharing the bench's group with a busy neighbour
 * was favoured over the server by the kernel (server's run +30.9 ms against the own run under a
 * neighbour burning half a core in the bench's session, +2.6 ms with the own process in a session
 * of its own). It ends when its stdin does, so it never outlives the bench.
 *
 * @throws MARINA_ERR_BENCH_CHILD_FAILED when the child exits before it is stopped.
 */
export async function startOwnTimeSteps(modelPath: string, imagePath: string, threads: number): Promise<OwnTimeSteps> {
  const child = spawn(
    process.execPath,
    [ceilingScript, JSON.stringify({ modelPath, imagePath, threads, batchSizes: [], stepwise: true })],
    { stdio: ['pipe', 'pipe', 'pipe'], detached: true },
  );
  let stderr = '';
  child.stderr!.on('data', (chunk: Buffer) => {
    stderr = (stderr + chunk.toString()).slice(-4000);
  });
  const waiting: { resolve: (message: Record<string, unknown>) => void; reject: (error: Error) => void }[] = [];
  let failure: Error | undefined;
  let isStopping = false;
  createInterface({ input: child.stdout! }).on('line', (line) => {
    if (!line.startsWith('{')) return;
    waiting.shift()?.resolve(JSON.parse(line) as Record<string, unknown>);
  });
  const exited = new Promise<void>((resolve) =>
    child.once('close', (code, signal) => {
      if (!isStopping || code !== 0) {
        failure = benchErrors.create.MARINA_ERR_BENCH_CHILD_FAILED(
          `the own-time process exited with ${signal ?? `code ${code}`}; stderr: ${stderr.trim().slice(-1500) || '(empty)'}`,
        );
        for (const w of waiting.splice(0)) w.reject(failure);
      }
      resolve();
    }),
  );
  const next = () =>
    new Promise<Record<string, unknown>>((resolve, reject) => {
      if (failure) reject(failure);
      else waiting.push({ resolve, reject });
    });
  const ready = await next();
  if (ready.type !== 'ready')
    throw benchErrors.create.MARINA_ERR_BENCH_CHILD_FAILED(
      `the own-time process printed ${JSON.stringify(ready).slice(0, 200)} before it was ready`,
    );
  return {
    pid: child.pid!,
    step: async () => {
      const answer = next();
      child.stdin!.write('step\n');
      const message = await answer;
      return { endToEndMs: Number(message.endToEndMs), inferMs: Number(message.inferMs) };
    },
    stop: async () => {
      isStopping = true;
      child.stdin!.end();
      await exited;
      if (failure) throw failure;
    },
  };
}
