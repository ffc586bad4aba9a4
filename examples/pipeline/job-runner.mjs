// A pipeline job: classify every JPEG in a folder through one Marina server, at most N requests in flight.
// Usage: node job-runner.mjs <image-folder> [model=resnet-18] [concurrency=4]
// The server's address and key come from MARINA_URL and MARINA_KEY_FILE (or MARINA_TOKEN).
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { createMarinaClient } from '@marina/client';

const [folder, model = 'resnet-18', concurrency = '4'] = process.argv.slice(2);
const files = (await readdir(folder)).filter((f) => /\.jpe?g$/i.test(f)).sort();
let retries = 0;
const client = createMarinaClient({ onRetry: () => (retries += 1) });

// An async generator reads each image only when a slot is free: `concurrency` images in memory at most.
async function* images() {
  for (const f of files) yield await readFile(join(folder, f));
}

const started = performance.now();
const outcomes = await client.predictMany(model, images(), { concurrency: Number(concurrency), settle: true });
const seconds = (performance.now() - started) / 1000;
const failed = outcomes.flatMap((o, i) => (o.ok ? [] : [`${files[i]}: ${o.error.code} ${o.error.message}`]));
const first = outcomes.find((o) => o.ok);
console.log(
  `${files.length} images, ${files.length - failed.length} classified, ${failed.length} failed, ${retries} retries, in ${seconds.toFixed(1)} s (${(files.length / seconds).toFixed(1)} images/s)`,
);
if (first) console.log(`${files[outcomes.indexOf(first)]}: ${JSON.stringify(first.value)}`);
for (const line of failed.slice(0, 5)) console.log(line);
process.exitCode = failed.length > 0 ? 1 : 0;
