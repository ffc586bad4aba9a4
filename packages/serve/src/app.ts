import type { StartupProgressEvent } from './startup-progress.ts';
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { STATUS_CODES } from 'node:http';
import type { Socket } from 'node:net';
import Fastify, {
  type FastifyError,
  type FastifyInstance,
  type FastifyPluginAsync,
  type FastifyReply,
  type FastifyRequest,
} from 'fastify';
import { closestName } from '@marina/errors';
import { resourceLimitsOf, type ServerConfig } from './config/server-config.ts';
import { createModelCaches } from './cache/model-caches.ts';
import { createServeError } from './errors.ts';
import { ModelRegistry } from './registry/model-registry.ts';
import { loadStartupModels, type StartupLoadResult } from './startup-loading.ts';
import { inferenceRoutes } from './routes/inference.ts';
import { sendError, torchServeRestError } from './protocols/error-map.ts';
import { answeredPriority } from './routes/server-timing.ts';
import {
  createTracing,
  tracingSettingsFrom,
  type RequestSpanOptions,
  type RequestTrace,
  type Tracing,
} from './tracing/tracing.ts';
import { MARINA_VERSION } from './version.ts';
import { managementErrors } from './routes/management-errors.ts';
import { TS_METHOD_NOT_ALLOWED, TS_RESOURCE_NOT_FOUND } from './protocols/torchserve-texts.ts';
import type { ServerLogs } from './logging/server-logs.ts';
import { apiDescriptionRoutes, recordRoutes } from './routes/api-description.ts';
import { apiExplorerRoutes } from './routes/api-explorer.ts';
import type { ApiName } from './api-name.ts';
import { DataPlane } from './protocols/data-plane.ts';
import { ResponseWriteGuard } from './response-write-guard.ts';
import { oipRestRoutes } from './protocols/oip-rest/oip-rest-routes.ts';

export type { ApiName };

export interface AppPlugin {
  api: ApiName;
  // biome-ignore lint/suspicious/noExplicitAny: each plugin declares its own options (registry and config, plus `options`); fastify's plugin type is contravariant in them.
  plugin: FastifyPluginAsync<{ registry: ModelRegistry; config: ServerConfig }> | FastifyPluginAsync<any>;
  /** Extra options for the plugin (registry and config are always passed). */
  options?: Record<string, unknown>;
}

export interface BuildAppOptions {
  /** Plugins registered on the listeners before they are ready (management routes, metrics, auth hooks, …). */
  plugins?: AppPlugin[];
  /** Fastify logger option; false by default (the CLI passes its own). */
  logger?: boolean | Record<string, unknown>;
  /** Where the registry, the workers and start-up loading report (worker crashes, failed starts, cache evictions); Fastify's logger when not given. */
  log?: (level: 'info' | 'warn' | 'error', message: string) => void;
  /**
   * The process's memory now, bytes, measured before and after each model load (default: the
   * resident set, see readProcessMemoryBytes). Tests that check eviction order pass a deterministic one.
   */
  readMemoryBytes?: () => number;
  /** TorchServe's log files (access_log.log, ts_log.log, model_log.log); startServer passes them, tests may leave them out. */
  logs?: ServerLogs;
  /** Where the OTEL_* tracing variables are read (default process.env). */
  env?: Readonly<Record<string, string | undefined>>;
}

export { listStartupModels, type StartupLoadResult } from './startup-loading.ts';

export interface MarinaApp {
  config: ServerConfig;
  registry: ModelRegistry;
  /** Metadata, readiness, admission and inference below every protocol adapter (OIP REST and gRPC, TorchServe gRPC). */
  dataPlane: DataPlane;
  /** Closes connections whose answers are not read (response_write_timeout, max_pending_response_bytes). */
  responseWrites: ResponseWriteGuard;
  /** OpenTelemetry tracing, when on (enable_tracing or OTEL_TRACES_EXPORTER); undefined when off. */
  tracing: Tracing | undefined;
  /** Serves the inference API. */
  inference: FastifyInstance;
  /** The same instance as `inference` when both addresses are equal (TorchServe: one listener). */
  management: FastifyInstance;
  metrics: FastifyInstance;
  /**
   * Loads `load_models` from the model store; a model that fails is logged, reported and skipped.
   * `onProgress` hears each model start loading and finish (or fail).
   */
  loadStartupModels(options?: { onProgress?: (event: StartupProgressEvent) => void }): Promise<StartupLoadResult>;
  /** Stops accepting, drains in-flight jobs, stops workers and closes the listeners. Idempotent. */
  close(): Promise<void>;
}

function sameAddress(a: ServerConfig['inferenceAddress'], b: ServerConfig['inferenceAddress']): boolean {
  return a.protocol === b.protocol && a.host === b.host && a.port === b.port;
}

/** Fastify's `https` option for an https:// address: the PEM files of private_key_file/certificate_file (the loader requires both). */
function tlsOptions(
  config: ServerConfig,
  address: ServerConfig['inferenceAddress'],
): { https: { key: Buffer; cert: Buffer } } | undefined {
  if (address.protocol !== 'https' || !config.privateKeyFile || !config.certificateFile) return undefined;
  return { https: { key: readFileSync(config.privateKeyFile), cert: readFileSync(config.certificateFile) } };
}

/**
 * TorchServe's query decoding, with one difference that matters to scripts: a parameter with an
 * empty value (`?limit=&next_page_token=`) is absent, as if not sent, instead of failing validation.
 * A repeated key becomes an array. Prototype keys are harmless (null-prototype object).
 */
function parseQueryString(query: string): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = Object.create(null);
  for (const [key, value] of new URLSearchParams(query)) {
    if (value === '') continue;
    const previous = out[key];
    if (previous === undefined) out[key] = value;
    else out[key] = Array.isArray(previous) ? [...previous, value] : [previous, value];
  }
  return out;
}

/** Whether `origin` is allowed by cors_allowed_origin (`*`, or a comma list of exact origins). */
function isOriginAllowed(allowed: string, origin: string): boolean {
  return allowed.trim() === '*' || allowed.split(',').some((o) => o.trim() === origin);
}

/** Larger than any request line Node accepts (its header limit is 16 KiB): the router never cuts a parameter itself. */
const ROUTER_MAX_PARAM_LENGTH = 65_536;

/**
 * Longest path parameter a route is given, characters (decoded). Far above the 128 characters the
 * name rule allows (and its percent-encoded forms), so every name that can be registered works on
 * every route; a longer one cannot name anything and is answered 414 without being echoed.
 */
const MAX_PATH_PARAM_CHARS = 1024;

function limitPathParams(request: FastifyRequest, reply: FastifyReply, done: (error?: Error) => void): void {
  const params = request.params as Record<string, unknown> | undefined;
  for (const key in params) {
    const value = params[key];
    if (typeof value === 'string' && value.length > MAX_PATH_PARAM_CHARS) {
      sendError(
        reply,
        createServeError.MARINA_ERR_URI_TOO_LONG(
          `the path parameter ${key} is ${value.length} characters long, over the limit of ${MAX_PATH_PARAM_CHARS}; model names and versions have at most 128 characters`,
        ),
      );
      return;
    }
  }
  done();
}

/**
 * Answers what Node's HTTP parser refuses before fastify sees a request, in TorchServe's error
 * body: headers (or a request line) over Node's limit get 431 MARINA_ERR_HEADERS_TOO_LARGE. That
 * is before any route or key is known, so it cannot wait for the token check. A request that did
 * not arrive in time keeps fastify's 408, anything else its 400.
 */
function clientErrorHandler(this: FastifyInstance, error: NodeJS.ErrnoException, socket: Socket): void {
  if (error.code === 'ECONNRESET' || socket.destroyed) return;
  let head: string;
  let body: string;
  if (error.code === 'HPE_HEADER_OVERFLOW') {
    const e = createServeError.MARINA_ERR_HEADERS_TOO_LARGE(
      'the request line and headers are larger than the server accepts (16 KiB); send shorter headers, and model inputs in the body',
    );
    head = `HTTP/1.1 431 ${STATUS_CODES[431]}`;
    body = torchServeRestError(e).body;
  } else if (error.code === 'ERR_HTTP_REQUEST_TIMEOUT') {
    head = `HTTP/1.1 408 ${STATUS_CODES[408]}`;
    body = `{"error":"${STATUS_CODES[408]}","message":"Client Timeout","statusCode":408}`;
  } else {
    head = `HTTP/1.1 400 ${STATUS_CODES[400]}`;
    body = `{"error":"${STATUS_CODES[400]}","message":"Client Error","statusCode":400}`;
  }
  if (socket.writable) {
    socket.write(
      `${head}\r\nContent-Length: ${Buffer.byteLength(body)}\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n${body}`,
    );
  }
  socket.destroy(error);
}

/** Shared by an app's listeners: set once close() begins. */
interface ClosingState {
  isClosing: boolean;
}

/** Routes never traced: health and readiness probes (the metrics listener is not traced at all). */
const UNTRACED_ROUTES = new Set([
  '/ping',
  '/v2/health/live',
  '/v2/health/ready',
  '/v2/models/:model_name/ready',
  '/v2/models/:model_name/versions/:model_version/ready',
]);

declare module 'fastify' {
  interface FastifyRequest {
    /**
     * The request's trace while tracing is on (set by the listener's hooks, read by the routes, which
     * pass it below the protocols). A request decoration, so every request keeps one shape.
     */
    marinaTrace?: RequestTrace | null;
  }
}

/**
 * A listener's request spans: started when a routed request arrives (joined to its traceparent),
 * ended with its status once answered; every traced answer carries `traceparent`. Called from the
 * listener's own onRequest and onResponse hooks (hooks of their own would cost each request two
 * more hook calls).
 */
interface RequestTracer {
  start(request: FastifyRequest, reply: FastifyReply): void;
  end(request: FastifyRequest, reply: FastifyReply): void;
}

function requestTracer(
  app: FastifyInstance,
  tracing: Tracing,
  address: ServerConfig['inferenceAddress'],
): RequestTracer {
  app.decorateRequest('marinaTrace', null);
  // Span names by method, then route: the same string each time, so the writer's lookup of its
  // encoding needs no new string hashed per request (nor does this lookup: a map per method, not
  // one keyed by method + route, a string built and hashed at each request).
  const namesByMethod = new Map<string, Map<string, string>>();
  return {
    start(request, reply) {
      const route = request.routeOptions.url;
      // Node's request, read directly: fastify's getters for these only forward to it.
      const raw = request.raw;
      const method = raw.method!;
      if (route === undefined || UNTRACED_ROUTES.has(route) || method === 'OPTIONS') return;
      const url = raw.url!;
      const query = url.indexOf('?');
      const path = query < 0 ? url : url.slice(0, query);
      const socket = raw.socket;
      let names = namesByMethod.get(method);
      if (names === undefined) {
        names = new Map();
        // Methods reach here only on a route that takes them (a bounded set), but a bound costs nothing.
        if (namesByMethod.size < 64) namesByMethod.set(method, names);
      }
      let name = names.get(route);
      if (name === undefined) {
        name = `${method} ${route}`;
        // Routes are the server's own (a bounded set), but a bound costs nothing.
        if (names.size < 1024) names.set(route, name);
      }
      const attributes: RequestSpanOptions['attributes'] = {
        'http.request.method': method,
        'http.route': route,
        'url.path': path,
        'url.scheme': address.protocol,
        'server.address': address.host,
        'server.port': (socket.localPort ?? address.port) as number,
        'network.protocol.version': raw.httpVersion,
        'client.address': socket.remoteAddress || undefined,
        'user_agent.original': raw.headers['user-agent'] || undefined,
        // Set later (by startRequest, the route, the answer): declared here, so every request's
        // object has one shape from the start instead of growing a property store as they come.
        'marina.protocol': undefined,
        'marina.model.name': undefined,
        'marina.model.version': undefined,
        'marina.request.id': undefined,
        'http.response.status_code': undefined,
        'error.type': undefined,
      };
      const requestTrace = tracing.startRequest({
        name,
        protocol: route.startsWith('/v2/') ? 'oip-rest' : 'torchserve-rest',
        headers: raw.headers,
        startedAt: performance.now(),
        attributes,
      });
      request.marinaTrace = requestTrace;
      reply.header('traceparent', requestTrace.traceparent);
    },
    end(request, reply) {
      const requestTrace = request.marinaTrace;
      if (!requestTrace) return;
      const status = reply.statusCode;
      const isError = status >= 500;
      requestTrace.end({
        statusAttribute: 'http.response.status_code',
        status,
        isError,
        errorType: isError ? String(status) : undefined,
      });
    },
  };
}

function createInstance(
  config: ServerConfig,
  options: BuildAppOptions,
  address: ServerConfig['inferenceAddress'],
  closingState: ClosingState,
  tracing?: Tracing,
): FastifyInstance {
  const { requestTimeoutMs } = resourceLimitsOf(config);
  // Node checks request timeouts every connectionsCheckingInterval (30 s by default): check often
  // enough that a short limit is kept to within half of itself.
  const connectionsCheckingInterval = Math.max(25, Math.min(30_000, Math.floor(requestTimeoutMs / 2)));
  const tls = tlsOptions(config, address);
  const app = Fastify({
    logger: options.logger ?? false,
    bodyLimit: config.maxRequestBytes,
    // A whole request (headers and body) must arrive within request_timeout_ms: a client that
    // trickles a chunked upload is answered 408 and disconnected instead of holding memory forever.
    requestTimeout: requestTimeoutMs,
    genReqId: () => randomUUID(),
    requestIdHeader: false,
    return503OnClosing: true,
    // TorchServe's router: `/models/` is `/models`. Path parameters of any length reach the routes
    // (fastify's default cut-off of 100 characters is below the 128 the name rule allows): the
    // token check runs first, and an overlong one is answered 414 below (limitPathParams).
    routerOptions: {
      ignoreTrailingSlash: true,
      querystringParser: parseQueryString,
      maxParamLength: ROUTER_MAX_PARAM_LENGTH,
    },
    clientErrorHandler,
    // Also given to node's createServer: in node 20 a requestTimeout set only after construction is not enforced.
    ...(tls
      ? { https: { ...tls.https, connectionsCheckingInterval, requestTimeout: requestTimeoutMs } }
      : { http: { connectionsCheckingInterval, requestTimeout: requestTimeoutMs } }),
  } as Parameters<typeof Fastify>[0]) as unknown as FastifyInstance;
  recordRoutes(app);
  // After onRequest (the token check), before validation and the handler.
  app.addHook('preValidation', limitPathParams);
  const tracer = tracing ? requestTracer(app, tracing, address) : undefined;
  // Response schemas document the routes (OPTIONS /); the handlers send TorchServe's JSON text
  // themselves, so no fast-json-stringify serializer is generated for them at start-up.
  app.setSerializerCompiler(() => (data) => JSON.stringify(data));
  const corsOrigin = config.corsAllowedOrigin;
  // A callback hook, not an async one: no promise per request.
  app.addHook('onRequest', (request, reply, done) => {
    tracer?.start(request, reply);
    reply.header('x-request-id', request.id);
    // TorchServe's NettyUtils.sendHttpResponse sets the configured methods and headers on every answer.
    if (config.corsAllowedMethods) reply.header('access-control-allow-methods', config.corsAllowedMethods);
    if (config.corsAllowedHeaders) reply.header('access-control-allow-headers', config.corsAllowedHeaders);
    const origin = request.headers.origin;
    if (corsOrigin === undefined || origin === undefined || !isOriginAllowed(corsOrigin, origin)) return done();
    // TorchServe's CORS (Netty's CorsHandler, set up from the cors_* keys): the allowed origin on
    // every answer; a preflight (OPTIONS with Access-Control-Request-Method) answered here, before auth.
    reply.header('access-control-allow-origin', corsOrigin.trim() === '*' ? '*' : origin).header('vary', 'Origin');
    if (request.method === 'OPTIONS' && request.headers['access-control-request-method'] !== undefined) {
      reply.code(200).send();
      return;
    }
    done();
  });
  // While closing, a keep-alive connection is idle once its response is written: close it then
  // (close() itself closes those idle at its start), so the listener never waits on a client's keep-alive timeout.
  app.addHook('onResponse', (request, reply, done) => {
    tracer?.end(request, reply);
    if (closingState.isClosing) setImmediate(() => app.server.closeIdleConnections?.());
    done();
  });
  const logs = options.logs;
  if (logs) {
    app.addHook('onResponse', (request, reply, done) => {
      const socket = request.socket;
      logs.access({
        client: `${socket.remoteAddress ?? '-'}:${socket.remotePort ?? 0}`,
        method: request.method,
        url: request.url,
        statusCode: reply.statusCode,
        durationMs: reply.elapsedTime,
        requestId: request.id,
        priority: answeredPriority.get(request),
      });
      if (reply.statusCode >= 500)
        logs.ts('error', `${request.method} ${request.url} answered ${reply.statusCode}`, request.id);
      done();
    });
  }
  app.setErrorHandler((error: FastifyError, request, reply) => {
    if (error.code === 'FST_ERR_CTP_BODY_TOO_LARGE' || error.statusCode === 413) {
      // Fastify refuses a declared Content-Length over the limit before reading, and a chunked body
      // as soon as the bytes received pass it: say which, in bytes, never a count the client did not send.
      const declared = request.headers['content-length'];
      const seen =
        declared !== undefined
          ? `its Content-Length header declares ${declared} bytes`
          : `more than ${config.maxRequestBytes} bytes arrived before it was refused`;
      return sendError(
        reply,
        createServeError.MARINA_ERR_REQUEST_TOO_LARGE(
          `the request body is larger than max_request_size (${config.maxRequestBytes} bytes): ${seen}; send a smaller input or raise max_request_size in config.properties`,
          { details: { maxRequestBytes: config.maxRequestBytes } },
        ),
      );
    }
    if (error.validation || (error.statusCode !== undefined && error.statusCode >= 400 && error.statusCode < 500)) {
      return sendError(reply, createServeError.MARINA_ERR_BAD_REQUEST(error.message, { cause: error }));
    }
    return sendError(reply, error);
  });
  // The routes of this listener, for the 404 answer's hints (onRoute sees the routes of every plugin registered later).
  const routes: Array<{ method: string; url: string }> = [];
  app.addHook('onRoute', (route) => {
    for (const method of [route.method].flat()) if (method !== 'HEAD') routes.push({ method, url: route.url });
  });
  app.setNotFoundHandler((request, reply) => {
    // TorchServe's bodies and sentences (405 where the path exists with other methods, as its
    // handlers throw MethodNotAllowedException; GET / among them), the hints in `hint`.
    const allowed = methodsOfPath(request.url, routes);
    if (allowed.length > 0) {
      reply.header('allow', allowed.join(', '));
      return sendError(
        reply,
        managementErrors.create.MARINA_ERR_METHOD_NOT_ALLOWED(
          `${TS_METHOD_NOT_ALLOWED} ${request.method} is not accepted on this path; it accepts ${allowed.join(', ')}.`,
        ),
      );
    }
    const message = `${TS_RESOURCE_NOT_FOUND} ${notFoundHint(request.method, request.url, routes)}`;
    return sendError(reply, createServeError.MARINA_ERR_ROUTE_NOT_FOUND(message));
  });
  return app;
}

/**
 * The methods the routes of this listener accept on `url`'s path (path parameters match one
 * segment, a trailing `*` the rest), HEAD left out; empty when no route has that path.
 */
function methodsOfPath(url: string, routes: ReadonlyArray<{ method: string; url: string }>): string[] {
  const path = url.split('?')[0] ?? '/';
  const methods = new Set<string>();
  for (const route of routes) if (routePattern(route.url).test(path)) methods.add(route.method);
  return [...methods].sort();
}

const routePatterns = new Map<string, RegExp>();
function routePattern(routeUrl: string): RegExp {
  let pattern = routePatterns.get(routeUrl);
  if (!pattern) {
    const source = routeUrl
      .split('/')
      .map((segment) =>
        segment === '*'
          ? '.*'
          : segment
              .split(/(:[A-Za-z_][A-Za-z0-9_]*)/)
              .map((part) => (part.startsWith(':') ? '[^/]+' : part.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')))
              .join(''),
      )
      .join('/');
    pattern = new RegExp(`^${source}/?$`);
    routePatterns.set(routeUrl, pattern);
  }
  return pattern;
}

/**
 * What a 404 says after TorchServe's sentence: the routes under the same first path segment, or
 * under the closest one (`/prediction/x` -> `/predictions/...`), else the first segments this API
 * serves; and where the API descriptions are. Path parameters are shown as `{name}`.
 */
export function notFoundHint(
  method: string,
  url: string,
  routes: ReadonlyArray<{ method: string; url: string }>,
): string {
  const path = url.split('?')[0] ?? '/';
  const firstOf = (p: string) => p.split('/')[1] ?? '';
  const shown = (r: { method: string; url: string }) =>
    `${r.method} ${r.url.replace(/:([A-Za-z_][A-Za-z0-9_]*)/g, '{$1}')}`;
  const list = (items: ReadonlyArray<{ method: string; url: string }>) => {
    const names = [...new Set(items.map(shown))];
    return names.length > 8 ? `${names.slice(0, 8).join(', ')}, … (${names.length - 8} more)` : names.join(', ');
  };
  const see =
    'GET /api-description (or OPTIONS /) on this port describes every route; the management port has a browsable page at /api-explorer.';
  const first = firstOf(path);
  const same = routes.filter((r) => firstOf(r.url) === first);
  if (first !== '' && same.length > 0)
    return `${method} ${path} is not a route of this API; its routes under /${first}: ${list(same)}. ${see}`;
  const firsts = [...new Set(routes.map((r) => firstOf(r.url)).filter((segment) => segment !== ''))];
  const closest = closestName(first, firsts);
  if (closest !== undefined)
    return `${method} ${path} is not a route of this API; did you mean /${closest}? Its routes: ${list(routes.filter((r) => firstOf(r.url) === closest))}. ${see}`;
  return `${method} ${path} is not a route of this API, whose paths start with ${firsts.map((segment) => `/${segment}`).join(', ')}. ${see}`;
}

/**
 * Builds the server: the model registry and the fastify instances for the inference,
 * management and metrics APIs, with the inference routes registered. Never listens
 * (start-server.ts does). Plugins from `options.plugins` are registered on their API's instance.
 */
export async function buildApp(config: ServerConfig, options: BuildAppOptions = {}): Promise<MarinaApp> {
  const closingState: ClosingState = { isClosing: false };
  const tracing = createTracing(
    tracingSettingsFrom({
      env: options.env ?? process.env,
      isEnabled: config.enableTracing === true,
      serviceVersion: MARINA_VERSION,
    }),
    // Lost spans are reported in the server's log (bound below, before any span can be lost).
    (level, message) => log(level, message),
  );
  const inference = createInstance(config, options, config.inferenceAddress, closingState, tracing);
  const management = sameAddress(config.inferenceAddress, config.managementAddress)
    ? inference
    : createInstance(config, options, config.managementAddress, closingState, tracing);
  const metrics = createInstance(config, options, config.metricsAddress, closingState);
  const log = (level: 'info' | 'warn' | 'error', message: string) => {
    if (options.log) options.log(level, message);
    else inference.log[level](message);
    options.logs?.model(level, message);
  };
  const limits = resourceLimitsOf(config);
  const responseWrites = new ResponseWriteGuard({
    timeoutMs: limits.responseWriteTimeoutMs,
    maxPendingBytes: limits.maxPendingResponseBytes,
    onClose: (event) =>
      log(
        'warn',
        event.reason === 'timeout'
          ? `closed the connection of ${event.remote}: its answer made no progress for ${limits.responseWriteTimeoutMs} ms (response_write_timeout) with ${event.pendingBytes} bytes unread`
          : `closed the connection of ${event.remote}: answers not read by their clients held more than max_pending_response_bytes (${limits.maxPendingResponseBytes}); it was the most stalled, with ${event.pendingBytes} bytes unread`,
      ),
  });
  for (const instance of new Set([inference, management, metrics])) responseWrites.watch(instance.server);
  const caches = createModelCaches({
    extractionCacheDir: config.extractionCacheDir,
    extractionCacheMaxBytes: limits.extractionCacheMaxBytes,
    optimizedModelCacheMaxBytes: limits.optimizedModelCacheMaxBytes,
    log,
  });
  const registry = new ModelRegistry({
    config,
    log,
    caches,
    ...(options.readMemoryBytes ? { readMemoryBytes: options.readMemoryBytes } : {}),
  });

  const dataPlane = new DataPlane({ registry, maxResponseBytes: config.maxResponseBytes, tracing });
  await inference.register(inferenceRoutes, {
    dataPlane,
    maxRequestBytes: config.maxRequestBytes,
    pingRequiresToken: config.pingRequiresToken,
  });
  await inference.register(oipRestRoutes, { dataPlane, maxRequestBytes: config.maxRequestBytes });
  const instances: Record<ApiName, FastifyInstance> = { inference, management, metrics };
  for (const p of options.plugins ?? []) {
    await instances[p.api].register(p.plugin as FastifyPluginAsync<Record<string, unknown>>, {
      registry,
      config,
      responseWrites,
      ...(p.options ?? {}),
    });
  }
  // The API descriptions last, so they describe every route above (and themselves).
  const isShared = inference === management;
  await inference.register(apiDescriptionRoutes, {
    instance: inference,
    torchServeApis: isShared ? ['inference', 'management'] : ['inference'],
    registry,
    perModel: [
      {
        url: '/predictions/:model_name',
        auth: 'inference',
        prefixes: ['/predictions/', '/explanations/', '/v1/models/', '/models/{model_name}/invoke', '/{model_name}/'],
      },
      ...(isShared
        ? [{ url: '/models/:model_name' as const, auth: 'management' as const, prefixes: ['/models/'] }]
        : []),
    ],
  });
  if (!isShared) {
    await management.register(apiDescriptionRoutes, {
      instance: management,
      torchServeApis: ['management'],
      registry,
      perModel: [{ url: '/models/:model_name', auth: 'management', prefixes: ['/models/'] }],
    });
  }
  await metrics.register(apiDescriptionRoutes, { instance: metrics, torchServeApis: [], registry, perModel: [] });
  await management.register(apiExplorerRoutes, {
    instances,
    apis: config.enableMetricsApi ? ['inference', 'management', 'metrics'] : ['inference', 'management'],
    hosts: {
      inference: config.inferenceAddress.host,
      management: config.managementAddress.host,
      metrics: config.metricsAddress.host,
    },
  });
  await Promise.all([...new Set([inference, management, metrics])].map((i) => i.ready()));

  let closing: Promise<void> | undefined;
  return {
    config,
    registry,
    dataPlane,
    responseWrites,
    tracing,
    inference,
    management,
    metrics,

    loadStartupModels(loadOptions = {}) {
      return loadStartupModels({ registry, config, log, ...loadOptions });
    },

    close() {
      closing ??= (async () => {
        // Stop accepting (fastify answers 503 to new requests while closing), let in-flight jobs finish.
        const instances = [...new Set([inference, management, metrics])];
        closingState.isClosing = true;
        const closingServers = instances.map((i) => i.close());
        await registry.close();
        // Keep-alive connections busy when close() began are closed as their responses finish (the onResponse hook above).
        for (const i of instances) i.server.closeIdleConnections?.();
        await Promise.all(closingServers);
        // The last requests' spans leave before the process does.
        await tracing?.shutdown().catch(() => undefined);
        responseWrites.stop();
      })();
      return closing;
    },
  };
}
