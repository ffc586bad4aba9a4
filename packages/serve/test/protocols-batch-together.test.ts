/**
 * One path inside: requests of all four protocols to one model wait in its one queue and leave in
 * one batch. A custom handler holds its first batch until the test opens a gate file, reports
 * each request's batch size and protocol; the test waits on the queue state, never on the clock.
 */
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { BatchDoneEvent } from '../src/registry/model-registry-api.ts';
import { clientPackage, grpcClient, startOipServer, unaryCall, writeGate, type OipServer } from './oip-harness.ts';
import { waitFor } from './ops-harness.ts';

let server: OipServer;

beforeAll(async () => {
  server = await startOipServer();
}, 60_000);

afterAll(async () => {
  await server?.close();
});

describe('one queue and one batcher for every protocol', () => {
  it('batches TorchServe REST, TorchServe gRPC, OIP REST and OIP gRPC requests together', async () => {
    const gate = join(server.root, 'gate-open');
    const auth = { authorization: `Bearer ${server.keys.inference}` };
    const batches: BatchDoneEvent[] = [];
    server.app.registry.events.on('batch', (e) => e.modelName === 'gate' && batches.push(e));
    const oip = grpcClient(
      clientPackage('grpc_predict_v2.proto'),
      'inference.GRPCInferenceService',
      server.grpc.inferenceUrl,
    );
    const ts = grpcClient(
      clientPackage('inference.proto'),
      'org.pytorch.serve.grpc.inference.InferenceAPIsService',
      server.grpc.inferenceUrl,
    );
    try {
      // The first request holds the worker until the gate opens.
      const holder = fetch(`${server.rest}/predictions/gate`, {
        method: 'POST',
        headers: { ...auth, 'content-type': 'application/json' },
        body: JSON.stringify({ gate }),
      });
      await waitFor(
        'the holding request to reach the worker',
        () => server.app.registry.stats().find((s) => s.modelName === 'gate')!.busyWorkers === 1,
      );
      const answers = Promise.all([
        fetch(`${server.rest}/predictions/gate`, {
          method: 'POST',
          headers: { ...auth, 'content-type': 'application/json' },
          body: '{"value": 1}',
        }).then(async (r) => r.json()),
        unaryCall(
          ts,
          'Predictions',
          { model_name: 'gate', input: { data: Buffer.from('x') } },
          server.keys.inference,
        ).then((a) => JSON.parse(Buffer.from(a.prediction).toString())),
        fetch(`${server.rest}/v2/models/gate/infer`, {
          method: 'POST',
          headers: { ...auth, 'content-type': 'application/json' },
          body: JSON.stringify({ inputs: [{ name: 'in', datatype: 'BYTES', shape: [1], data: ['a'] }] }),
        }).then(async (r) => JSON.parse((await r.json()).outputs[0].data[0])),
        unaryCall(
          oip,
          'ModelInfer',
          {
            model_name: 'gate',
            inputs: [{ name: 'in', datatype: 'BYTES', shape: [1], contents: { bytes_contents: [Buffer.from('b')] } }],
          },
          server.keys.inference,
        ).then((a) => JSON.parse(Buffer.from(a.outputs[0].contents.bytes_contents[0]).toString())),
      ]);
      // All four are admitted (queued, or collected into the next batch) before the gate opens.
      await waitFor(
        'four requests behind the holding one',
        () => server.app.registry.getVersion('gate').pendingJobs === 5,
      );
      await writeGate(gate);
      expect(await (await holder).json()).toEqual({ batchSize: 1, protocol: 'torchserve-rest' });
      const results = await answers;
      expect(results).toEqual([
        { batchSize: 4, protocol: 'torchserve-rest' },
        { batchSize: 4, protocol: 'torchserve-grpc' },
        { batchSize: 4, protocol: 'v2' },
        { batchSize: 4, protocol: 'v2' },
      ]);
      expect(batches.map((b) => b.batchSize)).toEqual([1, 4]);
    } finally {
      oip.close();
      ts.close();
    }
  });
});
