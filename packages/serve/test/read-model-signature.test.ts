/**
 * The graph a version's workers are given (WorkerInit.onnxGraph): read once at registration, with
 * the identity of its file, so a handler's graph reads in a new worker thread need not go to the file.
 */
import { stat } from 'node:fs/promises';
import { join } from 'node:path';
import * as ort from 'onnxruntime-node';
import { sessionSignature } from '@marina/handlers';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readModelSignature } from '../src/registry/read-model-signature.ts';
import { writeClassifierModel } from './fixtures.ts';
import { tempDir } from './helpers.ts';

describe('readModelSignature', () => {
  let dir: Awaited<ReturnType<typeof tempDir>>;
  beforeAll(async () => {
    dir = await tempDir('marina-signature-');
  });
  afterAll(() => dir?.cleanup());

  it('keeps the whole graph with its file identity, beside the signature onnxruntime reads', async () => {
    const folder = await writeClassifierModel(dir.path, 'cls');
    const read = await readModelSignature({ modelDir: folder, serializedFile: 'model.onnx' });
    if (!('signature' in read)) throw read.error;
    const path = join(folder, 'model.onnx');
    const session = await ort.InferenceSession.create(path);
    expect(read.signature).toEqual(sessionSignature(session));
    await session.release();
    const file = await stat(path);
    expect(read.graph).toMatchObject({ path, size: file.size, mtimeMs: file.mtimeMs });
    expect(read.graph!.graph.nodes.map((n) => n.opType)).toContain('Conv');
    expect({ inputs: read.graph!.graph.inputs, outputs: read.graph!.graph.outputs }).toEqual(read.signature);
  });

  it('reads nothing for an archive without an ONNX serializedFile', async () => {
    expect(await readModelSignature({ modelDir: dir.path, serializedFile: undefined })).toEqual({
      signature: { inputs: [], outputs: [] },
    });
  });
});
