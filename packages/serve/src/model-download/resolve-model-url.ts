/**
 * Where a register `url` points, with TorchServe's rules: a plain file name (or folder) in the
 * model store, or a URL that must match `allowed_urls`. http(s) archives are streamed into the
 * store under a size limit and a time limit, then moved into place without overwriting anything.
 */
import { randomBytes } from 'node:crypto';
import { constants as fsConstants, createWriteStream } from 'node:fs';
import { copyFile, link, open, stat, unlink } from 'node:fs/promises';
import { basename, dirname, isAbsolute, join, normalize, resolve as resolvePath } from 'node:path';
import { resolveInside } from '@marina/archive';
import { Readable, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { downloadErrors } from './download-errors.ts';

const { create } = downloadErrors;

/** Default download size limit: 2 GiB (ONNX protobufs cannot exceed 2 GiB anyway). */
const DEFAULT_MAX_DOWNLOAD_BYTES = 2 * 1024 ** 3;
/** Default time limit for a whole download: 10 minutes. */
const DEFAULT_DOWNLOAD_TIMEOUT_MS = 10 * 60_000;
const MAX_REDIRECTS = 5;

/** A URL of a scheme, after decoding and normalising: what allowed_urls is matched against and what is then used. */
export interface NormalisedModelUrl {
  /** The WHATWG-normalised URL, used for downloads (`https://host/a.mar`). */
  href: string;
  /** The URL with its path percent-decoded: what allowed_urls patterns are matched against. */
  decoded: string;
  /** Lower-case scheme without the colon (`file`, `https`). */
  scheme: string;
  /** For file:// URLs, the absolute, decoded, normalised path. */
  filePath?: string;
}

/**
 * Decodes and normalises a model URL before anything is matched or opened, refusing what could
 * change meaning between the check and the use: `..` and `.` segments, also percent-encoded
 * (`%2e%2e`), encoded slashes and backslashes (`%2f`, `%5c`), raw backslashes, NUL and other
 * control characters.
 * @throws MARINA_ERR_URL_RELATIVE_PATH (404, TorchServe's message), MARINA_ERR_MODEL_URL_INVALID (404).
 */
export function normaliseModelUrl(url: string): NormalisedModelUrl {
  const relative = () => create.MARINA_ERR_URL_RELATIVE_PATH(`Relative path is not allowed in url: ${url}`);
  if (url.includes('..') || url.includes('\\')) throw relative();
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch (cause) {
    throw create.MARINA_ERR_MODEL_URL_INVALID(`model url '${url}' is not a valid URL: ${(cause as Error).message}`, {
      cause,
    });
  }
  // The raw path's segments, before the URL parser resolves any encoded dot segment.
  const rawPath = url
    .slice(url.indexOf('//') + 2)
    .replace(/^[^/]*/, '')
    .replace(/[?#].*$/, '');
  const decodedSegments: string[] = [];
  for (const segment of rawPath.split('/')) {
    let decoded: string;
    try {
      decoded = decodeURIComponent(segment);
    } catch (cause) {
      throw create.MARINA_ERR_MODEL_URL_INVALID(`model url '${url}' has a malformed percent-encoding in '${segment}'`, {
        cause,
      });
    }
    if (decoded === '.' || decoded === '..') throw relative();
    if (/[/\\]/.test(decoded)) {
      throw create.MARINA_ERR_MODEL_URL_INVALID(
        `model url '${url}' has an encoded slash or backslash in '${segment}'; write path separators as '/'`,
      );
    }
    // eslint-disable-next-line no-control-regex
    // biome-ignore lint/suspicious/noControlCharactersInRegex: a URL that decodes to control characters is refused, so the regex names them.
    if (/[\u0000-\u001f\u007f]/.test(decoded)) {
      throw create.MARINA_ERR_MODEL_URL_INVALID(`model url '${url}' has a control character in its path`);
    }
    decodedSegments.push(decoded);
  }
  const scheme = parsed.protocol.slice(0, -1).toLowerCase();
  const decodedPath = decodedSegments.join('/');
  const decoded = `${parsed.protocol}//${parsed.host}${decodedPath}${parsed.search}`;
  if (scheme !== 'file') return { href: parsed.href, decoded, scheme };
  let filePath: string;
  try {
    filePath = fileURLToPath(parsed);
  } catch (cause) {
    throw create.MARINA_ERR_MODEL_URL_INVALID(
      `model url '${url}' is not a valid file:// URL: ${(cause as Error).message}`,
      { cause },
    );
  }
  return { href: parsed.href, decoded, scheme, filePath: normalize(filePath) };
}

/**
 * True when `url`, decoded and normalised, fully matches one of the `allowedUrls` regexes,
 * case-insensitively (TorchServe's `allowed_urls` semantics). False for every URL
 * `normaliseModelUrl` refuses.
 */
export function isUrlAllowed(url: string, allowedUrls: readonly string[]): boolean {
  let normalised: NormalisedModelUrl;
  try {
    normalised = normaliseModelUrl(url);
  } catch {
    return false;
  }
  return matchesAllowedUrls(normalised, allowedUrls);
}

function matchesAllowedUrls(url: NormalisedModelUrl, allowedUrls: readonly string[]): boolean {
  return allowedUrls.some((pattern) => new RegExp(`^(?:${pattern})$`, 'i').test(url.decoded));
}

/**
 * Normalises `url` (see normaliseModelUrl) and checks it against `allowedUrls`; the URL to use
 * from then on is the returned one, never the raw string.
 * @throws TorchServe's 404 errors for a relative path or a URL outside `allowedUrls`.
 */
function assertUrlAllowed(url: string, allowedUrls: readonly string[]): NormalisedModelUrl {
  const normalised = normaliseModelUrl(url);
  if (!matchesAllowedUrls(normalised, allowedUrls)) {
    throw create.MARINA_ERR_URL_NOT_ALLOWED(`Given URL ${url} does not match any allowed URL(s)`, {
      details: { allowedUrls: [...allowedUrls] },
    });
  }
  return normalised;
}

export interface ResolveModelUrlOptions {
  /** What the user sent as `url`. */
  url: string;
  /** Absolute path of the model store; undefined when none is configured. */
  modelStore: string | undefined;
  /** allowed_urls patterns. */
  allowedUrls: readonly string[];
  /** Largest download accepted, bytes. Default 2 GiB. */
  maxDownloadBytes?: number;
  /** Time limit for one download, ms. Default 10 minutes. */
  downloadTimeoutMs?: number;
  /** Longest a download may go without receiving a byte, ms. Default 1 minute. */
  downloadIdleTimeoutMs?: number;
  /** Aborts a download when the management client goes away (request closed before its answer). */
  signal?: AbortSignal;
  /** Shared by every register of one server: caps the downloads running at once. Default: no cap. */
  downloadSlots?: DownloadSlots;
}

/** Default idle limit of a download: 1 minute without a byte. */
const DEFAULT_DOWNLOAD_IDLE_TIMEOUT_MS = 60_000;

/**
 * Counts the downloads in progress against a cap. A download beyond it is refused at once
 * (MARINA_ERR_DOWNLOADS_BUSY, 503) rather than queued: a queue of waiting registers would be one
 * more unbounded thing, and the client can retry.
 */
export class DownloadSlots {
  readonly maxConcurrent: number;
  #inUse = 0;

  constructor(maxConcurrent: number) {
    this.maxConcurrent = maxConcurrent;
  }

  /** Downloads running now. */
  get inUse(): number {
    return this.#inUse;
  }

  /** Takes a slot; the returned function gives it back (idempotent). @throws MARINA_ERR_DOWNLOADS_BUSY */
  acquire(url: string): () => void {
    if (this.#inUse >= this.maxConcurrent) {
      throw create.MARINA_ERR_DOWNLOADS_BUSY(
        `Failed to download archive from: ${url} (${this.#inUse} downloads are already running, the limit of max_concurrent_downloads); retry when one has finished`,
        {
          details: { maxConcurrentDownloads: this.maxConcurrent },
        },
      );
    }
    this.#inUse += 1;
    let isReleased = false;
    return () => {
      if (isReleased) return;
      isReleased = true;
      this.#inUse -= 1;
    };
  }
}

export interface ResolvedModelUrl {
  /** Absolute path of the archive file or model folder. */
  archivePath: string;
  /** True when the archive was downloaded into the store now (delete it again on unregister). */
  isDownloaded: boolean;
}

/** The `resolveModelUrl` the management routes call, bound to a configuration; `signal` aborts a download. */
export type ModelUrlResolver = (url: string, options?: { signal?: AbortSignal }) => Promise<ResolvedModelUrl>;

const URL_SCHEME = /^[a-z][a-z0-9+.-]*:\/\//i;
const SAFE_FILE_NAME = /^[A-Za-z0-9_][A-Za-z0-9._-]*$/;

async function exists(path: string): Promise<boolean> {
  try {
    await stat(path);
    return true;
  } catch {
    return false;
  }
}

/**
 * Resolves a register `url` to an archive on disk.
 * - `name.mar` (no `/` or `\`): that file or folder in the model store;
 * - `file:///abs/path`: must match allowed_urls; an archive is copied into the store (as TorchServe), a folder used where it is;
 * - `/abs/folder`: a model folder, used where it is (allowed_urls must allow its file:// URL);
 * - `http(s)://…/name.mar`: must match allowed_urls; downloaded to `<store>/name.mar`.
 * @throws MARINA_ERR_URL_RELATIVE_PATH, MARINA_ERR_URL_NOT_ALLOWED, MARINA_ERR_MODEL_URL_INVALID,
 *   MARINA_ERR_MODEL_FILE_NOT_FOUND, MARINA_ERR_MODEL_STORE_NOT_CONFIGURED (404);
 *   MARINA_ERR_DOWNLOAD_FAILED, _TOO_LARGE, _TIMEOUT, _NOT_ARCHIVE (400); MARINA_ERR_MODEL_FILE_EXISTS (500).
 */
export async function resolveModelUrl(options: ResolveModelUrlOptions): Promise<ResolvedModelUrl> {
  const { url, modelStore, allowedUrls } = options;
  if (url.includes('..')) throw create.MARINA_ERR_URL_RELATIVE_PATH(`Relative path is not allowed in url: ${url}`);
  if (URL_SCHEME.test(url)) {
    const allowed = assertUrlAllowed(url, allowedUrls);
    if (allowed.scheme === 'file') {
      const path = allowed.filePath!;
      if (!(await exists(path))) throw create.MARINA_ERR_MODEL_FILE_NOT_FOUND(`Model not found at: ${url}`);
      return copyIntoStore(path, url, modelStore);
    }
    if (allowed.scheme !== 'http' && allowed.scheme !== 'https') {
      throw create.MARINA_ERR_MODEL_URL_INVALID(
        `model url '${url}' uses an unsupported scheme '${allowed.scheme}'; use file://, http:// or https://`,
      );
    }
    if (modelStore === undefined) {
      throw create.MARINA_ERR_MODEL_STORE_NOT_CONFIGURED('Model store has not been configured.');
    }
    return { archivePath: await downloadIntoStore(allowed.href, modelStore, options), isDownloaded: true };
  }

  // TorchServe registers a model folder given by absolute path where it is; allowed_urls sees it as its file:// URL.
  if (isAbsolute(url) && (await isDirectory(url))) {
    const allowed = assertUrlAllowed(pathToFileURL(url).href, allowedUrls);
    return { archivePath: allowed.filePath ?? normalize(url), isDownloaded: false };
  }
  if (url.includes('/') || url.includes('\\') || isAbsolute(url)) {
    throw create.MARINA_ERR_MODEL_URL_INVALID(
      `model url '${url}' must be a file name in the model store (no '/' or '\\'), or a file:// or http(s):// URL allowed by allowed_urls`,
    );
  }
  if (modelStore === undefined)
    throw create.MARINA_ERR_MODEL_STORE_NOT_CONFIGURED('Model store has not been configured.');
  if (url === '' || url === '.') throw create.MARINA_ERR_MODEL_FILE_NOT_FOUND(`Model not found at: ${url}`);
  const path = storePath(modelStore, url);
  if (!(await exists(path))) throw create.MARINA_ERR_MODEL_FILE_NOT_FOUND(`Model not found at: ${url}`);
  return { archivePath: path, isDownloaded: false };
}

async function isDirectory(path: string): Promise<boolean> {
  try {
    return (await stat(path)).isDirectory();
  } catch {
    return false;
  }
}

/**
 * TorchServe copies a `file://` archive into the model store (like a download), so the store
 * holds every registered archive and unregister removes the copy. A folder, or a file already in
 * the store, is used where it is.
 */
async function copyIntoStore(path: string, url: string, modelStore: string | undefined): Promise<ResolvedModelUrl> {
  if (modelStore === undefined || (await isDirectory(path)) || dirname(resolvePath(path)) === resolvePath(modelStore))
    return { archivePath: path, isDownloaded: false };
  const fileName = fileNameFromUrl(url);
  const target = storePath(modelStore, fileName);
  try {
    await copyFile(path, target, fsConstants.COPYFILE_EXCL);
  } catch (cause) {
    if ((cause as NodeJS.ErrnoException).code === 'EEXIST')
      throw create.MARINA_ERR_MODEL_FILE_EXISTS(`Model file already exists ${fileName}`);
    throw create.MARINA_ERR_DOWNLOAD_FAILED(`Failed to download archive from: ${url} (${(cause as Error).message})`, {
      cause,
    });
  }
  return { archivePath: target, isDownloaded: true };
}

/** A plain name in the model store, through the one containment helper. */
function storePath(modelStore: string, name: string): string {
  try {
    return resolveInside(modelStore, name, 'model url');
  } catch (cause) {
    throw create.MARINA_ERR_MODEL_URL_INVALID(`model url '${name}' must name a file or folder inside the model store`, {
      cause,
    });
  }
}

/** Binds `resolveModelUrl` to a configuration, for the management routes. */
export function createModelUrlResolver(options: Omit<ResolveModelUrlOptions, 'url' | 'signal'>): ModelUrlResolver {
  return (url, call = {}) => resolveModelUrl({ ...options, url, ...(call.signal ? { signal: call.signal } : {}) });
}

function fileNameFromUrl(url: string): string {
  let name: string;
  try {
    name = decodeURIComponent(basename(new URL(url).pathname));
  } catch (cause) {
    throw create.MARINA_ERR_MODEL_URL_INVALID(`model url '${url}' is not a valid URL: ${(cause as Error).message}`, {
      cause,
    });
  }
  if (!SAFE_FILE_NAME.test(name)) {
    throw create.MARINA_ERR_MODEL_URL_INVALID(
      `model url '${url}' does not end in a usable file name (got '${name}'); the last path segment names the file in the model store, e.g. https://host/models/resnet.mar`,
    );
  }
  return name;
}

/** Follows redirects by hand so every hop is checked against allowed_urls (no SSRF through a redirect). */
async function fetchAllowed(url: string, allowedUrls: readonly string[], signal: AbortSignal): Promise<Response> {
  let current = url;
  for (let hop = 0; hop <= MAX_REDIRECTS; hop++) {
    const response = await fetch(current, { redirect: 'manual', signal });
    if (response.status >= 300 && response.status < 400 && response.headers.has('location')) {
      await response.body?.cancel();
      current = assertUrlAllowed(new URL(response.headers.get('location')!, current).toString(), allowedUrls).href;
      continue;
    }
    if (!response.ok) {
      await response.body?.cancel();
      throw create.MARINA_ERR_DOWNLOAD_FAILED(
        `Failed to download archive from: ${url} (HTTP ${response.status} from ${current})`,
      );
    }
    return response;
  }
  throw create.MARINA_ERR_DOWNLOAD_FAILED(
    `Failed to download archive from: ${url} (more than ${MAX_REDIRECTS} redirects)`,
  );
}

async function isArchive(path: string): Promise<boolean> {
  const handle = await open(path, 'r');
  try {
    const head = Buffer.alloc(4);
    const { bytesRead } = await handle.read(head, 0, 4, 0);
    const isZip =
      bytesRead >= 4 &&
      head[0] === 0x50 &&
      head[1] === 0x4b &&
      (head[2] === 3 || head[2] === 5) &&
      (head[3] === 4 || head[3] === 6);
    const isGzip = bytesRead >= 2 && head[0] === 0x1f && head[1] === 0x8b;
    return isZip || isGzip;
  } finally {
    await handle.close();
  }
}

async function downloadIntoStore(url: string, modelStore: string, options: ResolveModelUrlOptions): Promise<string> {
  const maxBytes = options.maxDownloadBytes ?? DEFAULT_MAX_DOWNLOAD_BYTES;
  const timeoutMs = options.downloadTimeoutMs ?? DEFAULT_DOWNLOAD_TIMEOUT_MS;
  const idleTimeoutMs = options.downloadIdleTimeoutMs ?? DEFAULT_DOWNLOAD_IDLE_TIMEOUT_MS;
  const fileName = fileNameFromUrl(url);
  const target = join(modelStore, fileName);
  if (await exists(target)) throw create.MARINA_ERR_MODEL_FILE_EXISTS(`Model file already exists ${fileName}`);
  if (options.signal?.aborted) throw cancelled(url);
  const release = options.downloadSlots?.acquire(url) ?? (() => undefined);

  const temp = join(modelStore, `.${fileName}.${randomBytes(6).toString('hex')}.download`);
  const total = AbortSignal.timeout(timeoutMs);
  // Re-armed on every chunk: a server that sends headers and then trickles (or nothing) is cut off.
  const idle = new AbortController();
  let idleTimer: NodeJS.Timeout | undefined;
  const armIdle = () => {
    clearTimeout(idleTimer);
    idleTimer = setTimeout(() => idle.abort(), idleTimeoutMs);
  };
  const signal = AbortSignal.any([total, idle.signal, ...(options.signal ? [options.signal] : [])]);
  const tooLarge = () =>
    create.MARINA_ERR_DOWNLOAD_TOO_LARGE(
      `Failed to download archive from: ${url} (larger than the ${maxBytes}-byte limit)`,
      {
        details: { maxDownloadBytes: maxBytes },
      },
    );
  try {
    armIdle();
    const response = await fetchAllowed(url, options.allowedUrls, signal);
    armIdle();
    const declared = Number(response.headers.get('content-length'));
    if (Number.isFinite(declared) && declared > maxBytes) {
      await response.body?.cancel();
      throw tooLarge();
    }
    let received = 0;
    const limiter = new Transform({
      transform(chunk: Buffer, _encoding, callback) {
        armIdle();
        received += chunk.length;
        callback(received > maxBytes ? tooLarge() : null, chunk);
      },
    });
    const body = response.body
      ? Readable.fromWeb(response.body as import('node:stream/web').ReadableStream)
      : Readable.from([]);
    await pipeline(body, limiter, createWriteStream(temp, { flags: 'wx', mode: 0o644, flush: true }), { signal });
    clearTimeout(idleTimer);
    if (!(await isArchive(temp))) {
      throw create.MARINA_ERR_DOWNLOAD_NOT_ARCHIVE(
        `Failed to download archive from: ${url} (the file is neither a .mar/zip nor a .tar.gz archive)`,
      );
    }
    try {
      // link() fails if the name exists, so a file that appeared meanwhile is never overwritten (rename would).
      await link(temp, target);
    } catch (cause) {
      if ((cause as NodeJS.ErrnoException).code === 'EEXIST')
        throw create.MARINA_ERR_MODEL_FILE_EXISTS(`Model file already exists ${fileName}`);
      throw cause;
    }
    return target;
  } catch (error) {
    if ((error as { code?: string }).code?.startsWith('MARINA_ERR_')) throw error;
    if (options.signal?.aborted) throw cancelled(url, error);
    if (idle.signal.aborted) {
      throw create.MARINA_ERR_DOWNLOAD_TIMEOUT(
        `Failed to download archive from: ${url} (nothing received for ${idleTimeoutMs} ms, the limit of download_idle_timeout_ms)`,
        { cause: error, details: { downloadIdleTimeoutMs: idleTimeoutMs } },
      );
    }
    if (total.aborted) {
      throw create.MARINA_ERR_DOWNLOAD_TIMEOUT(
        `Failed to download archive from: ${url} (no complete response within ${timeoutMs} ms, the limit of download_timeout_ms)`,
        { cause: error, details: { downloadTimeoutMs: timeoutMs } },
      );
    }
    throw create.MARINA_ERR_DOWNLOAD_FAILED(`Failed to download archive from: ${url} (${(error as Error).message})`, {
      cause: error,
    });
  } finally {
    clearTimeout(idleTimer);
    release();
    // Whatever happened, the partial file goes: only a complete archive is ever linked into the store.
    await unlink(temp).catch(() => undefined);
  }
}

function cancelled(url: string, cause?: unknown) {
  return create.MARINA_ERR_DOWNLOAD_CANCELLED(
    `Download of ${url} cancelled: the client that asked for it went away`,
    cause === undefined ? {} : { cause },
  );
}
