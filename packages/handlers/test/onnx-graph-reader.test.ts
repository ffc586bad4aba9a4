import { join } from 'node:path';
import { utimes, writeFile } from 'node:fs/promises';
import * as ort from 'onnxruntime-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  writeHeadClassifier,
  writeMultiOutputModel,
  writeSlowModel,
  writeTinyDetector,
  writeTinySegmenter,
} from '@marina/model-zoo';
import {
  finalActivation,
  readOnnxGraph,
  readOnnxGraphFile,
  rememberOnnxGraph,
  sessionSignature,
} from '../src/index.ts';
import { createWorkDir } from './handler-harness.ts';

let work: Awaited<ReturnType<typeof createWorkDir>>;
beforeAll(async () => {
  work = await createWorkDir();
});
afterAll(() => work.remove());

describe('readOnnxGraph', () => {
  const models: Array<[string, (outputPath: string) => Promise<unknown>]> = [
    [
      'softmax classifier, dynamic H/W',
      (p) => writeHeadClassifier({ outputPath: p, head: 'softmax', isSizeDynamic: true }),
    ],
    ['fixed-batch grayscale classifier', (p) => writeHeadClassifier({ outputPath: p, channels: 1, fixedBatch: 1 })],
    ['multi-output', (p) => writeMultiOutputModel({ outputPath: p })],
    ['detector with an int64 output', (p) => writeTinyDetector({ outputPath: p })],
    ['segmenter', (p) => writeTinySegmenter({ outputPath: p, classes: 1, head: 'sigmoid' })],
    ['a Loop with a subgraph', (p) => writeSlowModel({ outputPath: p, layers: 2, width: 8 })],
  ];
  for (const [name, write] of models) {
    it(`reads the same inputs and outputs as onnxruntime-node: ${name}`, async () => {
      const path = join(work.dir, `${name.replace(/\W+/g, '-')}.onnx`);
      await write(path);
      const session = await ort.InferenceSession.create(path);
      const expected = sessionSignature(session);
      await session.release();
      const graph = await readOnnxGraph(path);
      expect({ inputs: graph.inputs, outputs: graph.outputs }).toEqual(expected);
      expect(graph.nodes.length).toBeGreaterThan(0);
    });
  }

  it('finds the final Softmax, LogSoftmax or Sigmoid, and nothing for a Gemm', async () => {
    const cases = [
      ['softmax', 'softmax'],
      ['log-softmax', 'log-softmax'],
      ['logits', undefined],
    ] as const;
    for (const [head, activation] of cases) {
      const path = join(work.dir, `head-${head}.onnx`);
      await writeHeadClassifier({ outputPath: path, head });
      expect(finalActivation(await readOnnxGraph(path), 'output')).toBe(activation);
    }
    const seg = join(work.dir, 'seg-sigmoid.onnx');
    await writeTinySegmenter({ outputPath: seg, classes: 1, head: 'sigmoid' });
    expect(finalActivation(await readOnnxGraph(seg), 'output')).toBe('sigmoid');
  });

  it('answers a graph given to rememberOnnxGraph while its file is unchanged, and reads the file once it changed', async () => {
    const path = join(work.dir, 'remembered.onnx');
    await writeHeadClassifier({ outputPath: path, head: 'softmax' });
    const read = await readOnnxGraphFile(path);
    expect(finalActivation(read.graph, 'output')).toBe('softmax');
    // What a worker thread is given: the graph the server read, told apart here by one extra node.
    const marker = { opType: 'Marker', inputs: [], outputs: ['marker'] };
    rememberOnnxGraph({ ...read, graph: { ...read.graph, nodes: [...read.graph.nodes, marker] } });
    expect((await readOnnxGraph(path)).nodes.at(-1)).toEqual(marker);
    // The file is replaced (another model, another time): its own graph is read again.
    await writeHeadClassifier({ outputPath: path, head: 'logits' });
    await utimes(path, new Date(), new Date(read.mtimeMs + 5000));
    const again = await readOnnxGraph(path);
    expect(again.nodes.some((n) => n.opType === 'Marker')).toBe(false);
    expect(finalActivation(again, 'output')).toBeUndefined();
  });

  it('rejects a file that is not ONNX', async () => {
    const path = join(work.dir, 'junk.onnx');
    await writeFile(path, 'this is not a model at all');
    await expect(readOnnxGraph(path)).rejects.toThrow();
  });
});
