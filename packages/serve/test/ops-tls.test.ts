/** https:// addresses: private_key_file and certificate_file serve TLS on that listener only. */
import { readFileSync } from 'node:fs';
import { request } from 'node:https';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  call,
  createWorkspace,
  hasOpenssl,
  opsConfig,
  startOps,
  writeSelfSignedCertificate,
  type Workspace,
} from './ops-harness.ts';

let workspace: Workspace;

beforeAll(async () => {
  workspace = await createWorkspace('marina-ops-tls-');
  if (!hasOpenssl) return;
  writeSelfSignedCertificate(workspace.root);
});
afterAll(() => workspace?.cleanup());

function getTls(url: string, ca: Buffer): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    request(url, { ca }, (response) => {
      let body = '';
      response.on('data', (chunk: Buffer) => (body += chunk.toString()));
      response.on('end', () => resolve({ status: response.statusCode ?? 0, body }));
    })
      .on('error', reject)
      .end();
  });
}

describe('TLS', { timeout: 30_000 }, () => {
  it.skipIf(!hasOpenssl)(
    'serves the inference API over https with the configured certificate, management stays http',
    async () => {
      const ops = await startOps(
        opsConfig(workspace, {
          inference_address: 'https://127.0.0.1:0',
          private_key_file: 'key.pem',
          certificate_file: 'cert.pem',
        }),
      );
      try {
        expect(ops.server.listening.find((l) => l.api === 'inference')!.url).toMatch(/^https:\/\/127\.0\.0\.1:\d+$/);
        const ping = await getTls(`${ops.api}/ping`, readFileSync(join(workspace.root, 'cert.pem')));
        expect(ping.status).toBe(200);
        expect(JSON.parse(ping.body)).toEqual({ status: 'Healthy' });
        const management = ops.server.listening.find((l) => l.api === 'management')!.url;
        expect(management).toMatch(/^http:\/\//);
        expect((await call(management, 'GET', '/models')).status).toBe(200);
      } finally {
        await ops.close();
      }
    },
  );
});
