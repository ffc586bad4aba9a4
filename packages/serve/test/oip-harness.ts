/**
 * A real server for the protocol tests: token authorization on, REST on 127.0.0.1:0, both gRPC
 * listeners on free loopback ports, and a store with
 * - `mixed`: the mixed-types model (every datatype, a rank-0 input) with the tensor handler;
 * - `classifier`: the tiny image classifier with image_classifier (batchSize 4);
 * - `gate`: a custom handler that reports each request's batch size and protocol, and holds its
 *   batch while a request's `gate` file does not exist (so tests can queue requests behind it).
 */
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { writeMixedTypesModel } from '@marina/model-zoo';
import { buildApp, type MarinaApp } from '../src/app.ts';
import { configFromProperties } from '../src/config/load-config.ts';
import type { ServerConfig } from '../src/config/server-config.ts';
import { createServerPlugins, type OperatorContext } from '../src/server-plugins.ts';
import { startGrpcServers, type GrpcServers } from '../src/protocols/grpc-server.ts';
import { writeClassifierModel } from './fixtures.ts';
import { tempDir, writeModelFolder } from './helpers.ts';

const gateHandlerSource = `
import { existsSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
export async function handle(data, context) {
  for (const row of data) {
    const body = row.body;
    const gate = body && typeof body === 'object' && !(body instanceof Uint8Array) ? body.gate : undefined;
    if (gate) while (!existsSync(gate)) await sleep(5);
  }
  return data.map((row, i) => ({
    batchSize: data.length,
    protocol: context.getRequestHeader(i, 'inference-header-content-length') !== undefined ? 'v2' : row.data !== undefined ? 'torchserve-grpc' : 'torchserve-rest',
  }));
}
`;

export interface OipServer {
  app: MarinaApp;
  config: ServerConfig;
  grpc: GrpcServers;
  /** http://127.0.0.1:port */
  rest: string;
  keys: { inference: string; management: string };
  root: string;
  close(): Promise<void>;
}

export async function startOipServer(properties: Record<string, string> = {}): Promise<OipServer> {
  const dir = await tempDir('marina-oip-');
  const store = join(dir.path, 'store');
  await writeModelFolder({
    dir: join(store, 'mixed'),
    modelName: 'mixed',
    handler: 'tensor',
    writeModel: (path) => writeMixedTypesModel({ outputPath: path }),
    modelConfigYaml: 'minWorkers: 1\n',
  });
  await writeClassifierModel(store, 'classifier', {
    modelConfigYaml: 'minWorkers: 1\nbatchSize: 4\nmaxBatchDelay: 60000\n',
  });
  await writeModelFolder({
    dir: join(store, 'gate'),
    modelName: 'gate',
    handler: 'gate_handler.mjs',
    modelConfigYaml: 'minWorkers: 1\nbatchSize: 4\nmaxBatchDelay: 60000\n',
    files: { 'gate_handler.mjs': gateHandlerSource },
  });
  const config = {
    ...configFromProperties(
      {
        inference_address: 'http://127.0.0.1:0',
        management_address: 'http://127.0.0.1:0',
        metrics_address: 'http://127.0.0.1:0',
        grpc_inference_port: '0',
        grpc_management_port: '0',
        enable_metrics_api: 'false',
        enable_model_api: 'true',
        model_store: store,
        load_models: 'all',
        allowed_urls: 'file:///nowhere/.*',
        ...properties,
      },
      { cwd: dir.path },
    ),
    extractionCacheDir: join(dir.path, 'cache'),
  };
  const operator: OperatorContext = {};
  const app = await buildApp(config, { plugins: await createServerPlugins(config, operator) });
  let grpcServers: GrpcServers | undefined;
  try {
    const loaded = await app.loadStartupModels();
    if (loaded.failed.length > 0)
      throw new Error(`models failed to load: ${loaded.failed.map((f) => f.error.message).join('; ')}`);
    await app.inference.listen({ host: '127.0.0.1', port: 0 });
    grpcServers = await startGrpcServers({
      config,
      grpc: config.grpc!,
      dataPlane: app.dataPlane,
      management: app.management,
      tokens: operator.tokens,
    });
  } catch (error) {
    await app.close();
    await dir.cleanup();
    throw error;
  }
  const address = app.inference.server.address() as { port: number };
  const keyFile = JSON.parse(await readFile(config.keyFilePath, 'utf8')) as {
    inference: { key: string };
    management: { key: string };
  };
  const grpcs = grpcServers;
  return {
    app,
    config,
    grpc: grpcs,
    rest: `http://127.0.0.1:${address.port}`,
    keys: { inference: keyFile.inference.key, management: keyFile.management.key },
    root: dir.path,
    async close() {
      const appClosed = app.close();
      await Promise.all([grpcs.close({ drained: appClosed }), appClosed]);
      await dir.cleanup();
    },
  };
}

/** The client side: proto-loader with its usual options, straight from the .proto files in the repository (copies of the shared ones). */
const PROTOS = new URL('../protos/', import.meta.url).pathname;
export function clientPackage(file: string): grpc.GrpcObject {
  return grpc.loadPackageDefinition(
    protoLoader.loadSync(join(PROTOS, file), {
      keepCase: true,
      longs: String,
      enums: String,
      defaults: true,
      oneofs: true,
      includeDirs: [PROTOS],
    }),
  );
}

type Client = grpc.Client & Record<string, (...args: unknown[]) => unknown>;

export function grpcClient(pkg: grpc.GrpcObject, service: string, target: string): Client {
  let node: unknown = pkg;
  for (const part of service.split('.')) node = (node as Record<string, unknown>)[part];
  const Ctor = node as new (target: string, credentials: grpc.ChannelCredentials) => Client;
  return new Ctor(target, grpc.credentials.createInsecure());
}

/** Calls a unary method; resolves with the answer or rejects with the ServiceError. */
export function unaryCall<T = any>(client: Client, method: string, request: unknown, token?: string): Promise<T> {
  const metadata = new grpc.Metadata();
  if (token !== undefined) metadata.set('authorization', `Bearer ${token}`);
  return new Promise((resolve, reject) => {
    (client[method] as (r: unknown, m: grpc.Metadata, cb: (e: grpc.ServiceError | null, v: T) => void) => void).call(
      client,
      request,
      metadata,
      (error, value) => (error ? reject(error) : resolve(value)),
    );
  });
}

/** Resolves with the ServiceError of a call that must fail. */
export async function grpcErrorOf(promise: Promise<unknown>): Promise<grpc.ServiceError> {
  try {
    await promise;
  } catch (error) {
    return error as grpc.ServiceError;
  }
  throw new Error('the call succeeded but was expected to fail');
}

export async function writeGate(path: string): Promise<void> {
  await writeFile(path, 'open');
}
