/**
 * State that survives: the real `serve --foreground` (bin/serve.js) gets models registered,
 * scaled and a default version set over HTTP, writes a snapshot, is killed with SIGKILL, and
 * comes back with the same models, versions, default, settings and worker counts.
 */
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { mkdir, readdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { readLatestSnapshot } from '../src/snapshot/snapshot-store.ts';
import { affineInput, call, createWorkspace, packModel, waitFor, type Workspace } from './ops-harness.ts';

const BIN = fileURLToPath(new URL('../bin/serve.js', import.meta.url));

interface Serve {
  child: ChildProcessWithoutNullStreams;
  url: string;
  output: () => string;
  exited: Promise<number | null>;
}

let workspace: Workspace;
const children: ChildProcessWithoutNullStreams[] = [];

beforeAll(async () => {
  workspace = await createWorkspace('marina-ops-restart-');
  await mkdir(join(workspace.root, 'tmp'));
  await packModel(workspace.store, { modelName: 'resnet-152' });
  await packModel(workspace.store, { modelName: 'm', modelVersion: '1.0', fileName: 'm_v1.mar' });
  await packModel(workspace.store, { modelName: 'm', modelVersion: '2.0', fileName: 'm_v2.mar' });
  await writeFile(
    join(workspace.root, 'config.properties'),
    [
      'inference_address=http://127.0.0.1:0',
      'management_address=http://127.0.0.1:0',
      'grpc_inference_port=0',
      'grpc_management_port=0',
      'enable_metrics_api=false',
      'enable_model_api=true',
      'disable_token_authorization=true',
      'model_store=store',
      'load_models=resnet-152.mar',
      'allowed_urls=file:///nowhere/.*',
    ].join('\n'),
  );
}, 60_000);
afterEach(() => {
  for (const child of children.splice(0))
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
});
afterAll(() => workspace?.cleanup());

/** `serve --foreground ...args` in the workspace, resolved once it prints that it is ready. */
async function serve(args: string[]): Promise<Serve> {
  // Threads pinned to 1 per worker: four workers of three models on a 2-core machine are then within
  // the thread budget manual scaling allows (4 × cores when pinned; the cores themselves otherwise).
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    TMPDIR: join(workspace.root, 'tmp'),
    LOG_LOCATION: join(workspace.root, 'logs'),
    OMP_NUM_THREADS: '1',
  };
  delete env.TS_CONFIG_FILE;
  const child = spawn(process.execPath, [BIN, '--foreground', ...args], { cwd: workspace.root, env });
  children.push(child);
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  await new Promise<void>((resolve, reject) => {
    child.stdout.on('data', () => (output.includes('Marina is ready.') ? resolve() : undefined));
    void exited.then((code) => reject(new Error(`serve exited with ${code} before it was ready:\n${output}`)));
  });
  return { child, url: /Inference API bound to (\S+)/.exec(output)![1]!, output: () => output, exited };
}

/** What must come back: per version, settings and live worker count; and the defaults. */
async function state(url: string) {
  const list = (await call(url, 'GET', '/models')).json.models as Array<{ modelName: string }>;
  const models: Record<string, unknown> = {};
  for (const { modelName } of list) {
    const versions = (await call(url, 'GET', `/models/${modelName}/all`)).json as Array<Record<string, any>>;
    const byDefault = (await call(url, 'GET', `/models/${modelName}`)).json[0].modelVersion;
    models[modelName] = {
      defaultVersion: byDefault,
      versions: Object.fromEntries(
        versions.map((d) => [
          d.modelVersion,
          {
            modelUrl: d.modelUrl,
            minWorkers: d.minWorkers,
            maxWorkers: d.maxWorkers,
            batchSize: d.batchSize,
            maxBatchDelay: d.maxBatchDelay,
            responseTimeout: d.responseTimeout,
            workers: d.workers.length,
            readyWorkers: d.workers.filter((w: { status: string }) => w.status === 'READY').length,
          },
        ]),
      ),
    };
  }
  return models;
}

describe('a server killed with SIGKILL', { timeout: 180_000 }, () => {
  it('comes back from the newest snapshot or a named one with the same models, versions, default and scale; a named config file or --ncs starts from the config alone', async () => {
    const first = await serve(['--ts-config', 'config.properties']);
    expect(first.output()).toContain('Model loaded: resnet-152 (version 1.0)');
    expect((await call(first.url, 'POST', '/models?url=m_v1.mar&initial_workers=1&synchronous=true')).status).toBe(200);
    expect(
      (
        await call(
          first.url,
          'POST',
          '/models?url=m_v2.mar&initial_workers=1&batch_size=4&max_batch_delay=50&response_timeout=30&synchronous=true',
        )
      ).status,
    ).toBe(200);
    expect((await call(first.url, 'PUT', '/models/m/2.0/set-default')).status).toBe(200);
    expect((await call(first.url, 'PUT', '/models/resnet-152?min_worker=2&max_worker=3&synchronous=true')).status).toBe(
      200,
    );
    const before = await state(first.url);
    expect(before).toEqual({
      m: {
        defaultVersion: '2.0',
        versions: {
          '1.0': {
            modelUrl: 'm_v1.mar',
            minWorkers: 1,
            maxWorkers: 1,
            batchSize: 1,
            maxBatchDelay: 100,
            responseTimeout: 120,
            workers: 1,
            readyWorkers: 1,
          },
          '2.0': {
            modelUrl: 'm_v2.mar',
            minWorkers: 1,
            maxWorkers: 1,
            batchSize: 4,
            maxBatchDelay: 50,
            responseTimeout: 30,
            workers: 1,
            readyWorkers: 1,
          },
        },
      },
      'resnet-152': {
        defaultVersion: '1.0',
        versions: {
          '1.0': {
            modelUrl: 'resnet-152.mar',
            minWorkers: 2,
            maxWorkers: 3,
            batchSize: 1,
            maxBatchDelay: 100,
            responseTimeout: 120,
            workers: 2,
            readyWorkers: 2,
          },
        },
      },
    });

    const snapshotDir = join(workspace.root, 'logs', 'config');
    await waitFor('a snapshot with the last change', async () => {
      const snapshot = await readLatestSnapshot(snapshotDir);
      return (
        snapshot?.models.m?.['2.0']?.defaultVersion === true && snapshot.models['resnet-152']?.['1.0']?.minWorkers === 2
      );
    });
    first.child.kill('SIGKILL');
    await first.exited;
    const written = (await readdir(snapshotDir)).sort();
    expect(written.some((name) => /^\d{17}-startup\.cfg$/.test(name))).toBe(true);
    expect(written.some((name) => /^\d{17}-snapshot\.cfg$/.test(name))).toBe(true);
    const killedState = (await readLatestSnapshot(snapshotDir))!.path;

    // No --ts-config: the newest snapshot is the configuration (TorchServe's order), with the
    // file's settings; its models are restored and --models is ignored.
    const second = await serve(['--model-store', 'store', '--models', 'm_v1.mar']);
    expect(second.output()).toContain('restored the configuration from the snapshot');
    expect(second.output()).toContain('Restored the models of the snapshot');
    expect(second.output()).not.toContain('Model failed to load');
    expect(await state(second.url)).toEqual(before);
    const predicted = await call(second.url, 'POST', '/predictions/m', { body: affineInput([1, 2, 3, 4]) });
    expect(predicted.status).toBe(200);
    expect(predicted.json.outputs.output.data).toEqual([3, 5, 7, 9]);
    expect((await call(second.url, 'DELETE', '/models/m/1.0')).status).toBe(200);
    second.child.kill('SIGTERM');
    expect(await second.exited).toBe(0);
    // A graceful stop writes TorchServe's -shutdown.cfg with the last state (not an empty registry).
    const afterStop = await readLatestSnapshot(snapshotDir);
    expect(afterStop!.path).toMatch(/-shutdown\.cfg$/);
    expect(Object.keys(afterStop!.models).sort()).toEqual(['m', 'resnet-152']);
    expect(Object.keys(afterStop!.models.m!)).toEqual(['2.0']);

    // --ts-config naming a snapshot file restores that file's models and scale.
    const third = await serve(['--ts-config', killedState]);
    expect(third.output()).toContain(`Restored the models of the snapshot ${killedState}`);
    expect(await state(third.url)).toEqual(before);
    third.child.kill('SIGKILL');
    await third.exited;

    // --ts-config naming a plain config file wins over every snapshot: only its load_models.
    const fresh = await serve(['--ts-config', 'config.properties']);
    expect(fresh.output()).not.toContain('Restored the models');
    expect((await call(fresh.url, 'GET', '/models')).json.models).toEqual([
      { modelName: 'resnet-152', modelUrl: 'resnet-152.mar' },
    ]);
    expect((await call(fresh.url, 'GET', '/models/resnet-152')).json[0].workers).toHaveLength(1);
    fresh.child.kill('SIGKILL');
    await fresh.exited;

    // --ncs without --ts-config: no snapshot is read; ./config.properties is the configuration.
    const noSnapshots = await serve(['--ncs']);
    expect(noSnapshots.output()).not.toContain('Restored the models');
    expect((await call(noSnapshots.url, 'GET', '/models')).json.models).toEqual([
      { modelName: 'resnet-152', modelUrl: 'resnet-152.mar' },
    ]);
  });
});
