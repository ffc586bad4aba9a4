import { readdir, readFile, stat } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { isMarinaError } from '@marina/errors';
import { getBuiltinHandler, loadCustomHandler, type Handler, type HandlerContext } from '@marina/handlers';
import * as ort from 'onnxruntime-node';
import { createError } from './errors.ts';
import type { Feeds } from './quantize-model.ts';

/** Largest calibration sample read (bytes); request bodies bigger than this are not what a server accepts either. */
export const MAX_SAMPLE_BYTES = 64 * 1024 * 1024;
/** Most samples read from one folder. */
export const MAX_SAMPLES = 1000;

export interface Sample {
  /** File name inside the folder. */
  name: string;
  body: Buffer;
}

/**
 * Reads the request bodies in a folder (regular files, sorted by name, hidden files skipped).
 * @throws MARINA_ERR_QUANTIZE_CALIBRATION_EMPTY when the folder is missing or has no files.
 */
export async function readSamples(dir: string): Promise<Sample[]> {
  let names: string[];
  try {
    names = (await readdir(dir)).filter((n) => !n.startsWith('.')).sort();
  } catch (error) {
    throw createError.MARINA_ERR_QUANTIZE_CALIBRATION_EMPTY(
      `could not read the sample folder '${dir}': ${(error as Error).message}; give a folder of request bodies (images, or JSON for the tensor handler)`,
      { cause: error },
    );
  }
  const samples: Sample[] = [];
  for (const name of names.slice(0, MAX_SAMPLES)) {
    // Names come from readdir of this folder: plain entries, never paths.
    const path = join(dir, name);
    const info = await stat(path);
    if (!info.isFile() || info.size > MAX_SAMPLE_BYTES) continue;
    samples.push({ name, body: await readFile(path) });
  }
  if (samples.length === 0)
    throw createError.MARINA_ERR_QUANTIZE_CALIBRATION_EMPTY(
      `the sample folder '${dir}' has no files; put request bodies in it (images for the image handlers, JSON for the tensor handler)`,
    );
  return samples;
}

export interface HandlerFeedsOptions {
  /** A built-in handler name, or the path of a handler module (optionally `:functionName`). */
  handler: string;
  /** The fp32 model. */
  modelPath: string;
  /** Folder the handler reads its extra files from (index_to_name.json); defaults to the model's folder. */
  modelDir?: string;
  modelYamlConfig?: Record<string, unknown>;
  samples: readonly Sample[];
}

export interface SampleRun {
  name: string;
  /** The inputs the handler gave the session for this request (copied). */
  feeds?: Feeds;
  /** Why the sample could not be used (the handler's error). */
  error?: string;
}

function copyTensor(tensor: ort.Tensor): ort.Tensor {
  const data = tensor.data as ArrayLike<number> & { slice(): ArrayLike<number> };
  return new ort.Tensor(tensor.type as 'float32', data.slice() as Float32Array, [...tensor.dims]);
}

async function createHandler(spec: string, modelDir: string): Promise<{ handler: Handler; modelDir: string }> {
  const builtin = getBuiltinHandler(spec);
  if (builtin) return { handler: builtin.create(), modelDir };
  const match = /^(.+?)(:[A-Za-z_$][\w$]*)?$/.exec(spec)!;
  const path = match[1]!;
  return {
    handler: await loadCustomHandler({ handler: `${basename(path)}${match[2] ?? ''}`, modelDir: dirname(path) }),
    modelDir: dirname(path),
  };
}

/**
 * Runs each sample through the handler as the server would (initialize once, then
 * preprocess → inference → postprocess per request, or `handle`) on a real fp32 session,
 * and records the inputs the handler gives the session: the calibration data is exactly
 * what serving computes on. Built-in and custom handlers are treated alike.
 */
export async function recordHandlerFeeds(options: HandlerFeedsOptions): Promise<SampleRun[]> {
  const modelDir = options.modelDir ?? dirname(options.modelPath);
  const { handler, modelDir: handlerDir } = await createHandler(options.handler, modelDir);
  let recorded: Feeds | undefined;
  const wrap = (session: ort.InferenceSession): ort.InferenceSession =>
    new Proxy(session, {
      get(target, key, receiver) {
        if (key === 'run') {
          return (feeds: Feeds, ...rest: unknown[]) => {
            recorded ??= Object.fromEntries(Object.entries(feeds).map(([k, v]) => [k, copyTensor(v)]));
            return (target.run as (...a: unknown[]) => unknown).call(target, feeds, ...rest);
          };
        }
        const value = Reflect.get(target, key, receiver);
        return typeof value === 'function' ? value.bind(target) : value;
      },
    });
  const sessions: ort.InferenceSession[] = [];
  const context: HandlerContext = {
    modelName: 'quantize',
    modelVersion: '1.0',
    manifest: {},
    modelDir: handlerDir,
    serializedFilePath: options.modelPath,
    batchSize: 1,
    modelYamlConfig: options.modelYamlConfig ?? {},
    systemProperties: {
      model_dir: handlerDir,
      gpu_id: null,
      batch_size: 1,
      server_name: 'MMS',
      server_version: 'model-archiver',
      limit_max_image_pixels: true,
    },
    intraOpNumThreads: 1,
    createSession: async (path?: string) => {
      const session = await ort.InferenceSession.create(path ?? options.modelPath, {
        intraOpNumThreads: 1,
        graphOptimizationLevel: 'all',
      });
      sessions.push(session);
      return wrap(session);
    },
    requestIds: ['calibration'],
    getRequestHeader: () => undefined,
    setResponseStatus: () => undefined,
    setResponseContentType: () => undefined,
    setResponseHeader: () => undefined,
  };
  try {
    await handler.initialize?.(context);
    const runs: SampleRun[] = [];
    for (const sample of options.samples) {
      recorded = undefined;
      const rows = [{ body: sample.body }];
      try {
        const results = handler.handle
          ? await handler.handle(rows, context)
          : await handler.postprocess!(
              await handler.inference!(await handler.preprocess!(rows, context), context),
              context,
            );
        const result = results[0];
        if (isMarinaError(result) || result instanceof Error)
          runs.push({ name: sample.name, error: (result as Error).message });
        else if (!recorded)
          runs.push({ name: sample.name, error: 'the handler did not run the model for this request' });
        else runs.push({ name: sample.name, feeds: recorded });
      } catch (error) {
        runs.push({ name: sample.name, error: (error as Error).message });
      }
    }
    return runs;
  } finally {
    await Promise.all(sessions.map((s) => s.release().catch(() => undefined)));
  }
}
