#!/usr/bin/env node
// The main job, end to end, as a user would run it by hand (README, "Quick start"):
// generate the example ResNet-152, archive it, validate it, serve it, classify an image, stop.
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const example = join(root, 'examples', 'resnet-152');
const bin = (name) => join(root, 'node_modules', '.bin', name);
const model = process.env.MARINA_DEMO_MODEL ?? 'resnet-152';

function step(title, command, args, options = {}) {
  console.log(`\n$ ${[command.replace(`${root}/`, ''), ...args].join(' ')}    # ${title}`);
  const result = spawnSync(command, args, { stdio: 'inherit', cwd: example, ...options });
  if (result.status !== 0) {
    console.error(`\ndemo: '${title}' failed (exit ${result.status ?? result.signal}).`);
    if (options.onFail) options.onFail();
    process.exit(1);
  }
}

const stopServer = () => spawnSync(bin('serve'), ['--stop'], { stdio: 'inherit', cwd: example });

step('generate the example model (seeded weights, no download)', bin('marina-models'), [
  'generate',
  '--out',
  'generated',
  '--models',
  model,
]);
step('archive it', bin('model-archiver'), [
  '--model-name',
  model,
  '--version',
  '1.0',
  '--serialized-file',
  `generated/${model}.onnx`,
  '--handler',
  'image_classifier',
  '--extra-files',
  'generated/index_to_name.json',
  '--export-path',
  'model_store',
  '--force',
]);
step('validate it', bin('model-archiver'), ['validate', `model_store/${model}.mar`]);
step('serve it (background; token authorization on)', bin('serve'), ['--start', '--ts-config', 'config.properties']);

try {
  const keyFile = join(example, 'key_file.json');
  const headers = { 'content-type': 'application/octet-stream' };
  if (existsSync(keyFile)) headers.authorization = `Bearer ${JSON.parse(readFileSync(keyFile, 'utf8')).inference.key}`;
  const image = readFileSync(join(example, 'generated', 'kitten.jpg'));
  console.log(
    `\n$ curl -H "Authorization: Bearer <inference key from key_file.json>" -T generated/kitten.jpg http://127.0.0.1:8080/predictions/${model}`,
  );
  const response = await fetch(`http://127.0.0.1:8080/predictions/${model}`, { method: 'POST', headers, body: image });
  const text = await response.text();
  console.log(`HTTP ${response.status}\n${text}`);
  if (response.status !== 200) throw new Error(`prediction failed with HTTP ${response.status}`);
  console.log('(the weights are seeded random, so the labels are arbitrary; the pipeline is the real one)');
} catch (error) {
  console.error(`demo: ${error.message}`);
  stopServer();
  process.exit(1);
}
step('stop the server', bin('serve'), ['--stop']);
console.log('\ndemo: done.');
