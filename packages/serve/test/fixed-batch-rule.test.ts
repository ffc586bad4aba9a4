import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { validateArchive } from '@marina/archive';
import { writeSampleJpeg, writeTinyClassifier } from '@marina/model-zoo';
import { readFile } from 'node:fs/promises';
import { ModelRegistry } from '../src/registry/model-registry.ts';
import { tempDir, testConfig, writeModelFolder } from './helpers.ts';

describe('one rule for a fixed batch dimension, in validate and serve', () => {
  let dir: { path: string; cleanup: () => Promise<void> };
  let registry: ModelRegistry;
  const logs: Array<{ level: string; message: string }> = [];
  let folder: string;

  beforeAll(async () => {
    dir = await tempDir();
    folder = await writeModelFolder({
      dir: join(dir.path, 'fixed'),
      modelName: 'fixed',
      handler: 'image_classifier',
      writeModel: (path) => writeTinyClassifier({ outputPath: path, numClasses: 3, fixedBatch: 1 }),
      modelConfigYaml: 'batchSize: 4\nmaxBatchDelay: 200\n',
      files: { 'index_to_name.json': JSON.stringify({ 0: 'a', 1: 'b', 2: 'c' }) },
    });
    registry = new ModelRegistry({
      config: testConfig({}, dir.path),
      log: (level, message) => logs.push({ level, message }),
    });
  });

  afterAll(async () => {
    await registry?.close();
    await dir?.cleanup();
  });

  it('serve registers the model with batchSize 4, logs the warning validate reports, and answers every request of a batch', async () => {
    const report = await validateArchive(folder);
    expect(report.isValid).toBe(true);
    const [problem] = report.problems;
    expect(problem).toMatchObject({ code: 'MARINA_ERR_MODEL_BATCH_NOT_DYNAMIC', severity: 'warning' });

    await registry.register({ url: 'fixed', archivePath: folder, synchronous: true });
    expect(logs.filter((l) => l.level === 'warn')).toEqual([
      {
        level: 'warn',
        message: `model 'fixed' version '1.0': MARINA_ERR_MODEL_BATCH_NOT_DYNAMIC: ${problem!.message}`,
      },
    ]);

    await writeSampleJpeg({ outputPath: join(dir.path, 'sample.jpg'), width: 64, height: 48 });
    const jpeg = await readFile(join(dir.path, 'sample.jpg'));
    const answers = await Promise.all(
      [0, 1, 2, 3].map((i) =>
        registry.predict({ modelName: 'fixed', requestId: `r${i}`, input: { body: jpeg }, headers: {} }),
      ),
    );
    for (const answer of answers) expect(answer.statusCode).toBe(200);
    const bodies = answers.map((a) => JSON.parse(a.body.toString('utf8')) as Record<string, number>);
    for (const body of bodies) expect(Object.keys(body).sort()).toEqual(['a', 'b', 'c']);
    // The same image gives the same answer whichever slot of the batch it ran in.
    for (const body of bodies) expect(body).toEqual(bodies[0]);
  });
});
