import { mkdir, writeFile } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { defaultCacheDir } from '../model-assets.ts';
import { defaultServeBin } from '../run-bench.ts';
import type { QuantizeBenchModelName } from './quantize-models.ts';
import { formatQuantizeReport, runQuantizeBench, type QuantizeBenchResult } from './run-quantize-bench.ts';

function defaultModelArchiverBin(): string {
  const packageDir = dirname(dirname(dirname(fileURLToPath(import.meta.url))));
  return join(packageDir, 'node_modules', '@marina', 'model-archiver', 'bin', 'model-archiver.js');
}

/** `marina-bench quantize`: runs the quantize experiment and writes quantize-report.md and quantize-result.json. */
export async function runQuantizeCommand(options: {
  models?: QuantizeBenchModelName[];
  rounds: number;
  requests: number;
  cacheDir?: string;
  out?: string;
  serveBin?: string;
  isReusingArchives?: boolean;
  onProgress?: (message: string) => void;
}): Promise<{ report: string; outDir: string }> {
  const base = process.env.INIT_CWD ?? process.cwd();
  const outDir = resolve(
    options.out ?? join(base, 'bench-results', `quantize-${new Date().toISOString().replace(/[:.]/g, '-')}`),
  );
  await mkdir(outDir, { recursive: true });
  const write = async (result: QuantizeBenchResult): Promise<string> => {
    const report = formatQuantizeReport(result);
    await writeFile(join(outDir, 'quantize-report.md'), report);
    await writeFile(join(outDir, 'quantize-result.json'), `${JSON.stringify(result, null, 2)}\n`);
    return report;
  };
  const result = await runQuantizeBench({
    ...(options.models ? { models: options.models } : {}),
    cacheDir: options.cacheDir ?? defaultCacheDir(),
    workDir: join(outDir, 'servers'),
    serveBin: resolve(options.serveBin ?? process.env.MARINA_SERVE_BIN ?? defaultServeBin()),
    modelArchiverBin: defaultModelArchiverBin(),
    rounds: options.rounds,
    ...(options.isReusingArchives ? { isReusingArchives: true } : {}),
    requestsPerRound: options.requests,
    ...(options.onProgress ? { onProgress: options.onProgress } : {}),
    onModelDone: async (partial) => {
      await write(partial);
    },
  });
  return { report: await write(result), outDir };
}
