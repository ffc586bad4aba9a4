/**
 * Regression tests for the allowed_urls bypass with percent-encoded dot segments: allowed_urls
 * must be matched against the decoded, normalised URL, and encoded dot segments and encoded
 * slashes are refused outright. Real server on 127.0.0.1, real archives on disk.
 */
import { mkdir, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { isUrlAllowed, normaliseModelUrl } from '../src/model-download/resolve-model-url.ts';
import {
  call,
  createWorkspace,
  opsConfig,
  packModel,
  startOps,
  type OpsServer,
  type Workspace,
} from './ops-harness.ts';

let workspace: Workspace;
let ops: OpsServer;
let allowedDir: string;

beforeEach(async () => {
  workspace = await createWorkspace('marina-sec-urls-');
  allowedDir = join(workspace.root, 'srv', 'store');
  await mkdir(allowedDir, { recursive: true });
  await mkdir(join(workspace.root, 'srv', 'other'), { recursive: true });
  await packModel(allowedDir, { modelName: 'good' });
  await packModel(join(workspace.root, 'srv', 'other'), { modelName: 'evil' });
  const allowed = `${pathToFileURL(allowedDir).href.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}/.*`;
  ops = await startOps(opsConfig(workspace, { allowed_urls: allowed }));
});
afterEach(async () => {
  await ops?.close();
  await workspace?.cleanup();
});

const storeUrl = (rest: string) => `${pathToFileURL(allowedDir).href}/${rest}`;

async function registeredModels(): Promise<string[]> {
  const list = await call(ops.api, 'GET', '/models');
  return (list.json.models as Array<{ modelName: string }>).map((m) => m.modelName);
}

describe('allowed_urls with percent-encoded dot segments', () => {
  const escapes = [
    '%2e%2e/other/evil.mar',
    '%2E%2E/other/evil.mar',
    '.%2e/other/evil.mar',
    '%2e./other/evil.mar',
    'sub/%2e%2e/%2e%2e/other/evil.mar',
  ];

  it.each(escapes)('refuses %s sent in a JSON body, and registers nothing', async (rest) => {
    const response = await call(ops.api, 'POST', '/models', { body: { url: storeUrl(rest), initial_workers: 1 } });
    expect(response.status).toBe(404);
    expect(response.json).toMatchObject({ marinaCode: 'MARINA_ERR_URL_RELATIVE_PATH' });
    expect(await registeredModels()).toEqual([]);
  });

  it('refuses an encoded escape sent in the query string (encoded once more by the client)', async () => {
    const response = await call(
      ops.api,
      'POST',
      `/models?url=${encodeURIComponent(storeUrl('%2e%2e/other/evil.mar'))}&initial_workers=1`,
    );
    expect(response.status).toBe(404);
    expect(response.json).toMatchObject({ marinaCode: 'MARINA_ERR_URL_RELATIVE_PATH' });
    expect(await registeredModels()).toEqual([]);
  });

  it('never opens a folder outside the allowed prefix, nor lists its files in the error', async () => {
    const depth = allowedDir.split('/').length;
    const etc = storeUrl(`${'%2e%2e/'.repeat(depth)}etc`);
    const response = await call(ops.api, 'POST', '/models', { body: { url: etc } });
    expect(response.status).toBe(404);
    expect(response.json).toMatchObject({ marinaCode: 'MARINA_ERR_URL_RELATIVE_PATH' });
    const etcFiles = await readdir('/etc');
    for (const name of etcFiles.filter((n) => n.length > 4).slice(0, 20)) expect(response.text).not.toContain(name);
  });

  it('refuses encoded slashes and backslashes', async () => {
    for (const rest of ['..%2fother%2fevil.mar', '%2e%2e%2fother/evil.mar', 'x%5c..%5cevil.mar']) {
      const response = await call(ops.api, 'POST', '/models', { body: { url: storeUrl(rest) } });
      expect(response.status).toBe(404);
      expect(['MARINA_ERR_URL_RELATIVE_PATH', 'MARINA_ERR_MODEL_URL_INVALID']).toContain(response.json.marinaCode);
    }
    expect(await registeredModels()).toEqual([]);
  });

  it('still registers an archive inside the allowed prefix, also when its name is percent-encoded', async () => {
    const response = await call(ops.api, 'POST', '/models', {
      body: { url: storeUrl('%67ood.mar'), initial_workers: 1 },
    });
    expect(response.status).toBe(200);
    expect(await registeredModels()).toEqual(['good']);
  });
});

describe('normaliseModelUrl', () => {
  it('matches allowed_urls against the decoded path', () => {
    expect(normaliseModelUrl('file:///srv/store/%67ood.mar')).toMatchObject({
      scheme: 'file',
      filePath: '/srv/store/good.mar',
      decoded: 'file:///srv/store/good.mar',
    });
    expect(isUrlAllowed('file:///srv/store/%67ood.mar', ['file:///srv/store/good\\.mar'])).toBe(true);
    expect(isUrlAllowed('file:///srv/store/%2e%2e/other/evil.mar', ['file:///srv/store/.*'])).toBe(false);
    expect(isUrlAllowed('https://host/models/%2E%2E/secret.mar', ['https://host/models/.*'])).toBe(false);
    expect(isUrlAllowed('https://host/models/a%2fb.mar', ['https://host/models/.*'])).toBe(false);
    expect(isUrlAllowed('https://host/models/a%00.mar', ['https://host/models/.*'])).toBe(false);
  });
});
