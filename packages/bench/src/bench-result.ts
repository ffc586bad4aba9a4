import type { MachineInfo } from './machine-info.ts';

/** The experiments of the bench, in the order they run. */
export const experimentNames = [
  'ceiling',
  'decentralized',
  'centralized',
  'batched',
  'workers',
  'sweep',
  'overhead',
  'memory',
  'protocols',
  'int8',
  'traffic',
  'tracing',
  'priorities',
  'many-models',
] as const;
export type ExperimentName = (typeof experimentNames)[number];

/** One measured configuration: a line of the table and of results.csv. NaN marks "not measured". */
export interface ResultRow {
  experiment: ExperimentName;
  /** Human label of the configuration, e.g. "batch 4", "cap 2 jobs", "2 workers × 1 thread". */
  config: string;
  /** Measured images (requests or jobs) that succeeded. */
  images: number;
  /** Client concurrency (or job cap). */
  concurrency: number;
  throughputPerSec: number;
  p50Ms: number;
  p90Ms: number;
  p99Ms: number;
  /** Highest CPU between two 100 ms samples, % of one core, of the measured processes. */
  peakCpuPercent: number;
  meanCpuPercent: number;
  /** Highest RSS sum of the measured processes (server tree, or all live job processes), MB. */
  peakRssMb: number;
  /** Proportional set size at rest after the run, MB; NaN when not sampled. */
  pssMb: number;
  /** Failed requests / jobs. */
  errors: number;
  /** throughput ÷ the ceiling's best throughput. */
  ratioToCeiling: number;
  /** throughput ÷ the best decentralized throughput. */
  ratioToBestDecentralized: number;
  /** Decentralized only: mean share of a job's wall time spent creating the session. */
  loadShare: number;
  note: string;
}

/** A performance target, checked against this run's numbers. */
export interface TargetCheck {
  name: string;
  /** The condition, in words with the threshold. */
  target: string;
  /** The measured value(s), in words. */
  measured: string;
  /** true met, false missed, undefined not measured in this run. */
  isMet: boolean | undefined;
  /** For a miss: by how much, and what the measurements say about why. */
  explanation: string;
}

/**
 * One lone request of the batched experiment and the own-time run it is paired with: the same
 * place in one turn's two blocks (a block of lone requests and a block of own-time runs, back to
 * back), so the two were measured seconds apart at most.
 */
export interface LoneClientPair {
  /** The lone request's latency at the client, ms. */
  loneMs: number;
  /** The model's run inside the server for that request (its Server-Timing `inference`), ms; NaN when the header lacked it. */
  serverInferenceMs: number;
  /** The own-time run (the own-time process kept ready, no server): decode + preprocess + run, ms. */
  ownEndToEndMs: number;
  /** The same run's `session.run` alone, ms. */
  ownInferMs: number;
  /**
   * The control: a second own-time process, the same as the first, measured in the same turn (run i of its
   * block): decode + preprocess + run, and the run alone, ms. How far it lies from the first is how far two
   * identical processes differ on this machine in this run. NaN where no control ran.
   */
  controlEndToEndMs: number;
  controlInferMs: number;
}

/** One round of the overhead experiment's many-clients runs: the bare route and the server in its best configuration, one right after the other. */
export interface OverheadRound {
  bareReqPerSec: number;
  serverReqPerSec: number;
}

/** Reference timings measured in this run, used by the targets. */
export interface ReferenceTimings {
  /** Main model, one image in one process at the server's thread count: decode + preprocess + run, p50 ms. */
  ownEndToEndP50Ms: number;
  /** Main model, the same but only `session.run`, p50 ms. */
  ownInferP50Ms: number;
  /** The overhead experiment's tensor model (2x+1), per request in one process: parse JSON + run + serialise, and run alone, p50 ms. */
  tinyOwnEndToEndP50Ms: number;
  tinyOwnInferP50Ms: number;
  /** The batched experiment's lone requests, each paired with an own-time run measured beside it; empty when not run. */
  loneClientPairs: LoneClientPair[];
  /** The overhead experiment's rounds (bare route and best server side by side, in alternating order); empty when not run. */
  overheadRounds: OverheadRound[];
}

export interface MemoryVariant {
  label: string;
  /** Weights inline or external (memory-mapped). */
  weights: 'inline' | 'external';
  isMallocThresholdSet: boolean;
  workers: number;
  rssMb: number;
  pssMb: number;
}

/** Everything one run measured; what the reports are made from. */
export interface BenchResult {
  machine: MachineInfo;
  model: string;
  modelSizeMb: number;
  /** Images per experiment and the load concurrency, as run. */
  images: number;
  concurrency: number;
  mode: 'full' | 'quick' | 'smoke';
  startedAt: string;
  durationSec: number;
  rows: ResultRow[];
  references: ReferenceTimings;
  memory: MemoryVariant[];
  targets: TargetCheck[];
  /** The int8 experiment's numbers; undefined when it did not run. */
  int8?: Int8Summary;
  /** The many-models experiment's summary, when it ran. */
  manyModels?: ManyModelsSummary;
  /** The configuration the sweep ran on. */
  bestServerConfig: string | undefined;
  notes: string[];
}

/** A row with every number unset; experiments fill in what they measure. */
export function emptyRow(experiment: ExperimentName, config: string): ResultRow {
  return {
    experiment,
    config,
    images: 0,
    concurrency: 0,
    throughputPerSec: Number.NaN,
    p50Ms: Number.NaN,
    p90Ms: Number.NaN,
    p99Ms: Number.NaN,
    peakCpuPercent: Number.NaN,
    meanCpuPercent: Number.NaN,
    peakRssMb: Number.NaN,
    pssMb: Number.NaN,
    errors: 0,
    ratioToCeiling: Number.NaN,
    ratioToBestDecentralized: Number.NaN,
    loadShare: Number.NaN,
    note: '',
  };
}

/** The model's own time for one image in one process (p50s, ms): decode + preprocess + run, and the run alone. */
export interface OwnTime {
  endToEndP50Ms: number;
  inferP50Ms: number;
}

/** Mean ms per request of each Server-Timing entry (queue, preprocess, inference, postprocess, total). */
export type StageMeansMs = Record<string, number>;

/** One server of the int8 experiment's second layout: what its rounds measured. */
export interface Int8LayoutServer {
  /** Images/s over all its rounds (images ÷ measured wall time), and each round's. */
  perSec: number;
  roundsPerSec: number[];
  /** Its process tree after its last round, MB. */
  pssMb: number;
  rssMb: number;
  /** Mean CPU over its rounds, % of one core. */
  meanCpuPercent: number;
  /** Mean Server-Timing stages per request. */
  stages: StageMeansMs;
}

/** What the int8 experiment measured, for its targets and the report. */
export interface Int8Summary {
  /** The configuration of the first pair of servers, fp32 and int8 (the bench's default centralized one). */
  serverConfig: string;
  /** The cores the bench saw: the default configuration's one worker splits its runs over this many intra-op threads. */
  cores: number;
  fp32ArchiveFileName: string;
  int8ArchiveFileName: string;
  /** Measured requests per round and the rounds per server. */
  imagesPerRound: number;
  rounds: number;
  /** Images/s over all of a server's rounds (images ÷ measured wall time), and each round's. */
  fp32PerSec: number;
  int8PerSec: number;
  fp32RoundsPerSec: number[];
  int8RoundsPerSec: number[];
  /**
   * The other layout, one single-threaded worker per core (no intra-op barrier), with both archives, measured in the
   * same rounds: `config` says it (`2 workers × 1 thread`), then each server's measures.
   */
  workers: { config: string; fp32: Int8LayoutServer; int8: Int8LayoutServer };
  /** Best batch size of the int8 ceiling (onnxruntime alone, no decoding, no HTTP), images/s. */
  int8CeilingPerSec: number;
  /** Batch-1 run of the int8 ceiling, p50 ms, and its images/s. */
  int8CeilingBatch1P50Ms: number;
  int8CeilingBatch1PerSec: number;
  /** The int8 model's own time for one image in one process: decode + preprocess + run, and run alone. */
  int8Own: OwnTime;
  /** Each server's process tree after its last round: PSS and RSS, MB. */
  fp32PssMb: number;
  int8PssMb: number;
  fp32RssMb: number;
  int8RssMb: number;
  /** Mean CPU of each server over its rounds, % of one core. */
  fp32MeanCpuPercent: number;
  int8MeanCpuPercent: number;
  /** Mean Server-Timing stages per request. */
  fp32Stages: StageMeansMs;
  int8Stages: StageMeansMs;
  /** Model sizes, MB. */
  fp32ModelMb: number;
  int8ModelMb: number;
  /** The archive's own accuracy check (quantization.json), in words. */
  agreement: string;
  /** How the int8 archive was made. */
  quantizeCommand: string;
}

/** The many-models experiment's setting: how many models, how large, how many clients and requests. */
export interface ManyModelsPlan {
  models: number;
  depth: 18 | 50;
  clients: number;
  /** Zipf exponent of the model popularity. */
  zipfExponent: number;
  /** Requests per measured phase. */
  requests: number;
  /** The budget is the all-resident sum divided by this. */
  budgetDivisor: number;
}

/** What one phase of Zipf traffic measured. */
export interface ZipfPhase {
  label: string;
  requests: number;
  errors: number;
  throughputPerSec: number;
  p50Ms: number;
  p99Ms: number;
  /** Requests whose Server-Timing said they waited for their model to load. */
  waitedForLoad: number;
  waitedP50Ms: number;
  waitedP99Ms: number;
  /** p50 of the requests that did not wait for a load: a request's own inference under this traffic. */
  warmP50Ms: number;
  peakPssMb: number;
  /** Mean latency, ms (with a closed loop, the clients ÷ the throughput: Little's law). Absent from older results. */
  meanMs?: number;
  /** The same requests split by their model's popularity (most asked-for first). Absent from older results. */
  byPopularity?: PopularityGroup[];
  /**
   * How many models had a request outstanding (sent, not yet answered), averaged over the phase's
   * time: the models its traffic keeps busy at once. Absent from older results.
   */
  busyModelsMean?: number;
}

/** The requests of a Zipf phase to a group of models of neighbouring popularity. */
export interface PopularityGroup {
  /** Popularity ranks of the group's models, 1 the most asked-for. */
  firstRank: number;
  lastRank: number;
  requests: number;
  /** Of them, how many waited for their model to load. */
  waitedForLoad: number;
  p50Ms: number;
  p99Ms: number;
}

/** The experiment's summary: the report's section and the many-models chart. */
export interface ManyModelsSummary {
  plan: ManyModelsPlan;
  modelSizeMb: number;
  /** Sum of describe's residentBytes over all models in the all-resident server, MB. */
  allResidentSumMb: number;
  budgetMb: number;
  /** The hot set: the most popular models whose measured sizes fit the budget. */
  hotSetModels: number;
  /** onnxruntime creating a session from the cached optimised model (the floor of a load), median ms. */
  floorCreateMs: number;
  /** One batch-1 run, median ms. */
  floorRunMs: number;
  phases: {
    allResidentZipf: ZipfPhase;
    budgetZipf: ZipfPhase;
    allResidentHot: ZipfPhase;
    budgetHot: ZipfPhase;
  };
  /** What the all-resident server held beside its models' measured sizes (PSS after its Zipf phase − their sum), MB. */
  baselinePssMb: number;
  /** The same server with no model loaded (load_models empty), PSS MB: what the budget does not cover. */
  serverAlonePssMb: number;
  /** The budget server's own loads (marina_model_load_seconds): count and mean ms, making room included. */
  serverLoads: number;
  serverLoadMeanMs: number;
  /**
   * One client, one request at a time, each to a model that is not in memory (the budget full of
   * idle models), each sent once the server has been quiet for `pauseMs`: what a cold request costs
   * the server when it waits for no other load. Absent in results written before it was measured.
   */
  coldAlone?: ColdAlone;
  /** The same cold requests back to back (each sent when the last was answered): a stream of loads. */
  coldBackToBack?: ColdAlone;
}

/** Cold requests sent one at a time to the budget server (ManyModelsSummary.coldAlone). */
export interface ColdAlone {
  /** Requests that waited for a load (Server-Timing said so), of those sent. */
  waited: number;
  sent: number;
  /** Their latency at the client, ms. */
  p50Ms: number;
  p99Ms: number;
  /** Their Server-Timing queue time (the wait for the load, making room included), median ms. */
  queueP50Ms: number;
  /** How long the client waited after each answer before the next request, ms (absent: 0). */
  pauseMs?: number;
}
