import { mkdir, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import type { ProfileResult } from './profile-model.ts';
import { renderProfileSvg } from './render-profile.ts';

export interface ProfileFiles {
  chartPath: string;
  jsonPath: string;
  tracePath: string;
}

/** Writes chart.svg, profile.json and (when the result kept it) onnxruntime's raw trace.json into `outDir` (created). */
export async function writeProfileReports(
  result: ProfileResult,
  options: { outDir: string; top?: number },
): Promise<ProfileFiles> {
  const outDir = resolve(options.outDir);
  await mkdir(outDir, { recursive: true });
  const files = {
    chartPath: join(outDir, 'chart.svg'),
    jsonPath: join(outDir, 'profile.json'),
    tracePath: join(outDir, 'trace.json'),
  };
  const { traceText, ...rest } = result;
  await writeFile(files.chartPath, renderProfileSvg(rest, { top: Math.max(options.top ?? 10, 15) }));
  await writeFile(files.jsonPath, `${JSON.stringify(rest, null, 2)}\n`);
  if (traceText !== undefined) await writeFile(files.tracePath, traceText);
  return files;
}
