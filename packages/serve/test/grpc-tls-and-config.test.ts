/** enable_grpc_ssl, the grpc_* keys and their defaults, and startServer's gRPC listeners. */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { configFromProperties } from '../src/config/load-config.ts';
import { clientPackage, grpcClient, grpcErrorOf } from './oip-harness.ts';
import {
  createWorkspace,
  hasOpenssl,
  opsConfig,
  startOps,
  writeSelfSignedCertificate,
  type Workspace,
} from './ops-harness.ts';
import { marinaErrorOf } from './marina-error-of.ts';

let workspace: Workspace;

beforeAll(async () => {
  workspace = await createWorkspace('marina-grpc-tls-');
  if (!hasOpenssl) return;
  writeSelfSignedCertificate(workspace.root);
});
afterAll(() => workspace?.cleanup());

describe('gRPC configuration', () => {
  it("defaults to TorchServe's 127.0.0.1:7070 and 127.0.0.1:7071, without TLS", () => {
    const config = configFromProperties({}, { cwd: workspace.root });
    expect(config.grpc).toEqual({
      inference: { host: '127.0.0.1', port: 7070, maxConnectionAgeMs: undefined, maxConnectionAgeGraceMs: undefined },
      management: { host: '127.0.0.1', port: 7071, maxConnectionAgeMs: undefined, maxConnectionAgeGraceMs: undefined },
      isSslEnabled: false,
    });
  });

  it('refuses enable_grpc_ssl without the PEM files', async () => {
    const error = await marinaErrorOf(
      (async () => configFromProperties({ enable_grpc_ssl: 'true' }, { cwd: workspace.root }))(),
    );
    expect(error.code).toBe('MARINA_ERR_CONFIG_TLS_FILES_MISSING');
    expect(error.message).toMatch(/enable_grpc_ssl=true needs private_key_file and certificate_file/);
  });

  it.skipIf(!hasOpenssl)(
    'serves both gRPC APIs over TLS with enable_grpc_ssl, and startServer reports them',
    async () => {
      const ops = await startOps(
        opsConfig(workspace, { enable_grpc_ssl: 'true', private_key_file: 'key.pem', certificate_file: 'cert.pem' }),
      );
      try {
        const url = ops.server.listening.find((l) => l.api === 'grpc-inference')!.url;
        expect(url).toMatch(/^grpcs:\/\/127\.0\.0\.1:\d+$/);
        expect(ops.server.listening.find((l) => l.api === 'grpc-management')!.url).toMatch(
          /^grpcs:\/\/127\.0\.0\.1:\d+$/,
        );
        const target = url.replace('grpcs://', '');
        const pkg = clientPackage('grpc_predict_v2.proto');
        const Ctor = (pkg as any).inference.GRPCInferenceService as new (
          t: string,
          c: grpc.ChannelCredentials,
        ) => grpc.Client & Record<string, (...args: unknown[]) => unknown>;
        const secure = new Ctor(target, grpc.credentials.createSsl(readFileSync(join(workspace.root, 'cert.pem'))));
        const live = await new Promise<any>((resolve, reject) =>
          secure.ServerLive!.call(secure, {}, (e: Error | null, v: unknown) => (e ? reject(e) : resolve(v))),
        );
        expect(live).toEqual({ live: true });
        secure.close();
        const plain = grpcClient(pkg, 'inference.GRPCInferenceService', target);
        const error = await grpcErrorOf(
          new Promise((resolve, reject) =>
            (plain.ServerLive as (...args: unknown[]) => unknown).call(
              plain,
              {},
              { deadline: Date.now() + 20_000 },
              (e: Error | null, v: unknown) => (e ? reject(e) : resolve(v)),
            ),
          ),
        );
        expect(error.code).toBe(grpc.status.UNAVAILABLE);
        plain.close();
      } finally {
        await ops.close();
      }
    },
  );
});
