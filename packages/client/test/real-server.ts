import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { writeSampleJpeg, writeTinyClassifier } from '@marina/model-zoo';

const SERVE_BIN = fileURLToPath(new URL('../../serve/bin/serve.js', import.meta.url));

/**
 * A handler that blocks its thread for the JSON body's `sleepMs` (as a native run() does) and
 * answers `{ echo: value }`: a request that holds the only worker lets a test fill the queue.
 */
const sleepyHandlerSource = `
export function handle(data) {
  const ms = Math.max(0, ...data.map((row) => Number((row.body && row.body.sleepMs) || 0)));
  const end = Date.now() + ms;
  while (Date.now() < end) { /* busy, like a native inference */ }
  return data.map((row) => ({ echo: row.body && row.body.value }));
}
`;

async function writeModelFolder(
  dir: string,
  model: Record<string, string>,
  files: Record<string, string>,
): Promise<void> {
  await mkdir(join(dir, 'MAR-INF'), { recursive: true });
  for (const [name, content] of Object.entries(files)) await writeFile(join(dir, name), content);
  await writeFile(
    join(dir, 'MAR-INF', 'MANIFEST.json'),
    JSON.stringify({
      createdOn: '01/01/2025 00:00:00',
      runtime: 'python',
      model: { modelVersion: '1.0', ...model },
      archiverVersion: '0.12.0',
    }),
  );
}

export interface RealServer {
  url: string;
  managementUrl: string;
  /** The server's key_file.json (token authorization is on). */
  keyFile: string;
  /** A JPEG the `tiny` image classifier takes. */
  imagePath: string;
  /** The sleepy model's job queue size. */
  jobQueueSize: number;
  managementKey(): Promise<string>;
  /** Resolves once a worker of `model` is BUSY (describe, polled): a blocking request has reached it. */
  waitUntilBusy(model: string): Promise<void>;
  stop(): Promise<void>;
}

/**
 * `serve --foreground` as a user runs it, on 127.0.0.1 with token authorization on, serving
 * `sleepy` (custom handler, 1 worker, batch 1, a job queue of 2) and `tiny` (image_classifier).
 * Resolves once the server prints that it is ready.
 */
export async function startRealServer(): Promise<RealServer> {
  const cwd = await mkdtemp(join(tmpdir(), 'marina-client-'));
  const store = join(cwd, 'store');
  const jobQueueSize = 2;
  await writeModelFolder(
    join(store, 'sleepy'),
    { modelName: 'sleepy', handler: 'sleepy_handler.mjs', configFile: 'model-config.yaml' },
    {
      'sleepy_handler.mjs': sleepyHandlerSource,
      'model-config.yaml': `minWorkers: 1\nmaxWorkers: 1\nbatchSize: 1\njobQueueSize: ${jobQueueSize}\n`,
    },
  );
  await mkdir(join(store, 'tiny'), { recursive: true });
  await writeTinyClassifier({ outputPath: join(store, 'tiny', 'model.onnx'), inputSize: 32, numClasses: 10 });
  await writeModelFolder(
    join(store, 'tiny'),
    { modelName: 'tiny', handler: 'image_classifier', serializedFile: 'model.onnx' },
    {},
  );
  const imagePath = join(cwd, 'sample.jpg');
  await writeSampleJpeg({ outputPath: imagePath, width: 64, height: 48 });
  await mkdir(join(cwd, 'tmp'));
  const config = join(cwd, 'config.properties');
  await writeFile(
    config,
    'inference_address=http://127.0.0.1:0\nmanagement_address=http://127.0.0.1:0\ngrpc_inference_port=0\ngrpc_management_port=0\nenable_metrics_api=false\n',
  );
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    TMPDIR: join(cwd, 'tmp'),
    TS_CONFIG_FILE: config,
    LOG_LOCATION: join(cwd, 'logs'),
    MARINA_NO_REEXEC: '1',
  };
  const child: ChildProcessWithoutNullStreams = spawn(
    process.execPath,
    [SERVE_BIN, '--foreground', '--ncs', '--model-store', 'store', '--models', 'all'],
    { cwd, env },
  );
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  try {
    await new Promise<void>((resolve, reject) => {
      const check = () => (output.includes('Marina is ready.') ? resolve() : undefined);
      child.stdout.on('data', check);
      void exited.then(() => reject(new Error(`serve exited before it was ready:\n${output}`)));
    });
  } catch (error) {
    await rm(cwd, { recursive: true, force: true });
    throw error;
  }
  const url = /Inference API bound to (\S+)/.exec(output)![1]!;
  const managementUrl = /Management API bound to (\S+)/.exec(output)![1]!;
  const keyFile = join(cwd, 'key_file.json');
  const managementKey = async () =>
    (JSON.parse(await readFile(keyFile, 'utf8')) as { management: { key: string } }).management.key;
  return {
    url,
    managementUrl,
    keyFile,
    imagePath,
    jobQueueSize,
    managementKey,
    async waitUntilBusy(model: string) {
      const headers = { authorization: `Bearer ${await managementKey()}` };
      for (;;) {
        const [description] = (await (await fetch(`${managementUrl}/models/${model}`, { headers })).json()) as Array<{
          workers: Array<{ status: string }>;
        }>;
        if (description?.workers.some((w) => w.status === 'BUSY')) return;
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    },
    async stop() {
      if (child.exitCode === null && child.signalCode === null) {
        // SIGKILL: a test may leave a long blocking request in the worker, and draining would wait for it.
        child.kill('SIGKILL');
        await exited;
      }
      await rm(cwd, { recursive: true, force: true });
    },
  };
}
