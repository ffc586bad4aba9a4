import { createServer, type Server } from 'node:http';
import { mkdtemp, readdir, readFile, rm, writeFile, mkdir } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { isUrlAllowed, resolveModelUrl } from '../src/model-download/resolve-model-url.ts';

const ZIP = Buffer.concat([Buffer.from([0x50, 0x4b, 0x03, 0x04]), Buffer.alloc(60, 7)]);
const ALLOW_ALL = ['file://.*', 'http(s)?://.*'];

let server: Server;
let base: string;
let store: string;

beforeAll(async () => {
  server = createServer((req, res) => {
    const path = req.url ?? '/';
    if (path === '/models/good.mar') return void res.end(ZIP);
    if (path === '/models/big.mar') {
      // No content-length: the limit must hold while streaming, not only on the header.
      res.writeHead(200, { 'transfer-encoding': 'chunked' });
      for (let i = 0; i < 64; i++) res.write(ZIP);
      return void res.end();
    }
    if (path === '/models/declared-big.mar') {
      res.writeHead(200, { 'content-length': String(10 * ZIP.length) });
      return void res.end(Buffer.alloc(10 * ZIP.length));
    }
    if (path === '/models/not-archive.mar') return void res.end('<html>login page</html>');
    if (path === '/models/slow.mar') {
      res.writeHead(200);
      res.write(ZIP.subarray(0, 4));
      return; // never ends
    }
    if (path === '/redirect-outside') {
      res.writeHead(302, { location: 'http://169.254.169.254/latest/meta-data/x.mar' });
      return void res.end();
    }
    if (path === '/redirect-inside') {
      res.writeHead(302, { location: '/models/good.mar' });
      return void res.end();
    }
    res.writeHead(404);
    res.end('no');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(async () => {
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
});
beforeEach(async () => {
  store = await mkdtemp(join(tmpdir(), 'marina-store-'));
  return () => rm(store, { recursive: true, force: true });
});

describe('isUrlAllowed', () => {
  it('matches whole URLs case-insensitively, as TorchServe', () => {
    expect(isUrlAllowed('HTTPS://Models.Example.com/a.mar', ['https://models\\.example\\.com/.*'])).toBe(true);
    expect(isUrlAllowed('https://models.example.com.evil.io/a.mar', ['https://models\\.example\\.com/[^/]*'])).toBe(
      false,
    );
    // A pattern matching only a prefix does not allow the URL: the match is a full match.
    expect(isUrlAllowed('https://models.example.com/a.mar', ['https://models'])).toBe(false);
  });

  it('refuses any URL containing ..', () => {
    expect(isUrlAllowed('https://host/models/../secret.mar', ALLOW_ALL)).toBe(false);
  });
});

describe('resolveModelUrl', () => {
  it('resolves a file name in the model store without downloading', async () => {
    await writeFile(join(store, 'noop.mar'), ZIP);
    await expect(resolveModelUrl({ url: 'noop.mar', modelStore: store, allowedUrls: [] })).resolves.toEqual({
      archivePath: join(store, 'noop.mar'),
      isDownloaded: false,
    });
  });

  it('resolves a model folder in the store', async () => {
    await mkdir(join(store, 'folder-model'));
    await expect(resolveModelUrl({ url: 'folder-model', modelStore: store, allowedUrls: [] })).resolves.toMatchObject({
      archivePath: join(store, 'folder-model'),
    });
  });

  it('answers 404 "Model not found at" for a missing file name', async () => {
    await expect(resolveModelUrl({ url: 'missing.mar', modelStore: store, allowedUrls: [] })).rejects.toMatchObject({
      code: 'MARINA_ERR_MODEL_FILE_NOT_FOUND',
      statusCode: 404,
      message: 'Model not found at: missing.mar',
    });
  });

  it.each(['sub/noop.mar', 'sub\\noop.mar', '/etc/passwd'])('refuses a path with separators: %s', async (url) => {
    await expect(resolveModelUrl({ url, modelStore: store, allowedUrls: ALLOW_ALL })).rejects.toMatchObject({
      code: 'MARINA_ERR_MODEL_URL_INVALID',
      statusCode: 404,
    });
  });

  it("refuses .. with TorchServe's message before touching anything", async () => {
    await expect(
      resolveModelUrl({ url: `${base}/models/../x.mar`, modelStore: store, allowedUrls: ALLOW_ALL }),
    ).rejects.toMatchObject({
      code: 'MARINA_ERR_URL_RELATIVE_PATH',
      statusCode: 404,
      message: `Relative path is not allowed in url: ${base}/models/../x.mar`,
    });
  });

  it("refuses URLs outside allowed_urls with TorchServe's message", async () => {
    const url = `${base}/models/good.mar`;
    await expect(
      resolveModelUrl({ url, modelStore: store, allowedUrls: ['https://models\\.example\\.com/.*'] }),
    ).rejects.toMatchObject({
      code: 'MARINA_ERR_URL_NOT_ALLOWED',
      statusCode: 404,
      message: `Given URL ${url} does not match any allowed URL(s)`,
    });
    expect(await readdir(store)).toEqual([]);
  });

  it('uses an allowed file:// URL where it is', async () => {
    const path = join(store, 'elsewhere.mar');
    await writeFile(path, ZIP);
    await expect(
      resolveModelUrl({ url: pathToFileURL(path).href, modelStore: store, allowedUrls: ['file://.*'] }),
    ).resolves.toEqual({ archivePath: path, isDownloaded: false });
    await expect(
      resolveModelUrl({ url: pathToFileURL(path).href, modelStore: store, allowedUrls: ['http(s)?://.*'] }),
    ).rejects.toMatchObject({ code: 'MARINA_ERR_URL_NOT_ALLOWED' });
  });

  it('downloads an http archive into the store and leaves no temp file', async () => {
    const result = await resolveModelUrl({ url: `${base}/models/good.mar`, modelStore: store, allowedUrls: ALLOW_ALL });
    expect(result).toEqual({ archivePath: join(store, 'good.mar'), isDownloaded: true });
    expect(await readFile(result.archivePath)).toEqual(ZIP);
    expect(await readdir(store)).toEqual(['good.mar']);
  });

  it('refuses to overwrite a file already in the store (500, as TorchServe)', async () => {
    await writeFile(join(store, 'good.mar'), 'mine');
    await expect(
      resolveModelUrl({ url: `${base}/models/good.mar`, modelStore: store, allowedUrls: ALLOW_ALL }),
    ).rejects.toMatchObject({
      code: 'MARINA_ERR_MODEL_FILE_EXISTS',
      statusCode: 500,
      message: 'Model file already exists good.mar',
    });
    expect(await readFile(join(store, 'good.mar'), 'utf8')).toBe('mine');
  });

  it('stops a streamed download at the byte limit and deletes the partial file', async () => {
    await expect(
      resolveModelUrl({
        url: `${base}/models/big.mar`,
        modelStore: store,
        allowedUrls: ALLOW_ALL,
        maxDownloadBytes: 1000,
      }),
    ).rejects.toMatchObject({ code: 'MARINA_ERR_DOWNLOAD_TOO_LARGE', statusCode: 400 });
    expect(await readdir(store)).toEqual([]);
  });

  it('refuses a download whose content-length is over the limit', async () => {
    await expect(
      resolveModelUrl({
        url: `${base}/models/declared-big.mar`,
        modelStore: store,
        allowedUrls: ALLOW_ALL,
        maxDownloadBytes: 100,
      }),
    ).rejects.toMatchObject({ code: 'MARINA_ERR_DOWNLOAD_TOO_LARGE' });
    expect(await readdir(store)).toEqual([]);
  });

  it('answers 400 "Failed to download archive" for an HTTP error', async () => {
    await expect(
      resolveModelUrl({ url: `${base}/models/absent.mar`, modelStore: store, allowedUrls: ALLOW_ALL }),
    ).rejects.toMatchObject({
      code: 'MARINA_ERR_DOWNLOAD_FAILED',
      statusCode: 400,
      message: expect.stringContaining(`Failed to download archive from: ${base}/models/absent.mar`),
    });
  });

  it('deletes a download that is not an archive', async () => {
    await expect(
      resolveModelUrl({ url: `${base}/models/not-archive.mar`, modelStore: store, allowedUrls: ALLOW_ALL }),
    ).rejects.toMatchObject({ code: 'MARINA_ERR_DOWNLOAD_NOT_ARCHIVE' });
    expect(await readdir(store)).toEqual([]);
  });

  it('times out a download that never finishes', async () => {
    await expect(
      resolveModelUrl({
        url: `${base}/models/slow.mar`,
        modelStore: store,
        allowedUrls: ALLOW_ALL,
        downloadTimeoutMs: 300,
      }),
    ).rejects.toMatchObject({ code: 'MARINA_ERR_DOWNLOAD_TIMEOUT' });
    expect(await readdir(store)).toEqual([]);
  });

  it('checks every redirect hop against allowed_urls', async () => {
    const allowLocal = ['http://127\\.0\\.0\\.1:\\d+/.*'];
    await expect(
      resolveModelUrl({ url: `${base}/redirect-outside`, modelStore: store, allowedUrls: allowLocal }),
    ).rejects.toMatchObject({ code: 'MARINA_ERR_URL_NOT_ALLOWED' });
  });

  it('follows an allowed redirect and names the file after the URL asked for', async () => {
    const result = await resolveModelUrl({ url: `${base}/redirect-inside`, modelStore: store, allowedUrls: ALLOW_ALL });
    expect(result).toEqual({ archivePath: join(store, 'redirect-inside'), isDownloaded: true });
    expect(await readFile(result.archivePath)).toEqual(ZIP);
  });

  it('needs a model store for downloads', async () => {
    await expect(
      resolveModelUrl({ url: `${base}/models/good.mar`, modelStore: undefined, allowedUrls: ALLOW_ALL }),
    ).rejects.toMatchObject({
      code: 'MARINA_ERR_MODEL_STORE_NOT_CONFIGURED',
      message: 'Model store has not been configured.',
    });
  });
});
