/**
 * Warm-up, run by a worker after its handler initialised and before it reports ready: a model is
 * "ready" (describe, /v1/models/{name} readiness) only once its first, slow runs (allocations,
 * page faults, onnxruntime's kernel caches) are behind it. Self-contained on purpose: the worker
 * calls `warmUp` with a function that runs one batch through its handler, nothing else.
 */
import { readFile } from 'node:fs/promises';
import { extname } from 'node:path';
// The one function, not the package's index: a worker thread imports this module, and the
// index (zip reading, validation) took about 0.5 s of each new thread's start, measured.
import { resolveManifestPath } from '@marina/archive/safe-path';
import { syntheticRequestBody, type ModelSignature, type RequestRow } from '@marina/handlers';
import { createServeError } from '../errors.ts';

/** model-config.yaml `warmup:` (schemas/model-config.schema.json). */
export interface WarmupSettings {
  /** Runs per batch size. Default 1. */
  runs: number;
  /** Batch sizes to run, each `runs` times. Default [the model's batchSize]. */
  batchSizes: number[];
  /** A request body inside the archive (e.g. `sample.jpg`); default: synthetic from the signature (built-in handlers). */
  input: string | undefined;
  /** How `input` is handed to the handler, as a request's Content-Type would be. Default from its extension. */
  contentType: string | undefined;
}

export interface WarmupReport {
  runs: number;
  batchSizes: number[];
  /** `sample.jpg`, or `synthetic (image_classifier)`. */
  input: string;
  /** Wall time of all warm-up runs, ms. */
  ms: number;
}

/** The `warmup:` section, with defaults; undefined when the model has none (no warm-up). Schema-checked already. */
export function readWarmupSettings(
  modelYamlConfig: Record<string, unknown>,
  batchSize: number,
): WarmupSettings | undefined {
  const raw = modelYamlConfig.warmup;
  if (raw === undefined || raw === null || raw === false) return undefined;
  const section = (typeof raw === 'object' && !Array.isArray(raw) ? raw : {}) as Record<string, unknown>;
  return {
    runs: typeof section.runs === 'number' ? section.runs : 1,
    batchSizes:
      Array.isArray(section.batchSizes) && section.batchSizes.length > 0
        ? (section.batchSizes as number[])
        : [Math.max(1, batchSize)],
    input: typeof section.input === 'string' ? section.input : undefined,
    contentType: typeof section.contentType === 'string' ? section.contentType : undefined,
  };
}

/** The body as the handler gets it from a request of that content type (TorchServe's decode_input_request). */
function decodeSample(bytes: Buffer, contentType: string): unknown {
  const type = contentType.split(';')[0]!.trim().toLowerCase();
  if (type === 'application/json') {
    try {
      return JSON.parse(bytes.toString('utf8'));
    } catch {
      return bytes;
    }
  }
  if (type.startsWith('text/')) return bytes.toString('utf8');
  return bytes;
}

function contentTypeOf(file: string): string {
  const ext = extname(file).toLowerCase();
  if (ext === '.json') return 'application/json';
  if (ext === '.txt') return 'text/plain';
  return 'application/octet-stream';
}

/**
 * Runs `settings.runs` batches of each of `settings.batchSizes` through `runBatch`, one after
 * another, with the sample input (contained in `modelDir`) or a synthetic one from the signature.
 * @throws MARINA_ERR_WARMUP_FAILED when there is no input to use or a warm-up batch fails, with the handler's message;
 *   MARINA_ERR_ARCHIVE_PATH_ESCAPE when `input` points outside the archive.
 */
export async function warmUp(options: {
  settings: WarmupSettings;
  modelDir: string;
  handler: string;
  /** The signature of the first session the handler created; undefined when it created none. */
  signature: ModelSignature | undefined;
  runBatch: (rows: RequestRow[]) => Promise<unknown>;
}): Promise<WarmupReport> {
  const { settings } = options;
  let body: unknown;
  let inputLabel: string;
  if (settings.input !== undefined) {
    const path = await resolveManifestPath(options.modelDir, settings.input, 'warmup.input');
    let bytes: Buffer;
    try {
      bytes = await readFile(path);
    } catch (error) {
      throw createServeError.MARINA_ERR_WARMUP_FAILED(
        `warmup.input '${settings.input}' cannot be read from the archive (${(error as NodeJS.ErrnoException).code ?? (error as Error).message}); add the file to the archive with --extra-files`,
        { cause: error },
      );
    }
    body = decodeSample(bytes, settings.contentType ?? contentTypeOf(settings.input));
    inputLabel = settings.input;
  } else {
    const synthetic = options.signature ? await syntheticRequestBody(options.handler, options.signature) : undefined;
    if (!synthetic) {
      throw createServeError.MARINA_ERR_WARMUP_FAILED(
        `warm-up needs a sample input for handler '${options.handler}': set warmup.input in model-config.yaml to a request body file inside the archive (synthetic inputs exist only for the built-in image_classifier and tensor handlers)`,
      );
    }
    body = decodeSample(synthetic.body, synthetic.contentType);
    inputLabel = `synthetic (${options.handler})`;
  }
  const started = performance.now();
  for (const batchSize of settings.batchSizes) {
    for (let run = 0; run < settings.runs; run++) {
      const rows: RequestRow[] = Array.from({ length: batchSize }, () => ({ body }));
      let output: unknown;
      try {
        output = await options.runBatch(rows);
      } catch (error) {
        throw createServeError.MARINA_ERR_WARMUP_FAILED(
          `warm-up batch of ${batchSize} with ${inputLabel} failed: ${(error as Error).message}`,
          { cause: error },
        );
      }
      const failed = Array.isArray(output) ? output.find((item) => item instanceof Error) : undefined;
      if (!Array.isArray(output) || output.length !== batchSize || failed) {
        const what = failed
          ? (failed as Error).message
          : `the handler returned ${Array.isArray(output) ? `${output.length} results` : typeof output} for ${batchSize} requests`;
        throw createServeError.MARINA_ERR_WARMUP_FAILED(
          `warm-up batch of ${batchSize} with ${inputLabel} failed: ${what}; fix warmup.input or the handler`,
        );
      }
    }
  }
  return {
    runs: settings.runs * settings.batchSizes.length,
    batchSizes: settings.batchSizes,
    input: inputLabel,
    ms: performance.now() - started,
  };
}
