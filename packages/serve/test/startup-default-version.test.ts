import { join } from 'node:path';
import { afterEach, expect, it } from 'vitest';
import { writeTinyTensorModel } from '@marina/model-zoo';
import { buildApp, type MarinaApp } from '../src/app.ts';
import { tempDir, testConfig, writeModelFolder } from './helpers.ts';

let app: MarinaApp | undefined;
let cleanup: (() => Promise<void>) | undefined;
afterEach(async () => {
  await app?.close();
  await cleanup?.();
});

it('makes the models JSON defaultVersion the default for models loaded at start-up (TorchServe ignores it)', async () => {
  const dir = await tempDir();
  cleanup = dir.cleanup;
  const store = join(dir.path, 'store');
  for (const version of ['1.0', '2.0']) {
    await writeModelFolder({
      dir: join(store, `adder-${version}`),
      modelName: 'adder',
      modelVersion: version,
      handler: 'tensor',
      writeModel: (p) => writeTinyTensorModel({ outputPath: p }),
    });
  }
  app = await buildApp(
    testConfig(
      {
        modelStore: store,
        loadModels: [{ url: 'adder-1.0' }, { url: 'adder-2.0' }],
        models: { adder: { '1.0': { minWorkers: 1 }, '2.0': { minWorkers: 1, defaultVersion: true } } },
      },
      dir.path,
    ),
  );
  const { loaded, failed } = await app.loadStartupModels();
  expect(failed).toEqual([]);
  expect(loaded).toHaveLength(2);
  const [described] = app.registry.describe('adder');
  expect(described?.modelVersion).toBe('2.0');
  expect(app.registry.list().find((m) => m.modelName === 'adder')?.defaultVersion).toBe('2.0');
});
