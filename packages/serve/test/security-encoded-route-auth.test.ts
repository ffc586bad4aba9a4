/**
 * Regression tests for the percent-encoded path attack on token authorization: the router
 * matches the decoded path (`/%6dodels` is `/models`), so authorization must be decided on the
 * matched route, never on the raw URL. Real server on 127.0.0.1, token authorization on, real
 * archives in the model store.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { readKeyFile, type KeyFile } from '../src/auth/token-authorization.ts';
import {
  call,
  createWorkspace,
  opsConfig,
  packModel,
  startOps,
  type OpsServer,
  type Workspace,
} from './ops-harness.ts';

let workspace: Workspace | undefined;
let ops: OpsServer | undefined;

afterEach(async () => {
  await ops?.close();
  await workspace?.cleanup();
  ops = undefined;
  workspace = undefined;
});

/** Starts a real server with token authorization on; `managementAddress` apart from the inference one when given. */
async function start(
  managementAddress?: string,
): Promise<{ keys: KeyFile; inference: string; management: string; keyFilePath: string }> {
  workspace = await createWorkspace('marina-sec-auth-');
  await packModel(workspace.store, { modelName: 'evil' });
  const keyFilePath = join(workspace.root, 'key_file.json');
  const config = opsConfig(
    workspace,
    {
      disable_token_authorization: 'false',
      ...(managementAddress ? { management_address: managementAddress } : {}),
    },
    { keyFilePath },
  );
  ops = await startOps(config);
  const url = (api: string) => ops!.server.listening.find((l) => l.api === api)!.url;
  return {
    keys: await readKeyFile(keyFilePath),
    inference: url('inference'),
    management: url('management'),
    keyFilePath,
  };
}

describe('one listener for both APIs', () => {
  it('refuses the inference key on /%6dodels (list) and accepts the management key there', async () => {
    const { keys, inference } = await start();
    const attack = await call(inference, 'GET', '/%6dodels', { token: keys.inference.key });
    expect(attack.status).toBe(401);
    expect(attack.json).toMatchObject({ type: 'InvalidKeyException', marinaCode: 'MARINA_ERR_TOKEN_INVALID' });
    expect(attack.json.hint).toContain('management API');
    // The route did match: the right key gets the model list through the same encoded path.
    const allowed = await call(inference, 'GET', '/%6dodels', { token: keys.management.key });
    expect(allowed.status).toBe(200);
    expect(allowed.json).toEqual({ models: [] });
  });

  it('does not register an archive through POST /%6dodels with the inference key', async () => {
    const { keys, inference } = await start();
    const attack = await call(inference, 'POST', '/%6dodels?url=evil.mar&initial_workers=1', {
      token: keys.inference.key,
    });
    expect(attack.status).toBe(401);
    const list = await call(inference, 'GET', '/models', { token: keys.management.key });
    expect(list.json).toEqual({ models: [] });
  });

  it('does not rotate the management key through /%74oken with the inference key', async () => {
    const { keys, inference, keyFilePath } = await start();
    const before = await readFile(keyFilePath, 'utf8');
    const attack = await call(inference, 'POST', '/%74oken?type=management', { token: keys.inference.key });
    expect(attack.status).toBe(401);
    expect(attack.json.hint).toContain('API key');
    expect(await readFile(keyFilePath, 'utf8')).toBe(before);
    // The management key does not rotate keys either: /token needs the API key, encoded or not.
    expect((await call(inference, 'POST', '/%74oken?type=management', { token: keys.management.key })).status).toBe(
      401,
    );
    expect((await call(inference, 'POST', '/token?type=management', { token: keys.management.key })).status).toBe(401);
    expect(await readFile(keyFilePath, 'utf8')).toBe(before);
    const rotated = await call(inference, 'POST', '/%74oken?type=management', { token: keys.API.key });
    expect(rotated.status).toBe(200);
    expect((await readKeyFile(keyFilePath)).management.key).not.toBe(keys.management.key);
  });

  it('refuses the management key on /%70redictions (the inference API needs the inference key)', async () => {
    const { keys, inference } = await start();
    const attack = await call(inference, 'POST', '/%70redictions/evil', {
      token: keys.management.key,
      body: { inputs: {} },
    });
    expect(attack.status).toBe(401);
    expect(attack.json.hint).toContain('inference API');
  });
});

describe('separate inference and management listeners', () => {
  it('does not rotate the inference key through /%74oken with the management key', async () => {
    const { keys, management, keyFilePath } = await start('http://localhost:0');
    const before = await readFile(keyFilePath, 'utf8');
    const attack = await call(management, 'GET', '/%74oken?type=inference', { token: keys.management.key });
    expect(attack.status).toBe(401);
    expect(await readFile(keyFilePath, 'utf8')).toBe(before);
    expect((await call(management, 'GET', '/%74oken?type=inference', { token: keys.API.key })).status).toBe(200);
    expect((await readKeyFile(keyFilePath)).inference.key).not.toBe(keys.inference.key);
  });

  it("refuses the inference key on the management listener's encoded routes", async () => {
    const { keys, management } = await start('http://localhost:0');
    expect((await call(management, 'GET', '/%6dodels', { token: keys.inference.key })).status).toBe(401);
    expect((await call(management, 'GET', '/%6dodels', { token: keys.management.key })).status).toBe(200);
  });
});
