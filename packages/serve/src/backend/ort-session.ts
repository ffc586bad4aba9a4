import { createHash } from 'node:crypto';
import { mkdir, readdir, readFile, rename, rm, stat, utimes, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { threadId } from 'node:worker_threads';
import * as ort from 'onnxruntime-node';

/** How a worker's sessions are configured; fixed when the worker starts. */
export interface SessionThreading {
  /** Intra-op threads for every session this worker creates. */
  intraOpNumThreads: number;
  /** The server-wide default of `allowSpinning` for models that do not set it (ALLOW_SPINNING_ENV); undefined: ALLOW_SPINNING_DEFAULT. */
  allowSpinning?: boolean;
  /** The server-wide default of `forceSpinningStop` for models that do not set it (FORCE_SPINNING_STOP_ENV); undefined: FORCE_SPINNING_STOP_DEFAULT. */
  forceSpinningStop?: boolean;
}

/** Everything `createSession` needs, passed in (nothing is read from the thread's globals). */
export interface SessionSettings {
  threading: SessionThreading;
  /** The model's `onnxruntime` settings (readOrtModelSettings of its model-config.yaml). */
  ort: OrtModelSettings;
  /** Default of `cacheOptimizedModel` for a model that does not set it; undefined: on from OPTIMIZED_COPY_MIN_BYTES. */
  cacheOptimizedModelDefault: boolean | undefined;
}

/** onnxruntime graph optimisation levels, as model-config.yaml names them. */
const GRAPH_OPTIMIZATION_LEVELS = ['disabled', 'basic', 'extended', 'all'] as const;
type GraphOptimizationLevel = (typeof GRAPH_OPTIMIZATION_LEVELS)[number];

/**
 * A model's onnxruntime settings: the `onnxruntime` mapping of its model-config.yaml (checked by
 * schemas/model-config.schema.json when the archive loads). Every field is optional; unset means
 * Marina's default. See docs/explanation/memory.md for what each costs and saves.
 */
export interface OrtModelSettings {
  /** Default 'all' (fastest; with cacheOptimizedModel its optimised weights are shared too). */
  graphOptimizationLevel?: GraphOptimizationLevel;
  /** onnxruntime's CPU memory arena; default true. */
  enableCpuMemArena?: boolean;
  /** Pre-planned activation buffers; default true. */
  enableMemPattern?: boolean;
  /**
   * Let intra-op threads spin at operator barriers instead of sleeping; default: the server's
   * MARINA_ORT_ALLOW_SPINNING, else on (see createSessionOptions). Turn it off on a machine whose
   * cores also serve other work.
   */
  allowSpinning?: boolean;
  /**
   * With spinning on: stop the intra-op threads' spinning as soon as run() returns (onnxruntime's
   * `session.force_spinning_stop`), so they spin at operator barriers only while a run is under
   * way, and the decoding, hand-offs and HTTP between runs get the cores. Default: the server's
   * MARINA_ORT_FORCE_SPINNING_STOP, else on (see createSessionOptions).
   */
  forceSpinningStop?: boolean;
  /**
   * Optimise the model once into a cached copy whose weights are external data
   * (`<tmpdir>/marina/ort-optimized/<key>/model.onnx` + `model.onnx.data`), then load that copy
   * without further optimisation: every worker memory-maps the same optimised weights, so an extra
   * worker costs tens of MB instead of the model's size, at the chosen level's speed. Default: the
   * environment's MARINA_ORT_CACHE_OPTIMIZED_MODEL ('1'/'0') when set, else on for models of
   * OPTIMIZED_COPY_MIN_BYTES or more and off for smaller ones.
   */
  cacheOptimizedModel?: boolean;
}

/** Model size (model file plus its `.data`) from which `cacheOptimizedModel` is on by default: 16 MiB. */
const OPTIMIZED_COPY_MIN_BYTES = 16 * 1024 * 1024;

/** Server-wide default of `allowSpinning` for models that do not set it: '1' on, '0' off (else ALLOW_SPINNING_DEFAULT). */
const ALLOW_SPINNING_ENV = 'MARINA_ORT_ALLOW_SPINNING';

/** Spinning when neither the model nor the server's environment says: on, for a machine that serves only Marina (see createSessionOptions). */
const ALLOW_SPINNING_DEFAULT = true;

/** A server-wide on/off switch from the environment: '1' on, '0' off, anything else (or unset) undefined. */
function onOffFrom(value: string | undefined): boolean | undefined {
  return value === '1' ? true : value === '0' ? false : undefined;
}

/** The server-wide `allowSpinning` default from an environment (ALLOW_SPINNING_ENV); undefined when unset. */
export function allowSpinningDefaultFrom(env: Record<string, string | undefined>): boolean | undefined {
  return onOffFrom(env[ALLOW_SPINNING_ENV]);
}

/** Server-wide default of `forceSpinningStop` for models that do not set it: '1' on, '0' off (else FORCE_SPINNING_STOP_DEFAULT). */
const FORCE_SPINNING_STOP_ENV = 'MARINA_ORT_FORCE_SPINNING_STOP';

/** Spinning stops when a run returns unless the model or the server's environment says otherwise (see createSessionOptions). */
const FORCE_SPINNING_STOP_DEFAULT = true;

/** The server-wide `forceSpinningStop` default from an environment (FORCE_SPINNING_STOP_ENV); undefined when unset. */
export function forceSpinningStopDefaultFrom(env: Record<string, string | undefined>): boolean | undefined {
  return onOffFrom(env[FORCE_SPINNING_STOP_ENV]);
}

/** Server-wide default of `cacheOptimizedModel` for models that do not set it: '1' on, '0' off (else by size). */
const CACHE_OPTIMIZED_MODEL_ENV = 'MARINA_ORT_CACHE_OPTIMIZED_MODEL';

/** The server-wide `cacheOptimizedModel` default from an environment (CACHE_OPTIMIZED_MODEL_ENV); undefined when unset. */
export function cacheOptimizedModelDefaultFrom(env: Record<string, string | undefined>): boolean | undefined {
  return onOffFrom(env[CACHE_OPTIMIZED_MODEL_ENV]);
}

/**
 * Picks the `onnxruntime` settings out of a model-config.yaml mapping. Unknown keys and values of
 * the wrong type are ignored here: the archive loader has already rejected them against the schema.
 */
export function readOrtModelSettings(modelYamlConfig: Record<string, unknown> | undefined): OrtModelSettings {
  const raw = modelYamlConfig?.onnxruntime;
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) return {};
  const section = raw as Record<string, unknown>;
  const settings: OrtModelSettings = {};
  const level = section.graphOptimizationLevel;
  if (typeof level === 'string' && (GRAPH_OPTIMIZATION_LEVELS as readonly string[]).includes(level))
    settings.graphOptimizationLevel = level as GraphOptimizationLevel;
  if (typeof section.enableCpuMemArena === 'boolean') settings.enableCpuMemArena = section.enableCpuMemArena;
  if (typeof section.enableMemPattern === 'boolean') settings.enableMemPattern = section.enableMemPattern;
  if (typeof section.allowSpinning === 'boolean') settings.allowSpinning = section.allowSpinning;
  if (typeof section.forceSpinningStop === 'boolean') settings.forceSpinningStop = section.forceSpinningStop;
  if (typeof section.cacheOptimizedModel === 'boolean') settings.cacheOptimizedModel = section.cacheOptimizedModel;
  return settings;
}

/**
 * Session options every Marina worker uses, with the model's `onnxruntime` settings applied.
 * Default graph optimisation 'all': 1.3–1.6x faster than 'extended' (onnxruntime-node facts),
 * though it keeps private, reordered copies of the convolution weights in every worker (see docs/explanation/memory.md).
 *
 * Intra-op spinning (a worker with more than one intra-op thread) is on by default, as in
 * onnxruntime itself: on a machine that serves only Marina the second thread then waits at each
 * operator's barrier without a sleep and wake-up. ResNet-152, 1 worker × 2 threads, 100 clients,
 * 2-core AMD EPYC with nothing else running, the bench's servers with MARINA_ORT_ALLOW_SPINNING
 * 0 then 1: 7.28 against 7.78 img/s (+7%); batch 8: 8.23 against 8.47. On a machine whose cores
 * also do other work, spinning threads burn the cores that work needs: ResNet-18, 1 worker × 2
 * threads, 100 clients on a shared 2-core machine, 30.6 and 30.1 img/s spinning off against 18.0
 * and 28.5 spinning on. There, turn it off for the server (MARINA_ORT_ALLOW_SPINNING=0) or for a
 * model (`onnxruntime.allowSpinning: false`). Single-threaded workers never spin.
 *
 * Left to itself, onnxruntime keeps its pool threads spinning for about 50 ms after each run,
 * which is exactly when the server decodes the next request, hands results over and answers over
 * HTTP on the same cores. So spinning stops when a run returns (`session.force_spinning_stop`,
 * `forceSpinningStop`, on by default); the next run wakes the threads once and they spin again.
 * ResNet-152, 1 worker × 2 threads, batch 8 / delay 100, a lone client sending back to back, two
 * servers taking turns in blocks (three runs): 13.05–13.78 against 14.29–16.74 ms of client
 * latency beyond the model's run, and the run itself 169.0–174.2 against 175.0–180.8 ms.
 */
export function createSessionOptions(
  threading: SessionThreading,
  settings: OrtModelSettings = {},
): ort.InferenceSession.SessionOptions {
  const options: ort.InferenceSession.SessionOptions = {
    graphOptimizationLevel: settings.graphOptimizationLevel ?? 'all',
    intraOpNumThreads: threading.intraOpNumThreads,
    interOpNumThreads: 1,
    executionMode: 'sequential',
    executionProviders: ['cpu'],
    extra: { session: spinningEntries(settings, threading) },
  };
  if (settings.enableCpuMemArena !== undefined) options.enableCpuMemArena = settings.enableCpuMemArena;
  if (settings.enableMemPattern !== undefined) options.enableMemPattern = settings.enableMemPattern;
  return options;
}

/** The session's spinning config entries: `force_spinning_stop` only where the threads spin at all. */
function spinningEntries(settings: OrtModelSettings, threading: SessionThreading): Record<string, string> {
  if (!(settings.allowSpinning ?? threading.allowSpinning ?? ALLOW_SPINNING_DEFAULT))
    return { 'intra_op.allow_spinning': '0' };
  return {
    'intra_op.allow_spinning': '1',
    force_spinning_stop:
      (settings.forceSpinningStop ?? threading.forceSpinningStop ?? FORCE_SPINNING_STOP_DEFAULT) ? '1' : '0',
  };
}

/** The file a session is made from and its options: the model's optimised copy or the model itself (see resolveSessionModel). */
export interface SessionModel {
  path: string;
  options: ort.InferenceSession.SessionOptions;
}

/**
 * Creates an ORT session for a model file with the worker's options (the implementation of
 * `context.createSession`). External-data weights (`model.onnx.data`, e.g. packed with
 * `--extra-files`) are found beside `modelPath` and memory-mapped by onnxruntime.
 * `resolved`: resolveSessionModel for the same file and settings, started earlier.
 *
 * @throws onnxruntime's error when the model cannot be loaded.
 */
export async function createSession(
  modelPath: string,
  sessionSettings: SessionSettings,
  resolved?: Promise<SessionModel>,
): Promise<ort.InferenceSession> {
  const model = await (resolved ?? resolveSessionModel(modelPath, sessionSettings));
  return ort.InferenceSession.create(model.path, model.options);
}

/**
 * What a session for `modelPath` is made from. With `cacheOptimizedModel` (default for models of
 * 16 MiB or more) the cached optimised copy (see OrtModelSettings), written first when missing;
 * when that copy cannot be written (read-only or full disk) it warns (process warning
 * MARINA_ORT_OPTIMIZED_COPY_FAILED) and answers `modelPath` itself. A few file checks when the
 * copy exists: a worker starts them before its handler asks for the session (worker-main).
 */
export async function resolveSessionModel(modelPath: string, sessionSettings: SessionSettings): Promise<SessionModel> {
  const settings = sessionSettings.ort;
  const options = createSessionOptions(sessionSettings.threading, settings);
  if (
    options.graphOptimizationLevel === 'disabled' ||
    !(await isOptimizedCopyWanted(
      modelPath,
      settings.cacheOptimizedModel ?? sessionSettings.cacheOptimizedModelDefault,
    ))
  )
    return { path: modelPath, options };
  try {
    const optimizedPath = await ensureOptimizedModel(modelPath, options);
    return { path: optimizedPath, options: { ...options, graphOptimizationLevel: 'disabled' } };
  } catch (error) {
    process.emitWarning(
      `could not write the optimised copy of ${modelPath} (${(error as Error).message}); loading it directly, so each worker keeps its own copy of the weights`,
      { code: 'MARINA_ORT_OPTIMIZED_COPY_FAILED' },
    );
    return { path: modelPath, options };
  }
}

let cpuModelName: string | undefined;
/** The CPU's model name (os.cpus() reads /proc on each call; a load asks once per model). */
function cpuModel(): string {
  cpuModelName ??= os.cpus()[0]?.model ?? os.arch();
  return cpuModelName;
}

/** Where optimised copies live: `<tmpdir>/marina/ort-optimized`, beside the archive extraction cache. */
export function optimizedModelCacheDir(): string {
  return path.join(os.tmpdir(), 'marina', 'ort-optimized');
}

/**
 * Path of the optimised copy of `modelPath` for these options, written on first use. The key covers
 * the source file (path, size, mtime), onnxruntime's version, the CPU model ('all' writes
 * CPU-specific layouts) and the options that shape the graph. Concurrent writers (workers starting
 * together) each write a private folder and rename it into place; the first wins. Older copies of
 * the same source path are removed.
 */
async function ensureOptimizedModel(modelPath: string, options: ort.InferenceSession.SessionOptions): Promise<string> {
  const source = path.resolve(modelPath);
  const { size, mtimeMs } = await stat(source);
  const identity = {
    source,
    size,
    mtimeMs,
    ort: ort.env.versions.common,
    cpu: cpuModel(),
    level: options.graphOptimizationLevel,
  };
  const key = createHash('sha256').update(JSON.stringify(identity)).digest('hex').slice(0, 24);
  const cacheDir = optimizedModelCacheDir();
  const finalDir = path.join(cacheDir, key);
  const optimizedPath = path.join(finalDir, 'model.onnx');
  if (await isFile(optimizedPath)) {
    // Marks it used: the cache's least-recently-used eviction (cache/model-caches.ts) reads the folder's mtime.
    const now = new Date();
    await utimes(finalDir, now, now).catch(() => undefined);
    return optimizedPath;
  }

  const workDir = `${finalDir}.tmp-${process.pid}-${threadId}`;
  await rm(workDir, { recursive: true, force: true });
  await mkdir(workDir, { recursive: true });
  try {
    const writer = await ort.InferenceSession.create(source, {
      ...options,
      intraOpNumThreads: 1,
      // Errors only: onnxruntime otherwise warns, in colour, that a copy optimised at 'all' runs only
      // on this kind of CPU; the cache key holds the CPU model for exactly that reason.
      logSeverityLevel: 3,
      optimizedModelFilePath: path.join(workDir, 'model.onnx'),
      // onnxruntime-node joins the nesting with dots: session.optimized_model_external_initializers_*.
      extra: {
        session: {
          ...(options.extra as { session?: Record<string, string> } | undefined)?.session,
          optimized_model_external_initializers_file_name: 'model.onnx.data',
          optimized_model_external_initializers_min_size_in_bytes: '1024',
        },
      },
    });
    await writer.release();
    await writeFile(path.join(workDir, 'source.json'), `${JSON.stringify(identity)}\n`);
    await removeStaleCopies(cacheDir, source, key);
    try {
      await rename(workDir, finalDir);
    } catch (error) {
      // Another worker renamed its copy first: use that one.
      if (!(await isFile(optimizedPath))) throw error;
    }
  } finally {
    await rm(workDir, { recursive: true, force: true });
  }
  return optimizedPath;
}

async function removeStaleCopies(cacheDir: string, source: string, currentKey: string): Promise<void> {
  for (const entry of await readdir(cacheDir)) {
    if (entry === currentKey || entry.includes('.tmp-')) continue;
    try {
      const recorded = JSON.parse(await readFile(path.join(cacheDir, entry, 'source.json'), 'utf8')) as {
        source?: string;
      };
      // Copies of an older version of this file, or of a file that is gone (its archive's extraction
      // was removed). A live worker may still map one: unlinking keeps its pages valid.
      const isStale = recorded.source === source || (recorded.source !== undefined && !(await isFile(recorded.source)));
      if (isStale) await rm(path.join(cacheDir, entry), { recursive: true, force: true });
    } catch {
      // not a copy of ours, or being written
    }
  }
}

async function isOptimizedCopyWanted(modelPath: string, isWanted: boolean | undefined): Promise<boolean> {
  if (isWanted !== undefined) return isWanted;
  const bytes = (await fileSize(modelPath)) + (await fileSize(`${modelPath}.data`));
  return bytes >= OPTIMIZED_COPY_MIN_BYTES;
}

async function fileSize(filePath: string): Promise<number> {
  try {
    return (await stat(filePath)).size;
  } catch {
    return 0;
  }
}

async function isFile(filePath: string): Promise<boolean> {
  try {
    return (await stat(filePath)).isFile();
  } catch {
    return false;
  }
}
