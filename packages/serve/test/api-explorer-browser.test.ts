/**
 * The browsable API page on the management port, in a real headless Chromium (Debian's
 * `chromium`, driven by playwright-core; .ci/run installs it when missing): the page loads under
 * its strict CSP, lists the routes of every API, and its "Try it" call to /ping succeeds, with
 * token authorization on; a route that needs a key is refused without one and answered with the
 * key typed into the page.
 */
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { chromium, type Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServer, type RunningServer } from '../src/start-server.ts';
import { createWorkspace, freePort, opsConfig, type Workspace } from './ops-harness.ts';

const CHROMIUM = '/usr/bin/chromium';
const CHROMIUM_FLAGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

let workspace: Workspace;
let server: RunningServer;
let browser: Browser;
let management: string;
let inferenceKey: string;
let managementKey: string;

beforeAll(async () => {
  if (!existsSync(CHROMIUM))
    throw new Error(`${CHROMIUM} is missing: install Debian's chromium (apt-get install -y chromium; .ci/run does it)`);
  workspace = await createWorkspace('marina-api-explorer-');
  const config = opsConfig(workspace, {
    inference_address: `http://127.0.0.1:${await freePort()}`,
    management_address: `http://127.0.0.1:${await freePort()}`,
    metrics_address: `http://127.0.0.1:${await freePort()}`,
    disable_token_authorization: 'false',
  });
  server = await startServer({
    ...config,
    logDir: join(workspace.root, 'logs'),
    keyFilePath: join(workspace.root, 'key_file.json'),
  });
  management = server.listening.find((l) => l.api === 'management')!.url;
  const keys = JSON.parse(await readFile(join(workspace.root, 'key_file.json'), 'utf8'));
  inferenceKey = keys.inference.key;
  managementKey = keys.management.key;
  browser = await chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_FLAGS });
}, 120_000);
afterAll(async () => {
  await browser?.close();
  await server?.close();
  await workspace?.cleanup();
});

describe('the API explorer page', () => {
  it('loads, lists the routes of every API, and a "Try it" call to /ping succeeds', { timeout: 120_000 }, async () => {
    const page = await browser.newPage();
    const problems: string[] = [];
    page.on('pageerror', (error) => problems.push(error.message));
    page.on('console', (message) => {
      if (message.type() === 'error') problems.push(message.text());
    });
    const response = await page.goto(`${management}/api-explorer`);
    expect(response?.status()).toBe(200);
    await expect(page.title()).resolves.toBe('Marina API explorer');

    const routes = await page
      .locator('li.route')
      .evaluateAll((items) =>
        items.map((i) => `${(i.closest('section') as HTMLElement).dataset.api} ${(i as HTMLElement).dataset.route}`),
      );
    expect(routes).toEqual(
      expect.arrayContaining([
        'inference GET /ping',
        'inference POST /predictions/{model_name}',
        'inference GET /v2',
        'management POST /models',
        'management PUT /models/{model_name}',
        'metrics GET /metrics',
      ]),
    );

    await page.fill('#token', inferenceKey);
    const ping = page.locator('section[data-api="inference"] li.route[data-route="GET /ping"]');
    await ping.locator('button').click();
    const result = ping.locator('pre.result');
    // Waits on the page's state (the answer written into the element), not on a clock; the test's timeout bounds it.
    await ping.locator('pre.result[data-status="200"]').waitFor({ timeout: 0 });
    expect(JSON.parse((await result.textContent())!.split('\n').slice(1).join('\n'))).toEqual({ status: 'Healthy' });

    // Without the key, a route that needs it (GET /v2, the server's metadata) is refused by the
    // inference listener's own token check, while /ping stays open for probes.
    await page.fill('#token', '');
    const metadata = page.locator('section[data-api="inference"] li.route[data-route="GET /v2"]');
    await metadata.locator('button').click();
    await metadata.locator('pre.result[data-status="401"]').waitFor({ timeout: 0 });
    // Clear the first call's answer, so the wait below sees this call's.
    await result.evaluate((element) => element.removeAttribute('data-status'));
    await ping.locator('button').click();
    await ping.locator('pre.result[data-status="200"]').waitFor({ timeout: 0 });
    // The management listener's check too: refused without its key, answered with it.
    const list = page.locator('section[data-api="management"] li.route[data-route="GET /models"]');
    await list.locator('button').click();
    await list.locator('pre.result[data-status="401"]').waitFor({ timeout: 0 });
    await page.fill('#token', managementKey);
    await list.locator('button').click();
    await list.locator('pre.result[data-status="200"]').waitFor({ timeout: 0 });
    expect(JSON.parse((await list.locator('pre.result').textContent())!.split('\n').slice(1).join('\n'))).toEqual({
      models: [],
    });
    expect(problems).toEqual([]);
    await page.close();
  });
});
