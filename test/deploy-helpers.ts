/** Helpers for the deployment tests: a real `serve --foreground` process and a model whose requests wait for a gate. */
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import path from 'node:path';
import { bins, freePort } from './helpers.ts';

/**
 * A custom handler whose requests each wait until the file named in their body (`gate`) exists,
 * so a test decides when in-flight requests finish instead of guessing how long they take.
 * Requests without a gate answer at once. Atomics.wait sleeps the worker thread between checks.
 */
const gatedHandlerSource = `
import { existsSync } from 'node:fs';
const nap = new Int32Array(new SharedArrayBuffer(4));
export function handle(data, context) {
  for (const row of data) {
    const gate = row.body && row.body.gate;
    while (gate && !existsSync(gate)) Atomics.wait(nap, 0, 0, 5);
  }
  return data.map((row, i) => ({ pid: process.pid, value: row.body && row.body.value, requestId: context.requestIds[i] }));
}
`;

/** Writes the gated model as an unpacked archive folder `<store>/gated`. */
export function writeGatedModel(store: string, modelConfigYaml = 'minWorkers: 1\nmaxWorkers: 1\n'): void {
  const dir = path.join(store, 'gated');
  mkdirSync(path.join(dir, 'MAR-INF'), { recursive: true });
  writeFileSync(
    path.join(dir, 'MAR-INF', 'MANIFEST.json'),
    JSON.stringify({
      runtime: 'python',
      model: { modelName: 'gated', modelVersion: '1.0', handler: 'gated_handler.mjs', configFile: 'model-config.yaml' },
    }),
  );
  writeFileSync(path.join(dir, 'gated_handler.mjs'), gatedHandlerSource);
  writeFileSync(path.join(dir, 'model-config.yaml'), modelConfigYaml);
}

export interface ForegroundServer {
  child: ChildProcessWithoutNullStreams;
  cwd: string;
  output: () => string;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  inferenceUrl: string;
  managementUrl: string;
  metricsUrl: string;
  /** The keys of key_file.json (token authorization is on). */
  keys: { inference: string; management: string };
  /** Resolves once the output contains `text`. */
  waitForOutput: (text: string) => Promise<void>;
}

/**
 * Starts `serve --foreground` (the repository's bin) in `cwd` with token authorization on (the
 * default), every API on a free loopback port, serving the model store `store`. Resolves once it
 * prints that it is ready.
 */
export async function startForegroundServer(
  cwd: string,
  options: { store: string; extraConfig?: string[]; env?: Record<string, string> },
): Promise<ForegroundServer> {
  mkdirSync(path.join(cwd, 'tmp'), { recursive: true });
  const config = path.join(cwd, 'config.properties');
  writeFileSync(
    config,
    [
      `inference_address=http://127.0.0.1:${await freePort()}`,
      `management_address=http://127.0.0.1:${await freePort()}`,
      `metrics_address=http://127.0.0.1:${await freePort()}`,
      'grpc_inference_port=0',
      'grpc_management_port=0',
      `model_store=${options.store}`,
      'load_models=all',
      ...(options.extraConfig ?? []),
      '',
    ].join('\n'),
  );
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    TMPDIR: path.join(cwd, 'tmp'),
    LOG_LOCATION: path.join(cwd, 'logs'),
    ...options.env,
  };
  delete env.TS_CONFIG_FILE;
  const child = spawn(process.execPath, [bins.serve, '--foreground', '--ncs', '--ts-config', config], { cwd, env });
  let output = '';
  const waiters: Array<() => void> = [];
  const onData = (chunk: Buffer) => {
    output += chunk.toString();
    for (const check of [...waiters]) check();
  };
  child.stdout.on('data', onData);
  child.stderr.on('data', onData);
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.on('exit', (code, signal) => resolve({ code, signal })),
  );
  const waitForOutput = (text: string) =>
    new Promise<void>((resolve, reject) => {
      const check = () => {
        if (!output.includes(text)) return;
        waiters.splice(waiters.indexOf(check), 1);
        resolve();
      };
      waiters.push(check);
      check();
      void exited.then(({ code, signal }) =>
        reject(new Error(`serve exited (${code ?? signal}) before printing '${text}':\n${output}`)),
      );
    });
  await waitForOutput('Marina is ready.');
  const bound = (api: string) => new RegExp(`^${api} API bound to (\\S+)`, 'm').exec(output)![1]!;
  const keyFilePath = /keys in (\S+)\.$/m.exec(output)![1]!;
  const keyFile = JSON.parse(readFileSync(keyFilePath, 'utf8')) as {
    inference: { key: string };
    management: { key: string };
  };
  return {
    child,
    cwd,
    output: () => output,
    exited,
    waitForOutput,
    inferenceUrl: bound('Inference'),
    managementUrl: bound('Management'),
    metricsUrl: bound('Metrics'),
    keys: { inference: keyFile.inference.key, management: keyFile.management.key },
  };
}

/** A GET on a new connection (no keep-alive pool): its status, or the connection error's code (e.g. ECONNREFUSED). */
export function getOnNewConnection(url: string, headers: Record<string, string> = {}): Promise<number | string> {
  return new Promise((resolve) => {
    const req = request(url, { agent: false, headers }, (response) => {
      response.resume();
      response.on('end', () => resolve(response.statusCode ?? 0));
    });
    req.on('error', (error: NodeJS.ErrnoException) => resolve(error.code ?? error.message));
    req.end();
  });
}
