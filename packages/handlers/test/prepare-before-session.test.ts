import { join } from 'node:path';
import * as ort from 'onnxruntime-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { writeHeadClassifier, writeTinyDetector, writeTinySegmenter } from '@marina/model-zoo';
import {
  createImageClassifier,
  createImageSegmenter,
  createObjectDetector,
  type Handler,
  type HandlerContext,
} from '../src/index.ts';
import { createContext, createWorkDir, patternPng } from './handler-harness.ts';

// Handler.prepare: the built-in image handlers read the model's inputs and outputs from its graph,
// so a worker can decode a batch before the session exists (a request waiting for its model's
// load is decoded while the session is created). Real models, real sessions, real sharp.

let work: Awaited<ReturnType<typeof createWorkDir>>;
let image: Buffer;
beforeAll(async () => {
  work = await createWorkDir();
  image = await patternPng(48, 40);
});
afterAll(() => work.remove());

/** The context, with the sessions it created counted. */
function countingContext(modelPath: string): { context: HandlerContext; sessions: () => number } {
  const context = createContext({ modelPath, modelDir: work.dir });
  let created = 0;
  const create = context.createSession;
  context.createSession = (path?: string) => {
    created++;
    return create(path);
  };
  return { context, sessions: () => created };
}

/** preprocess → inference → postprocess on one image, with `preprocessed` given when it ran already. */
async function answer(handler: Handler, context: HandlerContext, preprocessed?: unknown): Promise<unknown> {
  const pre = preprocessed ?? (await handler.preprocess!([{ body: image }], context));
  const inferred = await handler.inference!(pre, context);
  return (await handler.postprocess!(inferred, context))[0];
}

const cases: Array<{ name: string; create: () => Handler; write: (outputPath: string) => Promise<unknown> }> = [
  {
    name: 'image_classifier',
    create: createImageClassifier,
    write: (outputPath) => writeHeadClassifier({ outputPath }),
  },
  {
    name: 'image_segmenter',
    create: createImageSegmenter,
    write: (outputPath) => writeTinySegmenter({ outputPath, classes: 3 }),
  },
  { name: 'object_detector', create: createObjectDetector, write: (outputPath) => writeTinyDetector({ outputPath }) },
];

describe('Handler.prepare (the built-in image handlers)', () => {
  for (const { name, create, write } of cases) {
    it(`${name}: decodes before its session exists, and answers as a handler initialised first does`, async () => {
      const modelPath = join(work.dir, `${name}.onnx`);
      await write(modelPath);

      const early = countingContext(modelPath);
      const prepared = create();
      expect(await prepared.prepare!(early.context)).toBe(true);
      const decoded = await prepared.preprocess!([{ body: image }], early.context);
      expect(early.sessions()).toBe(0);
      await prepared.initialize!(early.context);
      expect(early.sessions()).toBe(1);
      const fromPrepared = await answer(prepared, early.context, decoded);

      const usual = countingContext(modelPath);
      const initialisedFirst = create();
      await initialisedFirst.initialize!(usual.context);
      expect(usual.sessions()).toBe(1);
      expect(fromPrepared).toEqual(await answer(initialisedFirst, usual.context));
    });
  }

  it('refuses a session that reads the model otherwise than the graph it was prepared from', async () => {
    const graphPath = join(work.dir, 'prepared-from.onnx');
    const otherPath = join(work.dir, 'session-of.onnx');
    await writeHeadClassifier({ outputPath: graphPath, inputSize: 32 });
    await writeHeadClassifier({ outputPath: otherPath, inputSize: 48 });
    const context = createContext({ modelPath: graphPath, modelDir: work.dir });
    // The session comes from another file than the one prepare read: its input is 48×48, not 32×32.
    context.createSession = () => ort.InferenceSession.create(otherPath, { intraOpNumThreads: 1 });
    const handler = createImageClassifier();
    expect(await handler.prepare!(context)).toBe(true);
    await expect(handler.initialize!(context)).rejects.toMatchObject({ code: 'MARINA_ERR_MODEL_OUTPUT_UNEXPECTED' });
  });

  it('prepares nothing for an archive without a model file (initialize then fails as before)', async () => {
    const context = createContext({ modelPath: '', modelDir: work.dir });
    expect(await createImageClassifier().prepare!(context)).toBe(false);
  });
});
