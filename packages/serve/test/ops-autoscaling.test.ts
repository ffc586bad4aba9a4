/**
 * The autoscaler end to end: a slow model with minWorkers 1 / maxWorkers 2 on a real server,
 * short knobs from config.properties (autoscale_*). A burst makes the queue grow and a worker is
 * added; idle time gives it back, while requests keep flowing and every one is answered.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  call,
  createWorkspace,
  opsConfig,
  packModel,
  startOps,
  waitFor,
  type OpsServer,
  type Workspace,
} from './ops-harness.ts';

let workspace: Workspace;
let ops: OpsServer;
const WIDTH = 512;
const slowInput = () => ({
  inputs: { input: { shape: [1, WIDTH], data: Array.from({ length: WIDTH }, (_, i) => (i % 7) / 7) } },
});

beforeAll(async () => {
  workspace = await createWorkspace();
  await packModel(workspace.store, {
    modelName: 'slow',
    slowLayers: 2500,
    modelConfigYaml: 'minWorkers: 1\nmaxWorkers: 2\nbatchSize: 1\n',
  });
  ops = await startOps(
    opsConfig(workspace, {
      load_models: 'slow.mar',
      autoscale_interval_ms: '50',
      autoscale_scale_up_after_ms: '150',
      autoscale_scale_down_idle_ms: '600',
    }),
  );
}, 60_000);
afterAll(async () => {
  await ops?.close();
  await workspace?.cleanup();
});

const describeSlow = async () => (await call(ops.api, 'GET', '/models/slow')).json[0];

describe('autoscaling between minWorkers and maxWorkers', { timeout: 120_000 }, () => {
  it('shows its knobs in describe', async () => {
    const d = await describeSlow();
    expect(d).toMatchObject({ minWorkers: 1, maxWorkers: 2 });
    expect(d.workers).toHaveLength(1);
    expect(d.autoscaling).toMatchObject({
      enabled: true,
      intervalMs: 50,
      scaleUpQueueDepth: 1,
      scaleUpAfterMs: 150,
      scaleDownIdleMs: 600,
    });
  });

  it('adds a worker while a burst queues up, gives it back when idle, and answers every request', async () => {
    const burst = Array.from({ length: 24 }, () => call(ops.api, 'POST', '/predictions/slow', { body: slowInput() }));
    let maxWorkers = 0;
    let isBurstDone = false;
    const settled = Promise.all(burst).finally(() => (isBurstDone = true));
    await waitFor(
      'a second worker during the burst',
      async () => {
        maxWorkers = Math.max(maxWorkers, (await describeSlow()).workers.length);
        return maxWorkers === 2 || isBurstDone;
      },
      60_000,
      25,
    );
    const responses = await settled;
    expect(responses.map((r) => r.status)).toEqual(responses.map(() => 200));
    expect(maxWorkers).toBe(2);
    // The autoscaler records a move once the new worker has loaded, which on a busy machine can be after the burst is
    // answered, and describe's last move may by then be the scale-down: its log line is the lasting record.
    await waitFor(
      'the scale-up in the log',
      () => ops.messages.some((m) => m === 'autoscaler: model slow version 1.0 1 -> 2 workers (behind)'),
      60_000,
      25,
    );

    // One client at a time keeps a worker busy while the other idles: the idle one goes, no request is lost.
    const statuses: number[] = [];
    let workers = 2;
    await waitFor(
      'the extra worker to be given back',
      async () => {
        statuses.push((await call(ops.api, 'POST', '/predictions/slow', { body: slowInput() })).status);
        workers = (await describeSlow()).workers.length;
        return workers === 1;
      },
      60_000,
      0,
    );
    for (let i = 0; i < 3; i++)
      statuses.push((await call(ops.api, 'POST', '/predictions/slow', { body: slowInput() })).status);
    expect(statuses.every((s) => s === 200)).toBe(true);
    const shrunk = await describeSlow();
    expect(shrunk.workers).toHaveLength(1);
    expect(shrunk.autoscaling).toMatchObject({ lastScaledFrom: 2, lastScaledTo: 1, lastReason: 'idle' });
  });
});
