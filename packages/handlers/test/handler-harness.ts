import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as ort from 'onnxruntime-node';
import sharp from 'sharp';
import type { Handler, HandlerContext, RequestRow } from '../src/index.ts';

/** A temp folder for one test file's models and images; `remove()` in afterAll. */
export async function createWorkDir(): Promise<{ dir: string; remove: () => Promise<void> }> {
  const dir = await mkdtemp(join(tmpdir(), 'marina-handlers-'));
  return { dir, remove: () => rm(dir, { recursive: true, force: true }) };
}

export interface BatchRecord {
  contentTypes: Map<number, string>;
}

/**
 * A HandlerContext as the serve worker builds it, around a real onnxruntime-node session of
 * `modelPath` (one thread). `headers[i]` are the request headers of row i.
 */
export function createContext(options: {
  modelPath: string;
  modelDir: string;
  modelYamlConfig?: Record<string, unknown>;
  batchSize?: number;
  headers?: Array<Record<string, string>>;
}): HandlerContext & BatchRecord {
  const contentTypes = new Map<number, string>();
  return {
    modelName: 'm',
    modelVersion: '1.0',
    manifest: {},
    modelDir: options.modelDir,
    serializedFilePath: options.modelPath,
    batchSize: options.batchSize ?? 1,
    modelYamlConfig: options.modelYamlConfig ?? {},
    systemProperties: {
      model_dir: options.modelDir,
      gpu_id: null,
      batch_size: options.batchSize ?? 1,
      server_name: 'MMS',
      server_version: 'test',
      limit_max_image_pixels: true,
    },
    intraOpNumThreads: 1,
    createSession: (path?: string) => ort.InferenceSession.create(path ?? options.modelPath, { intraOpNumThreads: 1 }),
    requestIds: [],
    getRequestHeader: (index, name) => options.headers?.[index]?.[name],
    setResponseStatus: () => {},
    setResponseContentType: (index, type) => void contentTypes.set(index, type),
    setResponseHeader: () => {},
    contentTypes,
  };
}

/** Runs preprocess → inference → postprocess as the worker does. */
export async function runHandler(handler: Handler, rows: RequestRow[], context: HandlerContext): Promise<unknown[]> {
  const pre = await handler.preprocess!(rows, context);
  const inferred = await handler.inference!(pre, context);
  return handler.postprocess!(inferred, context);
}

/** A handler initialised on a model with a model-config.yaml `handler:` section. */
export async function initialised(
  create: () => Handler,
  options: Parameters<typeof createContext>[0],
): Promise<{ handler: Handler; context: HandlerContext & BatchRecord }> {
  const context = createContext(options);
  const handler = create();
  await handler.initialize!(context);
  return { handler, context };
}

export async function writeJson(path: string, value: unknown): Promise<void> {
  await writeFile(path, JSON.stringify(value));
}

/** A deterministic PNG with structure in both directions (gradients plus a checker), so a shifted crop or pad shows. */
export async function patternPng(width: number, height: number): Promise<Buffer> {
  const pixels = Buffer.alloc(width * height * 3);
  for (let y = 0; y < height; y++) {
    for (let x = 0; x < width; x++) {
      const p = (y * width + x) * 3;
      pixels[p] = Math.round((255 * x) / (width - 1));
      pixels[p + 1] = Math.round((255 * y) / (height - 1));
      pixels[p + 2] = ((x >> 3) + (y >> 3)) % 2 === 0 ? 230 : 20;
    }
  }
  return sharp(pixels, { raw: { width, height, channels: 3 } })
    .png()
    .toBuffer();
}
