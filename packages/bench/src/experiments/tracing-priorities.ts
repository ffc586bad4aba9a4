import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import { startListeningChild } from '../child-process-json.ts';
import { emptyRow, type ResultRow } from '../bench-result.ts';
import { runLoad } from '../load-generator.ts';
import { listProcessTree, startProcessSampler } from '../process-sampler.ts';
import { median, summarizeLatencies } from '../stats.ts';
import type { RunningServer } from '../server-process.ts';
import {
  measureServerLoad,
  readImage,
  rowFromLoad,
  serverTmpDir,
  withServer,
  type ExperimentContext,
} from './experiment-context.ts';
import { OVERHEAD_BEST_SETTINGS } from './overhead.ts';

/** Unmeasured requests before each round of the image model's tracing comparison. */
const IMAGE_WARMUP = 8;

/**
 * Pairs of servers per model in the tracing comparison, each pair started afresh: a server
 * process's own speed is a draw (the same ResNet-152 traced server ran 0.91 of its untraced twin
 * through nine rounds in one run and 0.95–1.02 in five others; two untraced twins read 1.014), so one
 * pair measures its two processes as much as tracing. The servers' start order alternates by pair.
 */
const TRACING_PAIRS = 3;

/**
 * Rounds per pair; the sides take turns (the order alternating, across pairs too), so a drift of
 * the machine's speed falls on both. Pairs × rounds is odd, so the median of the rounds' ratios is
 * one round's ratio (with four rounds, the nearest-rank median was the lower of the middle two).
 */
const ROUNDS_PER_PAIR = 3;

const comparisonShape = `median of ${TRACING_PAIRS * ROUNDS_PER_PAIR} rounds' own ratios: ${TRACING_PAIRS} pairs of fresh servers, ${ROUNDS_PER_PAIR} alternating rounds each`;

const otlpSinkScript = fileURLToPath(new URL('../jobs/otlp-sink.mjs', import.meta.url));

/** What the collector took: exports, spans counted in them, bytes, and bodies it refused. */
interface OtlpSinkCounts {
  exports: number;
  spans: number;
  bytes: number;
  refused: number;
}

/**
 * The OTLP/HTTP collector the traced servers export to (jobs/otlp-sink.mjs): a process of its
 * own that counts each export's spans from the protobuf framing and throws them away. It runs at
 * the lowest CPU priority (nice 19), so it takes the CPU the server and the load generator leave:
 * a deployment's collector runs on other cores or another host, and its work is not the traced
 * server's cost, nor the load generator's (in the bench's own process it slowed the clients of
 * the traced rounds). The traced server still pays for building, batching, encoding and posting
 * its spans; the counts show every traced request's spans arrived.
 */
async function startOtlpSink(): Promise<{
  url: string;
  counts: () => Promise<OtlpSinkCounts>;
  close: () => Promise<void>;
}> {
  const { child, port } = await startListeningChild(otlpSinkScript, ['--nice', '19']);
  const url = `http://127.0.0.1:${port}`;
  return {
    url,
    counts: async () => (await (await fetch(`${url}/counts`)).json()) as OtlpSinkCounts,
    close: async () => {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const exited = once(child, 'exit');
      child.kill('SIGTERM');
      await exited;
    },
  };
}

/** The collector's counts as a sentence: spans per traced request show whether any were lost. */
function sinkNote(label: string, counts: OtlpSinkCounts, tracedRequests: number): string {
  return `Tracing, ${label}: the collector took ${counts.exports} OTLP exports holding ${counts.spans} spans for ${tracedRequests} traced requests (${(counts.spans / tracedRequests).toFixed(2)} a request; refused bodies: ${counts.refused}).`;
}

/** The environment that turns tracing on, every request sampled, spans sent to `endpoint` as protobuf. */
function tracingEnv(endpoint: string): Record<string, string> {
  return {
    OTEL_TRACES_EXPORTER: 'otlp',
    OTEL_EXPORTER_OTLP_ENDPOINT: endpoint,
    OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'http/protobuf',
    OTEL_TRACES_SAMPLER: 'always_on',
    OTEL_SERVICE_NAME: 'marina-bench',
  };
}

/**
 * Alternating rounds of two measures, the first at `firstRound` of the alternation (each measure is
 * told whether its round is that first one); returns each side's rounds and the rounds' own ratios (b ÷ a).
 */
async function alternate(
  rounds: number,
  firstRound: number,
  a: (isFirst: boolean) => Promise<ResultRow>,
  b: (isFirst: boolean) => Promise<ResultRow>,
): Promise<{ a: ResultRow[]; b: ResultRow[]; ratios: number[] }> {
  const out = { a: [] as ResultRow[], b: [] as ResultRow[] };
  for (let round = firstRound; round < firstRound + rounds; round++) {
    const isFirst = round === firstRound;
    if (round % 2 === 0) {
      out.a.push(await a(isFirst));
      out.b.push(await b(isFirst));
    } else {
      out.b.push(await b(isFirst));
      out.a.push(await a(isFirst));
    }
  }
  return { ...out, ratios: out.a.map((row, i) => out.b[i]!.throughputPerSec / row.throughputPerSec) };
}

/**
 * The tracing comparison of one model: TRACING_PAIRS pairs of fresh servers (untraced, traced),
 * ROUNDS_PER_PAIR alternating rounds each; the ratio is the median of all the rounds' ratios.
 */
async function comparePairs(
  context: ExperimentContext,
  off: Parameters<typeof withServer>[1],
  on: Parameters<typeof withServer>[1],
  measure: (server: RunningServer, path: string, side: 'off' | 'on', isFirst: boolean) => Promise<ResultRow>,
): Promise<{ a: ResultRow[]; b: ResultRow[]; ratio: number }> {
  const all = { a: [] as ResultRow[], b: [] as ResultRow[], ratios: [] as number[] };
  for (let pair = 0; pair < TRACING_PAIRS; pair++) {
    const run = async (offServer: RunningServer, onServer: RunningServer, path: string) => {
      // The pair's first round is each server's first (a fresh process): the tensor model warms it up longer.
      const measured = await alternate(
        ROUNDS_PER_PAIR,
        pair * ROUNDS_PER_PAIR,
        (isFirst) => measure(offServer, path, 'off', isFirst),
        (isFirst) => measure(onServer, path, 'on', isFirst),
      );
      all.a.push(...measured.a);
      all.b.push(...measured.b);
      all.ratios.push(...measured.ratios);
    };
    // The start order alternates by pair: untraced first, then traced first.
    if (pair % 2 === 0)
      await withServer(context, off, async (offServer, path) =>
        withServer(context, on, async (onServer) => run(offServer, onServer, path)),
      );
    else
      await withServer(context, on, async (onServer, path) =>
        withServer(context, off, async (offServer) => run(offServer, onServer, path)),
      );
  }
  return { a: all.a, b: all.b, ratio: median(all.ratios) };
}

function medianRow(rows: ResultRow[], config: string): ResultRow {
  const sorted = [...rows].sort((x, y) => x.throughputPerSec - y.throughputPerSec);
  const row = sorted[Math.floor((sorted.length - 1) / 2)]!;
  return {
    ...row,
    config,
    note: `median of ${rows.length} rounds: ${rows.map((r) => r.throughputPerSec.toFixed(1)).join(' / ')}`,
  };
}

/**
 * Tracing's cost, side by side in one run: the tensor model 2x+1 (its own run a few µs, so the
 * server is what is measured) at the overhead experiment's concurrency, and the run's image model
 * at the run's concurrency, each on pairs of servers (comparePairs), one with tracing off and one
 * with every request sampled and exported over OTLP/HTTP (protobuf) to the collector process.
 * Rounds take turns; the ratio is the median of the rounds' own ratios (targets: ≥ 0.9 for the
 * tensor model, ≥ 0.98 for ResNet-152).
 */
export async function runTracing(context: ExperimentContext): Promise<{ rows: ResultRow[]; notes: string[] }> {
  const rows: ResultRow[] = [];
  const notes: string[] = [];
  const sink = await startOtlpSink();
  const { plan } = context;
  let tensorTraced = 0;
  let imageTraced = 0;
  let before: OtlpSinkCounts = { exports: 0, spans: 0, bytes: 0, refused: 0 };
  try {
    const tensor = context.tensorAssets;
    if (tensor) {
      const perRoundMs = Math.max(500, Math.ceil(plan.overheadDurationMs / 2));
      const measured = await comparePairs(
        context,
        { model: tensor, label: 'tracing off, tensor model', settings: { ...OVERHEAD_BEST_SETTINGS } },
        {
          model: tensor,
          label: 'tracing on, tensor model',
          settings: { ...OVERHEAD_BEST_SETTINGS },
          env: tracingEnv(sink.url),
          tmpDir: serverTmpDir(context, 'marina-bench-tracing-2'),
        },
        async (server, path, side, isFirst) => {
          // A fresh server's first round gets the longer warm-up (its JIT, the pool's connections).
          const warmup = isFirst ? 2000 : 200;
          const row = await measureServerLoad(context, server, {
            path,
            body: tensor.body,
            contentType: tensor.contentType,
            experiment: 'tracing',
            label: side === 'off' ? 'tensor model, tracing off' : 'tensor model, tracing on (every request sampled)',
            concurrency: plan.overheadConcurrency,
            requests: 10_000_000,
            durationMs: perRoundMs,
            warmupRequests: warmup,
          });
          if (side === 'on') tensorTraced += warmup + row.images + row.errors;
          return row;
        },
      );
      rows.push(
        medianRow(measured.a, `tensor model 2x+1, tracing off, ${plan.overheadConcurrency} clients`),
        medianRow(
          measured.b,
          `tensor model 2x+1, tracing on (always_on, OTLP/protobuf), ${plan.overheadConcurrency} clients`,
        ),
      );
      notes.push(
        `Tracing, tensor model 2x+1 at ${plan.overheadConcurrency} clients: traced ÷ untraced requests/s = ${measured.ratio.toFixed(3)} (${comparisonShape}; target ≥ 0.9).`,
      );
      // The traced server has stopped: its last spans were flushed to the collector.
      const counts = await sink.counts();
      notes.push(sinkNote('tensor model', counts, tensorTraced));
      before = counts;
    }

    const jpeg = await readImage(context.assets);
    const perRound = Math.max(plan.concurrency, Math.ceil(plan.images / 2));
    const measured = await comparePairs(
      context,
      { assets: context.assets, label: 'tracing off, image model' },
      {
        assets: context.assets,
        label: 'tracing on, image model',
        env: tracingEnv(sink.url),
        tmpDir: serverTmpDir(context, 'marina-bench-tracing-3'),
      },
      async (server, path, side) => {
        const row = await measureServerLoad(context, server, {
          path,
          body: jpeg,
          experiment: 'tracing',
          label: `${context.assets.model}, tracing ${side}`,
          concurrency: plan.concurrency,
          requests: perRound,
          warmupRequests: IMAGE_WARMUP,
        });
        if (side === 'on') imageTraced += IMAGE_WARMUP + row.images + row.errors;
        return row;
      },
    );
    rows.push(
      medianRow(measured.a, `${context.assets.model}, tracing off, ${plan.concurrency} clients`),
      medianRow(
        measured.b,
        `${context.assets.model}, tracing on (always_on, OTLP/protobuf), ${plan.concurrency} clients`,
      ),
    );
    notes.push(
      `Tracing, ${context.assets.model} at ${plan.concurrency} clients: traced ÷ untraced images/s = ${measured.ratio.toFixed(3)} (${comparisonShape}; the target ≥ 0.98 is set for ResNet-152).`,
    );
    const counts = await sink.counts();
    notes.push(
      sinkNote(
        context.assets.model,
        {
          exports: counts.exports - before.exports,
          spans: counts.spans - before.spans,
          bytes: counts.bytes - before.bytes,
          refused: counts.refused - before.refused,
        },
        imageTraced,
      ),
    );
  } finally {
    await sink.close();
  }
  return { rows, notes };
}

/**
 * Two priority levels under overload, on the run's image model (one worker): the high level's
 * latency at one client on an idle server, then the same client while `plan.concurrency` clients
 * flood the low level (the default one) for the same time. Target: the high level's p50 within
 * 1.5× of idle while the low level absorbs the backlog. Then the same flood on the same model
 * without priority levels, for as long: what priorities cost the throughput of normal traffic.
 */
export async function runPriorities(context: ExperimentContext): Promise<{ rows: ResultRow[]; notes: string[] }> {
  const rows: ResultRow[] = [];
  const notes: string[] = [];
  const { plan } = context;
  const jpeg = await readImage(context.assets);
  const highHeaders = { 'x-marina-priority': '1' };
  const highRequests = Math.max(20, Math.ceil(plan.images / 5));
  let floodWallMs = plan.maxRunMs;
  let floodImagesPerSec = 0;
  let highQueueMs = Number.NaN;
  await withServer(
    context,
    {
      assets: context.assets,
      label: 'priorities, image model',
      settings: { minWorkers: 1, maxWorkers: 1, priorityLevels: 2, defaultPriorityLevel: 2 },
    },
    async (server, path) => {
      const idle = await measureServerLoad(context, server, {
        path,
        body: jpeg,
        headers: highHeaders,
        experiment: 'priorities',
        label: 'high priority, idle server, 1 client',
        concurrency: 1,
        requests: highRequests,
        warmupRequests: 5,
      });
      rows.push({ ...idle, config: `${context.assets.model}, high priority (1), idle server, 1 client` });

      context.onProgress({ type: 'phase', label: 'high priority under a low-priority flood', total: highRequests });
      const flood = runLoad({
        origin: server.origin,
        path,
        body: jpeg,
        concurrency: plan.concurrency,
        requests: 10_000_000,
        durationMs: plan.maxRunMs,
      });
      // The flood's clients first fill the queue; the high client starts once the low level has a backlog.
      let backlog = 0;
      for (let i = 0; i < 200 && backlog < Math.min(plan.concurrency, 20); i++) {
        await new Promise((resolve) => setTimeout(resolve, 50));
        const response = await fetch(`${server.managementOrigin}/models/${path.replace('/predictions/', '')}`);
        const [description] = (await response.json()) as Array<{
          jobQueueStatus: { priorityLevels?: Array<{ level: number; pendingRequests: number }> };
        }>;
        backlog = description?.jobQueueStatus.priorityLevels?.find((l) => l.level === 2)?.pendingRequests ?? 0;
      }
      const sampler = startProcessSampler({ getPids: () => listProcessTree(server.pid) });
      const high = await runLoad({
        origin: server.origin,
        path,
        body: jpeg,
        headers: highHeaders,
        concurrency: 1,
        requests: highRequests,
        durationMs: plan.maxRunMs,
        onProgress: (done) => context.onProgress({ type: 'tick', done }),
        collectHeader: 'server-timing',
      });
      // Where the high requests' time went: their wait in the queue (for the running batch), from Server-Timing.
      highQueueMs = median(
        high.headerValues
          .map((v) => Number(/(?:^|, )queue;dur=([0-9.]+)/.exec(v)?.[1] ?? Number.NaN))
          .filter(Number.isFinite),
      );
      const highRow = rowFromLoad(
        'priorities',
        `${context.assets.model}, high priority (1), 1 client beside ${plan.concurrency} low-priority clients`,
        1,
        high,
        sampler.stop(),
      );
      const low = await flood;
      const lowLatency = summarizeLatencies(low.latenciesMs);
      rows.push(highRow, {
        ...emptyRow('priorities', `${context.assets.model}, low priority (2, default), ${plan.concurrency} clients`),
        images: lowLatency.count,
        concurrency: plan.concurrency,
        throughputPerSec: low.throughputPerSec,
        p50Ms: lowLatency.p50Ms,
        p90Ms: lowLatency.p90Ms,
        p99Ms: lowLatency.p99Ms,
        errors: low.errors,
        note: `the flood ran for ${(low.wallMs / 1000).toFixed(1)} s, the high client inside it; backlog at level 2 when the high client began: ${backlog}`,
      });
      floodWallMs = low.wallMs;
      floodImagesPerSec = low.throughputPerSec + high.throughputPerSec * Math.min(1, high.wallMs / low.wallMs);
      notes.push(
        `Priorities, ${context.assets.model}, 1 worker: high-priority p50 under a ${plan.concurrency}-client low-priority flood ÷ idle p50 = ${(highRow.p50Ms / idle.p50Ms).toFixed(2)} (${highRow.p50Ms.toFixed(1)} ms against ${idle.p50Ms.toFixed(1)} ms; target ≤ 1.5; of it, a median ${highQueueMs.toFixed(1)} ms in the queue); the low level's p50 ${lowLatency.p50Ms.toFixed(0)} ms at ${low.throughputPerSec.toFixed(1)} images/s.`,
      );
    },
  );
  // The same flood on the model without levels, right after the two-level server (not alternated:
  // on a shared machine a drift of its speed between the two shows in the ratio).
  const single = await withServer(
    context,
    { assets: context.assets, label: 'no priority levels, image model', settings: { minWorkers: 1, maxWorkers: 1 } },
    (server, path) =>
      measureServerLoad(context, server, {
        path,
        body: jpeg,
        experiment: 'priorities',
        label: 'no priority levels, the same flood',
        concurrency: plan.concurrency,
        requests: 10_000_000,
        durationMs: floodWallMs,
        warmupRequests: plan.concurrency,
      }),
  );
  rows.push({
    ...single,
    config: `${context.assets.model}, no priority levels (one queue), ${plan.concurrency} clients, for as long as the flood (after the two-level server)`,
  });
  notes.push(
    `Priorities' cost to normal traffic: under the flood the model with two levels served ${floodImagesPerSec.toFixed(2)} images/s (low level plus the high client), the same model without levels ${single.throughputPerSec.toFixed(2)} images/s at the same clients (ratio ${(floodImagesPerSec / single.throughputPerSec).toFixed(2)}; measured right after it).`,
  );
  return { rows, notes };
}
