/**
 * TorchServe's classic tutorial, as a user runs it: archive a ResNet with image_classifier,
 * write the three config.properties variants from examples/resnet-152 (one worker; batchSize 8 /
 * maxBatchDelay 100 / responseTimeout 200; two workers with number_of_netty_threads and
 * OMP_NUM_THREADS), `serve --start --disable-token-auth --enable-model-api --ts-config ...`,
 * then 100 concurrent clients POST a JPEG as application/octet-stream: every one gets its top-5.
 * ResNet-18 stands in for ResNet-152 to keep CI fast; the flow and the code paths are the same.
 */
import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadImagenetClassNames, writeIndexToName, writeResnet, writeSampleJpeg } from '@marina/model-zoo';
import { bins, freePort, makeTempDir, repoRoot, runCli } from './helpers.ts';

const MODEL = 'resnet-18';
let workDir: string;
let image: Buffer;
let labels: Set<string>;

beforeAll(async () => {
  workDir = makeTempDir('tutorial');
  await writeResnet({ depth: 18, outputPath: path.join(workDir, `${MODEL}.onnx`) });
  const names = await loadImagenetClassNames();
  labels = new Set(names.map((n) => n.split(',')[0]!.trim()));
  await writeIndexToName(path.join(workDir, 'index_to_name.json'), names);
  await writeSampleJpeg({ outputPath: path.join(workDir, 'kitten.jpg') });
  image = readFileSync(path.join(workDir, 'kitten.jpg'));
  const archived = await runCli(
    bins.modelArchiver,
    [
      '--model-name',
      MODEL,
      '--serialized-file',
      `${MODEL}.onnx`,
      '--handler',
      'image_classifier',
      '--extra-files',
      'index_to_name.json',
      '--version',
      '1.0',
      '--export-path',
      'model_store',
    ],
    { cwd: workDir },
  );
  expect(archived.stderr + archived.stdout).not.toMatch(/MARINA_ERR/);
  expect(archived.code).toBe(0);
}, 120_000);

afterAll(async () => {
  await runCli(bins.serve, ['--stop'], { cwd: workDir, env: { ...process.env, TMPDIR: workDir } });
  rmSync(workDir, { recursive: true, force: true });
});

/** Copies an example config, pointing it at this test's model and free ports. */
async function writeVariant(file: string): Promise<{ configPath: string; inferencePort: number }> {
  const [inferencePort, managementPort, metricsPort] = [await freePort(), await freePort(), await freePort()];
  const text = readFileSync(path.join(repoRoot, 'examples/resnet-152', file), 'utf8')
    .replaceAll('resnet-152', MODEL)
    .replace('127.0.0.1:8080', `127.0.0.1:${inferencePort}`)
    .replace('127.0.0.1:8081', `127.0.0.1:${managementPort}`)
    .replace('127.0.0.1:8082', `127.0.0.1:${metricsPort}`)
    .concat('\ngrpc_inference_port=0\ngrpc_management_port=0\n');
  const configPath = path.join(workDir, file);
  writeFileSync(configPath, text);
  return { configPath, inferencePort };
}

describe.each([
  { file: 'config.properties', env: {} },
  { file: 'config-batch.properties', env: {} },
  { file: 'config-workers.properties', env: { OMP_NUM_THREADS: '1' } },
])('the tutorial with $file', ({ file, env }) => {
  it('answers 100 concurrent clients, each with its own top-5', async () => {
    const { configPath, inferencePort } = await writeVariant(file);
    const serveEnv = { ...process.env, ...env, TMPDIR: workDir };
    const started = await runCli(
      bins.serve,
      ['--start', '--disable-token-auth', '--enable-model-api', '--ts-config', configPath],
      { cwd: workDir, env: serveEnv },
    );
    expect(started.code, started.stderr + started.stdout).toBe(0);
    try {
      const url = `http://127.0.0.1:${inferencePort}/predictions/${MODEL}`;
      const responses = await Promise.all(
        Array.from({ length: 100 }, async () => {
          const response = await fetch(url, {
            method: 'POST',
            headers: { 'content-type': 'application/octet-stream' },
            body: new Uint8Array(image),
          });
          return { status: response.status, body: await response.text() };
        }),
      );
      for (const { status, body } of responses) {
        expect(status, body).toBe(200);
        const top5 = JSON.parse(body) as Record<string, number>;
        const entries = Object.entries(top5);
        expect(entries).toHaveLength(5);
        for (const [label, probability] of entries) {
          expect(labels.has(label), `label '${label}' is an ImageNet class name`).toBe(true);
          expect(probability).toBeGreaterThan(0);
          expect(probability).toBeLessThanOrEqual(1);
        }
        const probabilities = entries.map(([, p]) => p);
        expect([...probabilities].sort((a, b) => b - a)).toEqual(probabilities);
      }
      // The same image through the same model gives the same answer to every client.
      expect(new Set(responses.map((r) => JSON.stringify(Object.keys(JSON.parse(r.body))))).size).toBe(1);
    } finally {
      const stopped = await runCli(bins.serve, ['--stop'], { cwd: workDir, env: serveEnv });
      expect(stopped.code, stopped.stderr + stopped.stdout).toBe(0);
    }
  }, 180_000);
});

it('leaves no key file or pid file behind after --stop', () => {
  expect(existsSync(path.join(workDir, '.marina_server.pid'))).toBe(false);
});
