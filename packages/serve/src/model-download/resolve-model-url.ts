/**
 * Where a register `url` points, with TorchServe's rules: a plain file name (or folder) in the
 * model store, or a URL that must match `allowed_urls`. http(s) archives are streamed into the
 * store under a size limit and a time limit, then moved into place without overwriting anything.
 */
import { randomBytes } from 'node:crypto';
import { constants as fsConstants, createReadStream, createWriteStream } from 'node:fs';
import { link, open, readdir, realpath, stat, unlink, type FileHandle } from 'node:fs/promises';
import { basename, dirname, isAbsolute, join, normalize, resolve as resolvePath } from 'node:path';
import { resolveInside } from '@marina/archive';
import { Readable, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { boundText } from '../bounded-text.ts';
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
  const shown = boundText(url);
  const relative = () => create.MARINA_ERR_URL_RELATIVE_PATH(`Relative path is not allowed in url: ${shown}`);
  if (url.includes('..') || url.includes('\\')) throw relative();
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch (cause) {
    throw create.MARINA_ERR_MODEL_URL_INVALID(`model url '${shown}' is not a valid URL`, { cause });
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
      throw create.MARINA_ERR_MODEL_URL_INVALID(
        `model url '${shown}' has a malformed percent-encoding in '${boundText(segment, 40)}'`,
        {
          cause,
        },
      );
    }
    if (decoded === '.' || decoded === '..') throw relative();
    if (/[/\\]/.test(decoded)) {
      throw create.MARINA_ERR_MODEL_URL_INVALID(
        `model url '${shown}' has an encoded slash or backslash in '${boundText(segment, 40)}'; write path separators as '/'`,
      );
    }
    // eslint-disable-next-line no-control-regex
    // biome-ignore lint/suspicious/noControlCharactersInRegex: a URL that decodes to control characters is refused, so the regex names them.
    if (/[\u0000-\u001f\u007f]/.test(decoded)) {
      throw create.MARINA_ERR_MODEL_URL_INVALID(`model url '${shown}' has a control character in its path`);
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
    throw create.MARINA_ERR_MODEL_URL_INVALID(`model url '${shown}' is not a valid file:// URL`, { cause });
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
    throw create.MARINA_ERR_URL_NOT_ALLOWED(`Given URL ${boundText(url)} does not match any allowed URL(s)`, {
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
        `Failed to download archive from: ${boundText(url)} (${this.#inUse} downloads are already running, the limit of max_concurrent_downloads); retry when one has finished`,
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
 * - `name.mar` (no `/` or `\\`): that file or folder in the model store;
 * - `file:///abs/path`: must match allowed_urls, also once symlinks are resolved; an archive is
 *   copied into the store (as TorchServe), a model folder used where it is;
 * - `/abs/folder`: a model folder, used where it is (allowed_urls must allow its file:// URL);
 * - `http(s)://…/name.mar`: must match allowed_urls; downloaded to `<store>/name.mar`.
 * Only regular files and folders are ever opened: a FIFO, a device or a socket is refused from its
 * `stat`, so no register can leave a thread of Node's pool waiting on it.
 * @throws MARINA_ERR_URL_RELATIVE_PATH, MARINA_ERR_URL_NOT_ALLOWED, MARINA_ERR_MODEL_URL_INVALID,
 *   MARINA_ERR_MODEL_FILE_NOT_FOUND, MARINA_ERR_MODEL_STORE_NOT_CONFIGURED (404);
 *   MARINA_ERR_DOWNLOAD_FAILED, _TOO_LARGE, _TIMEOUT, _NOT_ARCHIVE (400); MARINA_ERR_MODEL_FILE_EXISTS (500);
 *   MARINA_ERR_MODEL_STORE_FULL (507).
 */
export async function resolveModelUrl(options: ResolveModelUrlOptions): Promise<ResolvedModelUrl> {
  const { url, modelStore, allowedUrls } = options;
  const shown = boundText(url);
  if (url.includes('..')) throw create.MARINA_ERR_URL_RELATIVE_PATH(`Relative path is not allowed in url: ${shown}`);
  if (URL_SCHEME.test(url)) {
    const allowed = assertUrlAllowed(url, allowedUrls);
    if (allowed.scheme === 'file') {
      const path = await resolveAllowedPath(allowed.filePath!, url, allowedUrls);
      return copyIntoStore(path, url, modelStore, options);
    }
    if (allowed.scheme !== 'http' && allowed.scheme !== 'https') {
      throw create.MARINA_ERR_MODEL_URL_INVALID(
        `model url '${shown}' uses an unsupported scheme '${boundText(allowed.scheme, 20)}'; use file://, http:// or https://`,
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
    const path = await resolveAllowedPath(allowed.filePath ?? normalize(url), url, allowedUrls);
    await assertModelFolder(path, url);
    return { archivePath: path, isDownloaded: false };
  }
  if (url.includes('/') || url.includes('\\') || isAbsolute(url)) {
    throw create.MARINA_ERR_MODEL_URL_INVALID(
      `model url '${shown}' must be a file name in the model store (no '/' or '\\'), or a file:// or http(s):// URL allowed by allowed_urls`,
    );
  }
  if (modelStore === undefined)
    throw create.MARINA_ERR_MODEL_STORE_NOT_CONFIGURED('Model store has not been configured.');
  if (url === '' || url === '.') throw create.MARINA_ERR_MODEL_FILE_NOT_FOUND(`Model not found at: ${shown}`);
  const path = storePath(modelStore, url);
  const stats = await stat(path).catch(() => undefined);
  if (!stats) throw create.MARINA_ERR_MODEL_FILE_NOT_FOUND(`Model not found at: ${shown}`);
  if (!stats.isFile() && !stats.isDirectory()) throw notAnArchive(url, stats);
  return { archivePath: path, isDownloaded: false };
}

async function isDirectory(path: string): Promise<boolean> {
  try {
    return (await stat(path)).isDirectory();
  } catch {
    return false;
  }
}

/** What a path that is neither a regular file nor a folder is, for the message. */
function kindOf(stats: import('node:fs').Stats): string {
  if (stats.isFIFO()) return 'a FIFO';
  if (stats.isSocket()) return 'a socket';
  if (stats.isCharacterDevice() || stats.isBlockDevice()) return 'a device';
  return 'not a regular file';
}

function notAnArchive(url: string, stats: import('node:fs').Stats) {
  return create.MARINA_ERR_MODEL_URL_INVALID(
    `model url '${boundText(url)}' names ${kindOf(stats)}, not an archive file or a model folder; register a .mar, .tar.gz or model folder`,
  );
}

/**
 * The real path of a `file://` URL's path (every symlink resolved), which must match allowed_urls
 * as well: a link inside an allowed folder cannot lead outside it. The URL itself was matched first,
 * so nothing outside allowed_urls is ever looked at (its existence is not told either).
 * @throws MARINA_ERR_MODEL_FILE_NOT_FOUND, MARINA_ERR_URL_NOT_ALLOWED
 */
async function resolveAllowedPath(path: string, url: string, allowedUrls: readonly string[]): Promise<string> {
  let real: string;
  try {
    real = await realpath(path);
  } catch {
    throw create.MARINA_ERR_MODEL_FILE_NOT_FOUND(`Model not found at: ${boundText(url)}`);
  }
  if (real !== path && !isUrlAllowed(pathToFileURL(real).href, allowedUrls)) {
    throw create.MARINA_ERR_URL_NOT_ALLOWED(
      `Given URL ${boundText(url)} does not match any allowed URL(s) once its symbolic links are resolved`,
      { details: { allowedUrls: [...allowedUrls] } },
    );
  }
  return real;
}

/**
 * A folder registered where it is must look like a model: MAR-INF/MANIFEST.json, or an .onnx file
 * at its top. Any other folder (`/etc`, `/dev`) is refused without reading or naming what is in it.
 * @throws MARINA_ERR_MODEL_URL_INVALID
 */
async function assertModelFolder(dir: string, url: string): Promise<void> {
  const manifest = await stat(join(dir, 'MAR-INF', 'MANIFEST.json')).catch(() => undefined);
  if (manifest?.isFile()) return;
  const names = await readdir(dir).catch(() => [] as string[]);
  if (names.some((name) => /\.onnx$/i.test(name))) return;
  throw create.MARINA_ERR_MODEL_URL_INVALID(
    `model url '${boundText(url)}' names a folder that is not a model folder (no MAR-INF/MANIFEST.json and no .onnx file at its top); register a .mar, .tar.gz or a folder made by model-archiver`,
  );
}

/** ENOSPC or EDQUOT: the model store's disk (or quota) is full. */
function isDiskFull(error: unknown): boolean {
  const code = (error as NodeJS.ErrnoException | undefined)?.code;
  return code === 'ENOSPC' || code === 'EDQUOT';
}

function storeFull(url: string, cause: unknown) {
  return create.MARINA_ERR_MODEL_STORE_FULL(
    `Failed to store the archive from: ${boundText(url)} (no space left in the model store); the partial file was removed. Free space in the model store (or raise its quota) and register again`,
    { cause },
  );
}

/** Zip (`PK\x03\x04`, `PK\x05\x06`) or gzip (`\x1f\x8b`) magic at the start of a file. */
function isArchiveHead(head: Buffer, bytesRead: number): boolean {
  const isZip =
    bytesRead >= 4 &&
    head[0] === 0x50 &&
    head[1] === 0x4b &&
    (head[2] === 3 || head[2] === 5) &&
    (head[3] === 4 || head[3] === 6);
  const isGzip = bytesRead >= 2 && head[0] === 0x1f && head[1] === 0x8b;
  return isZip || isGzip;
}

/**
 * TorchServe copies a `file://` archive into the model store (like a download), so the store
 * holds every registered archive and unregister removes the copy. A model folder, or a file already
 * in the store, is used where it is. The file is opened without blocking and checked from its open
 * descriptor (a regular file whose first bytes are a zip's or a gzip's), then copied through a
 * temporary file under the download time limit: a failed copy leaves nothing in the store.
 */
async function copyIntoStore(
  path: string,
  url: string,
  modelStore: string | undefined,
  options: ResolveModelUrlOptions,
): Promise<ResolvedModelUrl> {
  const stats = await stat(path);
  if (stats.isDirectory()) {
    await assertModelFolder(path, url);
    return { archivePath: path, isDownloaded: false };
  }
  if (!stats.isFile()) throw notAnArchive(url, stats);
  // O_NONBLOCK: should the path have become a FIFO since the stat, open() still returns at once.
  const handle = await open(path, fsConstants.O_RDONLY | fsConstants.O_NONBLOCK | fsConstants.O_NOFOLLOW).catch(
    (cause: unknown) => {
      throw create.MARINA_ERR_DOWNLOAD_FAILED(`Failed to copy archive from: ${boundText(url)} (it cannot be opened)`, {
        cause,
      });
    },
  );
  let isHandleOwned = true;
  try {
    const opened = await handle.stat();
    if (!opened.isFile() || opened.ino !== stats.ino || opened.dev !== stats.dev) throw notAnArchive(url, opened);
    const head = Buffer.alloc(4);
    const { bytesRead } = await handle.read(head, 0, 4, 0);
    if (!isArchiveHead(head, bytesRead)) {
      throw create.MARINA_ERR_DOWNLOAD_NOT_ARCHIVE(
        `Failed to copy archive from: ${boundText(url)} (the file is neither a .mar/zip nor a .tar.gz archive)`,
      );
    }
    if (modelStore === undefined || dirname(path) === resolvePath(modelStore))
      return { archivePath: path, isDownloaded: false };
    const fileName = fileNameFromUrl(url);
    const target = storePath(modelStore, fileName);
    if (await exists(target)) throw create.MARINA_ERR_MODEL_FILE_EXISTS(`Model file already exists ${fileName}`);
    isHandleOwned = false;
    await copyThroughTemp({ handle, url, modelStore, fileName, target, options });
    return { archivePath: target, isDownloaded: true };
  } finally {
    if (isHandleOwned) await handle.close().catch(() => undefined);
  }
}

/** Copies an open file into `<store>/.<name>.<hex>.download`, then links it to `target`; the temporary file always goes. */
async function copyThroughTemp(copy: {
  handle: FileHandle;
  url: string;
  modelStore: string;
  fileName: string;
  target: string;
  options: ResolveModelUrlOptions;
}): Promise<void> {
  const { handle, url, modelStore, fileName, target, options } = copy;
  const temp = join(modelStore, `.${fileName}.${randomBytes(6).toString('hex')}.download`);
  const timeoutMs = options.downloadTimeoutMs ?? DEFAULT_DOWNLOAD_TIMEOUT_MS;
  const total = AbortSignal.timeout(timeoutMs);
  const signal = AbortSignal.any([total, ...(options.signal ? [options.signal] : [])]);
  try {
    await pipeline(
      createReadStream('', { fd: handle, start: 0 }),
      createWriteStream(temp, { flags: 'wx', mode: 0o644, flush: true }),
      { signal },
    );
    await linkNew(temp, target, fileName);
  } catch (error) {
    if ((error as { code?: string }).code?.startsWith('MARINA_ERR_')) throw error;
    if (isDiskFull(error)) throw storeFull(url, error);
    if (options.signal?.aborted) throw cancelled(url, error);
    if (total.aborted) {
      throw create.MARINA_ERR_DOWNLOAD_TIMEOUT(
        `Failed to copy archive from: ${boundText(url)} (not copied within ${timeoutMs} ms, the limit of download_timeout_ms)`,
        { cause: error, details: { downloadTimeoutMs: timeoutMs } },
      );
    }
    throw create.MARINA_ERR_DOWNLOAD_FAILED(`Failed to copy archive from: ${boundText(url)}`, { cause: error });
  } finally {
    await handle.close().catch(() => undefined);
    await unlink(temp).catch(() => undefined);
  }
}

/** link() fails if the name exists, so a file that appeared meanwhile is never overwritten (rename would). */
async function linkNew(temp: string, target: string, fileName: string): Promise<void> {
  try {
    await link(temp, target);
  } catch (cause) {
    if ((cause as NodeJS.ErrnoException).code === 'EEXIST')
      throw create.MARINA_ERR_MODEL_FILE_EXISTS(`Model file already exists ${fileName}`);
    throw cause;
  }
}

/** `.<name>.<12 hex>.download`: a download or copy that was running when the server died. */
const TEMP_DOWNLOAD = /^\..+\.[0-9a-f]{12}\.download$/;

/**
 * Removes the temporary files of downloads and copies that never finished (the server was killed
 * during one) from the model store; called at start-up, before anything downloads. Returns the names removed.
 */
export async function removeStaleDownloads(modelStore: string): Promise<string[]> {
  const names = await readdir(modelStore).catch(() => [] as string[]);
  const stale = names.filter((name) => TEMP_DOWNLOAD.test(name));
  await Promise.all(stale.map((name) => unlink(join(modelStore, name)).catch(() => undefined)));
  return stale;
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
    throw create.MARINA_ERR_MODEL_URL_INVALID(`model url '${boundText(url)}' is not a valid URL`, { cause });
  }
  if (!SAFE_FILE_NAME.test(name)) {
    throw create.MARINA_ERR_MODEL_URL_INVALID(
      `model url '${boundText(url)}' does not end in a usable file name (got '${boundText(name, 80)}'); the last path segment names the file in the model store, e.g. https://host/models/resnet.mar`,
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
        `Failed to download archive from: ${boundText(url)} (HTTP ${response.status} from ${boundText(current)})`,
      );
    }
    return response;
  }
  throw create.MARINA_ERR_DOWNLOAD_FAILED(
    `Failed to download archive from: ${boundText(url)} (more than ${MAX_REDIRECTS} redirects)`,
  );
}

async function isArchive(path: string): Promise<boolean> {
  const handle = await open(path, 'r');
  try {
    const head = Buffer.alloc(4);
    const { bytesRead } = await handle.read(head, 0, 4, 0);
    return isArchiveHead(head, bytesRead);
  } finally {
    await handle.close();
  }
}

async function downloadIntoStore(url: string, modelStore: string, options: ResolveModelUrlOptions): Promise<string> {
  const maxBytes = options.maxDownloadBytes ?? DEFAULT_MAX_DOWNLOAD_BYTES;
  const timeoutMs = options.downloadTimeoutMs ?? DEFAULT_DOWNLOAD_TIMEOUT_MS;
  const idleTimeoutMs = options.downloadIdleTimeoutMs ?? DEFAULT_DOWNLOAD_IDLE_TIMEOUT_MS;
  const shown = boundText(url);
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
      `Failed to download archive from: ${shown} (larger than the ${maxBytes}-byte limit)`,
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
        `Failed to download archive from: ${shown} (the file is neither a .mar/zip nor a .tar.gz archive)`,
      );
    }
    await linkNew(temp, target, fileName);
    return target;
  } catch (error) {
    if ((error as { code?: string }).code?.startsWith('MARINA_ERR_')) throw error;
    if (isDiskFull(error)) throw storeFull(url, error);
    if (options.signal?.aborted) throw cancelled(url, error);
    if (idle.signal.aborted) {
      throw create.MARINA_ERR_DOWNLOAD_TIMEOUT(
        `Failed to download archive from: ${shown} (nothing received for ${idleTimeoutMs} ms, the limit of download_idle_timeout_ms)`,
        { cause: error, details: { downloadIdleTimeoutMs: idleTimeoutMs } },
      );
    }
    if (total.aborted) {
      throw create.MARINA_ERR_DOWNLOAD_TIMEOUT(
        `Failed to download archive from: ${shown} (no complete response within ${timeoutMs} ms, the limit of download_timeout_ms)`,
        { cause: error, details: { downloadTimeoutMs: timeoutMs } },
      );
    }
    // The cause's own message may quote the URL (credentials and all): bounded and redacted too.
    throw create.MARINA_ERR_DOWNLOAD_FAILED(
      `Failed to download archive from: ${shown} (${boundText((error as Error).message)})`,
      { cause: error },
    );
  } finally {
    clearTimeout(idleTimer);
    release();
    // Whatever happened, the partial file goes: only a complete archive is ever linked into the store.
    await unlink(temp).catch(() => undefined);
  }
}

function cancelled(url: string, cause?: unknown) {
  return create.MARINA_ERR_DOWNLOAD_CANCELLED(
    `Download of ${boundText(url)} cancelled: the client that asked for it went away`,
    cause === undefined ? {} : { cause },
  );
}
