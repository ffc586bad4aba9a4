/**
 * Token authorization as TorchServe does it (key_file.json, `Authorization: Bearer <key>`),
 * except that a failure is a 401 that says what went wrong instead of TorchServe's 400.
 */
import { MarinaError } from '@marina/errors';
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { chmod, readFile, rename, writeFile } from 'node:fs/promises';
import { dirname, join, basename } from 'node:path';
import type { FastifyInstance, FastifyReply, FastifyRequest, FastifySchema, onRequestHookHandler } from 'fastify';
import { authErrors } from './auth-errors.ts';
import { sendTorchServeError } from '../protocols/error-map.ts';
import { setTorchServeHeaders } from './torchserve-response.ts';

/** Which key a request must carry: `API` only guards `/token`. */
type KeyType = 'inference' | 'management' | 'API';

/** Which key a route needs (`none`: open, e.g. the API description), declared in the route's fastify `config.auth`. */
export type RouteAuth = KeyType | 'none';

declare module 'fastify' {
  interface FastifyContextConfig {
    /** The key this route requires; set by `declareRouteAuth` for every route of a plugin, or per route. */
    auth?: RouteAuth;
  }
}

/**
 * Random bytes per key. TorchServe uses 6 (48 bits, 8 characters), which an attacker who can
 * reach the port could search online and anyone holding an old copy of the file could guess
 * offline; 24 bytes (192 bits, 32 URL-safe characters) costs nothing and puts guessing out of
 * reach. The file format is unchanged: keys are opaque strings.
 */
const KEY_BYTES = 24;

interface ExpiringKey {
  key: string;
  /** Epoch ms after which the key is refused. */
  expiresAtMs: number;
}

/** The content of key_file.json in TorchServe's format. */
export interface KeyFile {
  management: { key: string; 'expiration time': string };
  inference: { key: string; 'expiration time': string };
  API: { key: string };
}

/** `malformed`: an `Authorization: Bearer …` header that is not one key (`Bearer k1 k2`, `Bearer` alone). */
type TokenCheckResult = 'ok' | 'missing' | 'malformed' | 'wrong' | 'expired';

export interface TokenAuthorization {
  /** Absolute path of key_file.json, quoted in error messages. */
  readonly keyFilePath: string;
  readonly tokenExpirationMin: number;
  /** token_failure_status: the HTTP status of a token failure, 401 (default) or TorchServe's 400. */
  readonly failureStatus: 400 | 401;
  /** Checks a raw `Authorization` header value against the key of `keyType`. */
  check(keyType: KeyType, authorizationHeader: string | undefined): TokenCheckResult;
  /** Gives `keyType` a new key and a new expiry and rewrites key_file.json. */
  rotate(keyType: 'inference' | 'management'): Promise<void>;
  /** The keys as written to key_file.json. */
  keyFile(): KeyFile;
}

export interface CreateTokenAuthorizationOptions {
  keyFilePath: string;
  /** Minutes the inference and management keys stay valid (token_expiration_min). Default 60. */
  tokenExpirationMin?: number;
  /**
   * token_key_file: read the keys from keyFilePath (never expiring) instead of generating and writing
   * them, so that every replica behind one Service has the same keys; rotate() refuses.
   */
  isKeyFileProvided?: boolean;
  /** token_failure_status: 401 (default) or 400, TorchServe's status for a token failure. */
  failureStatus?: 400 | 401;
  /** Epoch ms; injectable for tests. */
  now?: () => number;
}

/** RFC 7235: the auth scheme is case-insensitive (`bearer`, `BEARER` …). */
const BEARER = /^Bearer\s+(\S+)$/i;
/** The Bearer scheme, however the rest is written. */
const BEARER_SCHEME = /^\s*Bearer(\s|$)/i;

function newKey(): string {
  return randomBytes(KEY_BYTES).toString('base64url');
}

/** Compares through fixed-length digests so neither content nor length leaks through timing. */
function isSameKey(given: string, expected: string): boolean {
  const a = createHash('sha256').update(given).digest();
  const b = createHash('sha256').update(expected).digest();
  return timingSafeEqual(a, b);
}

/** Writes atomically with mode 0600, so the file is never readable by others, not even briefly. */
async function writeKeyFile(path: string, content: KeyFile): Promise<void> {
  const temp = join(dirname(path), `.${basename(path)}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`);
  await writeFile(temp, `${JSON.stringify(content, null, 2)}\n`, { mode: 0o600 });
  await chmod(temp, 0o600);
  await rename(temp, path);
}

/**
 * Creates fresh inference, management and API keys and writes them to `keyFilePath`
 * (mode 0600), as TorchServe does at every start.
 * @throws MARINA_ERR_KEY_FILE_INVALID when the file cannot be written.
 */
export async function createTokenAuthorization(options: CreateTokenAuthorizationOptions): Promise<TokenAuthorization> {
  const { keyFilePath } = options;
  const tokenExpirationMin = options.tokenExpirationMin ?? 60;
  const now = options.now ?? Date.now;
  const expiring = (): ExpiringKey => ({ key: newKey(), expiresAtMs: now() + tokenExpirationMin * 60_000 });
  const provided = options.isKeyFileProvided ? await readKeyFile(keyFilePath) : undefined;
  const keys: { inference: ExpiringKey; management: ExpiringKey; api: string } = provided
    ? {
        inference: { key: provided.inference.key, expiresAtMs: Infinity },
        management: { key: provided.management.key, expiresAtMs: Infinity },
        api: provided.API.key,
      }
    : { inference: expiring(), management: expiring(), api: newKey() };

  const keyFile = (): KeyFile => ({
    management: { key: keys.management.key, 'expiration time': new Date(keys.management.expiresAtMs).toISOString() },
    inference: { key: keys.inference.key, 'expiration time': new Date(keys.inference.expiresAtMs).toISOString() },
    API: { key: keys.api },
  });
  const save = async (): Promise<void> => {
    try {
      await writeKeyFile(keyFilePath, keyFile());
    } catch (cause) {
      throw authErrors.create.MARINA_ERR_KEY_FILE_INVALID(
        `cannot write key file '${keyFilePath}': ${(cause as Error).message}; check that its folder exists and is writable`,
        { cause },
      );
    }
  };
  if (!provided) await save();

  return {
    failureStatus: options.failureStatus ?? 401,
    keyFilePath,
    tokenExpirationMin,
    keyFile,
    check(keyType, authorizationHeader) {
      const match = authorizationHeader === undefined ? null : BEARER.exec(authorizationHeader);
      if (!match)
        return authorizationHeader !== undefined && BEARER_SCHEME.test(authorizationHeader) ? 'malformed' : 'missing';
      const token = match[1]!;
      if (keyType === 'API') return isSameKey(token, keys.api) ? 'ok' : 'wrong';
      const expected = keys[keyType];
      if (!isSameKey(token, expected.key)) return 'wrong';
      return now() > expected.expiresAtMs ? 'expired' : 'ok';
    },
    async rotate(keyType) {
      if (provided) {
        throw authErrors.create.MARINA_ERR_KEY_FILE_PROVIDED(
          `the keys come from token_key_file '${keyFilePath}', which Marina does not write: change the ${keyType} key there (e.g. in the Kubernetes Secret) and restart the server`,
        );
      }
      keys[keyType] = expiring();
      await save();
    },
  };
}

/**
 * Reads key_file.json (for CLIs and tests).
 * @throws MARINA_ERR_KEY_FILE_INVALID when missing, unreadable or not in TorchServe's format.
 */
export async function readKeyFile(keyFilePath: string): Promise<KeyFile> {
  let parsed: unknown;
  try {
    parsed = JSON.parse(await readFile(keyFilePath, 'utf8'));
  } catch (cause) {
    throw authErrors.create.MARINA_ERR_KEY_FILE_INVALID(
      `cannot read key file '${keyFilePath}': ${(cause as Error).message}`,
      { cause },
    );
  }
  const file = parsed as Partial<KeyFile> | null;
  const isKey = (v: unknown): boolean =>
    typeof v === 'object' && v !== null && typeof (v as { key?: unknown }).key === 'string';
  if (!file || !isKey(file.management) || !isKey(file.inference) || !isKey(file.API)) {
    throw authErrors.create.MARINA_ERR_KEY_FILE_INVALID(
      `key file '${keyFilePath}' must hold "management", "inference" and "API" objects with a "key"; delete it and restart the server`,
    );
  }
  return file as KeyFile;
}

function failure(tokens: TokenAuthorization, keyType: KeyType, result: Exclude<TokenCheckResult, 'ok'>): MarinaError {
  const error = failureOf(tokens, keyType, result);
  // TorchServe answers a token failure with 400 (its InvalidKeyException is a ModelException); token_failure_status=400 asks for that.
  return tokens.failureStatus === 401
    ? error
    : new MarinaError(error.code, error.message, tokens.failureStatus, { details: error.details ?? {} });
}

function failureOf(tokens: TokenAuthorization, keyType: KeyType, result: Exclude<TokenCheckResult, 'ok'>) {
  // The file's name only: a client without a key must not learn the server's paths (its terminal shows the whole path).
  const keyFile = basename(tokens.keyFilePath);
  const where = `the ${keyType} key is in the server's ${keyFile}`;
  switch (result) {
    case 'malformed':
      return authErrors.create.MARINA_ERR_TOKEN_INVALID(
        `Token Authorization failed: the Authorization header must be 'Bearer <key>', one key without spaces; ${where}.`,
      );
    case 'missing':
      return authErrors.create.MARINA_ERR_TOKEN_MISSING(
        `Token Authorization failed: no token was provided. Send 'Authorization: Bearer <key>'; ${where} (or start the server with --disable-token-auth).`,
      );
    case 'wrong':
      return authErrors.create.MARINA_ERR_TOKEN_INVALID(
        keyType === 'API'
          ? `Token Authorization failed: the token is not the API key, which /token needs; ${where}.`
          : `Token Authorization failed: the token is incorrect for the ${keyType} API; ${where}.`,
      );
    case 'expired':
      return authErrors.create.MARINA_ERR_TOKEN_EXPIRED(
        `Token Authorization failed: the ${keyType} token expired (keys last ${tokens.tokenExpirationMin} min). Rotate it with '/token?type=${keyType}' and the API key, then read ${keyFile} again.`,
      );
  }
}

/**
 * Declares the key every route registered in `app` (an encapsulated plugin) needs, unless a route
 * sets its own `config.auth`. Authorization is then decided on the route fastify matched, after it
 * decoded and normalised the path, never on the raw URL (`/%6dodels` is `/models`).
 */
export function declareRouteAuth(app: FastifyInstance, auth: RouteAuth): void {
  app.addHook('onRoute', (route) => {
    route.config = { ...(route.config ?? {}), auth: route.config?.auth ?? auth };
  });
}

export interface CreateTokenHookOptions {
  /**
   * The keys of the APIs this listener serves: `['inference']`, `['management']`, or both when the
   * two APIs share one address. A matched route requires the key it declares (`config.auth`); a
   * matched route that declares none requires the strongest key the listener serves (management
   * over inference), and a request that matches no route (404) any of the listener's keys.
   */
  listenerKeys: ReadonlyArray<'inference' | 'management'>;
  tokens: TokenAuthorization;
}

/**
 * A fastify `onRequest` hook that rejects requests without the right bearer token with a 401
 * `InvalidKeyException` body (plus `marinaCode`) and `WWW-Authenticate: Bearer`. The key comes
 * from the matched route's `config.auth` (see `declareRouteAuth`): `/token` needs the API key,
 * routes declared `none` (the API description) are open. Do not add it to the metrics listener.
 */
export function createTokenHook(options: CreateTokenHookOptions): onRequestHookHandler {
  const { tokens, listenerKeys } = options;
  if (listenerKeys.length === 0) throw new TypeError('createTokenHook needs at least one listener key');
  const strongest: KeyType = listenerKeys.includes('management') ? 'management' : 'inference';
  return function tokenHook(request: FastifyRequest, reply: FastifyReply, done: (err?: Error) => void) {
    const declared = request.is404 ? undefined : request.routeOptions.config?.auth;
    if (declared === 'none') return done();
    const candidates: readonly KeyType[] =
      declared !== undefined ? [declared] : request.is404 ? listenerKeys : [strongest];
    let first: Exclude<TokenCheckResult, 'ok'> | undefined;
    for (const keyType of candidates) {
      const result = tokens.check(keyType, request.headers.authorization);
      if (result === 'ok') return done();
      first ??= result;
    }
    const keyType = candidates[0]!;
    const result = first!;
    reply.header(
      'WWW-Authenticate',
      `Bearer realm="marina-${keyType}"${result === 'missing' ? '' : ', error="invalid_token"'}`,
    );
    sendTorchServeError(reply, failure(tokens, keyType, result));
  };
}

/**
 * `/token?type=inference|management` on the management API (any method, as TorchServe): rotates
 * that key and rewrites key_file.json; the body is empty (TorchServe's shape), the new key is in
 * the file. The route declares the API key (`config.auth`) for the listener's token hook and checks
 * it again itself, so it never rotates a key without the API key, whatever hooks run before it.
 */
export async function tokenRoutes(app: FastifyInstance, options: { tokens: TokenAuthorization }): Promise<void> {
  const { tokens } = options;
  app.route({
    method: ['GET', 'POST', 'PUT', 'DELETE', 'PATCH'],
    url: '/token',
    config: { auth: 'API' },
    schema: {
      description: 'Rotate a key: ?type=management or ?type=inference; needs the API key.',
      querystring: { type: 'object', properties: { type: { type: 'string' } } },
    } as FastifySchema,
    handler: async (request, reply) => {
      const result = tokens.check('API', request.headers.authorization);
      if (result !== 'ok') {
        reply.header(
          'WWW-Authenticate',
          `Bearer realm="marina-API"${result === 'missing' ? '' : ', error="invalid_token"'}`,
        );
        return sendTorchServeError(reply, failure(tokens, 'API', result));
      }
      const type = (request.query as Record<string, unknown>).type;
      if (type !== 'inference' && type !== 'management') {
        return sendTorchServeError(
          reply,
          authErrors.create.MARINA_ERR_TOKEN_TYPE_INVALID(
            `'/token' needs type=inference or type=management, got ${type === undefined ? 'none' : `'${String(type)}'`}`,
          ),
        );
      }
      try {
        await tokens.rotate(type);
      } catch (error) {
        return sendTorchServeError(reply, error);
      }
      setTorchServeHeaders(request, reply, 200);
      return reply.code(200).send('');
    },
  });
}
