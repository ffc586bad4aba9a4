import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { configFromProperties } from '../src/config/load-config.ts';
import type { ServerConfig } from '../src/config/server-config.ts';

/** A ServerConfig with TorchServe's defaults, for tests; nothing listens. */
export function testConfig(overrides: Partial<ServerConfig> = {}, root = tmpdir()): ServerConfig {
  const address = (port: number) => ({
    protocol: 'http' as const,
    host: '127.0.0.1',
    port,
    raw: `http://127.0.0.1:${port}`,
  });
  return {
    inferenceAddress: address(0),
    managementAddress: address(1),
    metricsAddress: address(2),
    modelStore: undefined,
    loadModels: [],
    models: {},
    defaultWorkersPerModel: undefined,
    jobQueueSize: 100,
    numberOfNettyThreads: 0,
    defaultResponseTimeoutSec: 120,
    defaultStartupTimeoutSec: 120,
    maxRequestBytes: 6553500,
    maxResponseBytes: 6553500,
    allowedUrls: [],
    isAllowedUrlsDefault: false,
    disableTokenAuthorization: true,
    enableModelApi: true,
    strictParameters: false,
    snapshotSkipMissingArchives: false,
    tokenFailureStatus: 401,
    pingRequiresToken: false,
    enableMetricsApi: true,
    tokenExpirationMin: 60,
    keyFilePath: join(root, 'key_file.json'),
    ompNumThreads: undefined,
    cpuCount: 2,
    extractionCacheDir: join(root, 'cache'),
    snapshotDir: join(root, 'config'),
    isSnapshotEnabled: false,
    logDir: join(root, 'logs'),
    metricsMode: 'prometheus',
    corsAllowedOrigin: undefined,
    corsAllowedMethods: undefined,
    corsAllowedHeaders: undefined,
    limitMaxImagePixels: true,
    unknownKeys: [],
    warnings: [],
    ...overrides,
  };
}

export async function tempDir(prefix = 'marina-serve-'): Promise<{ path: string; cleanup: () => Promise<void> }> {
  const path = await mkdtemp(join(tmpdir(), prefix));
  return { path, cleanup: () => rm(path, { recursive: true, force: true }) };
}

/**
 * Writes a folder archive (a folder with MAR-INF/MANIFEST.json is a valid archive):
 * `files` are written at its root; `modelConfig` becomes model-config.yaml.
 */
export async function writeModelFolder(options: {
  dir: string;
  modelName: string;
  modelVersion?: string;
  handler: string;
  serializedFile?: string;
  modelConfigYaml?: string;
  files?: Record<string, string | Buffer>;
  writeModel?: (path: string) => Promise<unknown>;
}): Promise<string> {
  const { dir } = options;
  await mkdir(join(dir, 'MAR-INF'), { recursive: true });
  const model: Record<string, string> = {
    modelName: options.modelName,
    modelVersion: options.modelVersion ?? '1.0',
    handler: options.handler,
  };
  if (options.writeModel) {
    model.serializedFile = options.serializedFile ?? 'model.onnx';
    await options.writeModel(join(dir, model.serializedFile));
  }
  if (options.modelConfigYaml !== undefined) {
    model.configFile = 'model-config.yaml';
    await writeFile(join(dir, 'model-config.yaml'), options.modelConfigYaml);
  }
  for (const [name, content] of Object.entries(options.files ?? {})) await writeFile(join(dir, name), content);
  await writeFile(
    join(dir, 'MAR-INF', 'MANIFEST.json'),
    JSON.stringify({ createdOn: '01/01/2025 00:00:00', runtime: 'python', model, archiverVersion: '0.12.0' }, null, 2),
  );
  return dir;
}

/**
 * A configuration as config.properties would give it, with every API (HTTP and gRPC) on
 * 127.0.0.1:0 and token authorization off; `properties` add keys or override these.
 */
export function loopbackConfig(cwd: string, properties: Record<string, string> = {}): ServerConfig {
  return configFromProperties(
    {
      inference_address: 'http://127.0.0.1:0',
      management_address: 'http://127.0.0.1:0',
      metrics_address: 'http://127.0.0.1:0',
      grpc_inference_port: '0',
      grpc_management_port: '0',
      disable_token_authorization: 'true',
      ...properties,
    },
    { cwd },
  );
}
