import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { validateArchive } from '../src/index.ts';
import { makeTempDir, manifestText, writeFiles, zipFolder } from '../test-support/fixtures.ts';

let dir: string;
let cleanup: () => Promise<void>;
beforeEach(async () => ({ dir, cleanup } = await makeTempDir()));
afterEach(() => cleanup());

async function archiveWithHandler(files: Record<string, string>): Promise<string> {
  await writeFiles(join(dir, 'src'), {
    'MAR-INF/MANIFEST.json': manifestText({ handler: 'handler.mjs', serializedFile: undefined }),
    ...files,
  });
  await zipFolder(join(dir, 'src'), join(dir, 'custom.mar'));
  return join(dir, 'custom.mar');
}

describe('custom handlers resolve bare imports from an extracted archive', () => {
  it('accepts a handler importing sharp and onnxruntime-node although the archive has no node_modules', async () => {
    const archive = await archiveWithHandler({
      'handler.mjs':
        "import sharp from 'sharp';\nimport { InferenceSession } from 'onnxruntime-node';\nexport function handle(data) { return data.map(() => [typeof sharp, typeof InferenceSession]); }\n",
    });
    const report = await validateArchive(archive, { isModelLoadChecked: false });
    expect(report.problems.filter((p) => p.severity === 'error')).toEqual([]);
  });

  it('prefers a package the archive ships in its own node_modules', async () => {
    const archive = await archiveWithHandler({
      'node_modules/sharp/package.json': JSON.stringify({ name: 'sharp', type: 'module', exports: './index.js' }),
      'node_modules/sharp/index.js': "export default 'bundled';\n",
      'handler.mjs':
        "import sharp from 'sharp';\nif (sharp !== 'bundled') throw new Error(`got the fallback sharp`);\nexport function handle(data) { return data; }\n",
    });
    const report = await validateArchive(archive, { isModelLoadChecked: false });
    expect(report.problems.filter((p) => p.severity === 'error')).toEqual([]);
  });

  it('reports a package nobody provides as an import failure that says what a handler can import', async () => {
    const archive = await archiveWithHandler({
      'handler.mjs':
        "import left from 'left-pad-not-installed';\nexport function handle(data) { return data.map(left); }\n",
    });
    const report = await validateArchive(archive, { isModelLoadChecked: false });
    expect(report.problems.filter((p) => p.severity === 'error')).toEqual([
      expect.objectContaining({
        code: 'MARINA_ERR_HANDLER_IMPORT_FAILED',
        file: 'handler.mjs',
        message: expect.stringMatching(/left-pad-not-installed.*sharp and onnxruntime-node/s),
      }),
    ]);
  });
});
