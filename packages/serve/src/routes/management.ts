/**
 * The management API (TorchServe §4): register, scale, describe, list, unregister, set-default,
 * and KServe v1 readiness, with TorchServe's parameters, status codes, messages and JSON shapes.
 * Every error body is `{"code","type","message"}` plus Marina's `marinaCode`.
 * Every route here needs the management key (declareRouteAuth); the listener's token hook checks it.
 */
import { unlink } from 'node:fs/promises';
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest, FastifySchema } from 'fastify';
import { isMarinaError } from '@marina/errors';
import type { ModelRegistryApi, RegisterModelOptions } from '../registry/model-registry-api.ts';
import { resourceLimitsOf, type ServerConfig } from '../config/server-config.ts';
import { sendTorchServeJson } from '../auth/torchserve-response.ts';
import { sendTorchServeError } from '../protocols/error-map.ts';
import { declareRouteAuth } from '../auth/token-authorization.ts';
import { createModelUrlResolver, DownloadSlots, type ModelUrlResolver } from '../model-download/resolve-model-url.ts';
import { createServeError } from '../errors.ts';
import { managementErrors } from './management-errors.ts';
import { workflowsNotImplemented } from './inference.ts';
import { downloadErrors } from '../model-download/download-errors.ts';
import { parseTrafficPolicy, TRAFFIC_POLICY_SCHEMA, type TrafficPolicy } from '../registry/traffic-policy.ts';

/** Whether the request target's query names `key`, even with an empty value (which the query parser drops). */
function hasQueryKey(target: string, key: string): boolean {
  const at = target.indexOf('?');
  return at >= 0 && new URLSearchParams(target.slice(at + 1)).has(key);
}

const { create } = managementErrors;

const METHOD_NOT_ALLOWED = 'Requested method is not allowed, please refer to API document.';

/** TorchServe's Manifest.RuntimeType values, plus Marina's `node` (JavaScript handlers) and `LSP`. */
const REGISTER_RUNTIMES = ['python', 'python2', 'python3', 'LSP', 'node'];

export interface ManagementRoutesOptions {
  registry: ModelRegistryApi;
  config: ServerConfig;
  /** Resolves a register `url` to an archive on disk; defaults to one bound to `config` (store, allowed_urls). */
  resolveModelUrl?: ModelUrlResolver;
  /** The `autoscaling` field of describe (from `createAutoscaler().describe`). */
  autoscaling?: (modelName: string, modelVersion: string) => Record<string, unknown> | undefined;
  /** Called with registry failures that end as 5xx, for logs. */
  onError?: (error: unknown) => void;
  /**
   * Called after every call that changed the state (register, scale, unregister, set-default),
   * before answering: resolves with an error when the change could not be made durable (the
   * snapshot store's `settle`). The answer keeps its status, since the change is in effect, and
   * carries `warning: { code, message }`.
   */
  afterChange?: () => Promise<Error | undefined>;
  /** Holds snapshot writes while a changing call runs (snapshot store's `hold`); returns the release. */
  holdChanges?: () => (() => void) | undefined;
}

/**
 * `synchronous`: TorchServe reads it with Java's Boolean.parseBoolean, so only "true" (any case) is
 * true and any other value (`-1`, `nan`) is false; a wrong value shows in the answer (202, not 200).
 */
const SYNCHRONOUS_SCHEMA = {
  anyOf: [{ type: 'boolean' }, { type: 'string' }],
  description: 'true (any case) waits; any other value does not.',
} as const;
function isTrue(value: boolean | string | undefined, fallback: boolean): boolean {
  if (value === undefined) return fallback;
  return value === true || (typeof value === 'string' && value.toLowerCase() === 'true');
}

const registerProperties = {
  url: { type: 'string' },
  model_name: { type: 'string', minLength: 1 },
  handler: { type: 'string', minLength: 1 },
  runtime: { type: 'string', minLength: 1 },
  batch_size: { type: 'integer', minimum: 1 },
  max_batch_delay: { type: 'integer', minimum: 0 },
  initial_workers: { type: 'integer', minimum: 0 },
  synchronous: SYNCHRONOUS_SCHEMA,
  response_timeout: { type: 'integer', minimum: 1 },
  startup_timeout: { type: 'integer', minimum: 1 },
  s3_sse_kms: { type: 'boolean' },
} as const;

/**
 * TorchServe's leniency with numbers (`NettyUtils.getIntParameter`: a value that is not an integer
 * is its default), the default unless `strict_parameters=true`. The schemas then also take any
 * string for these fields, and `lenientInteger` turns it into TorchServe's reading.
 */
const LENIENT_REGISTER_INTEGERS = [
  'batch_size',
  'max_batch_delay',
  'initial_workers',
  'response_timeout',
  'startup_timeout',
] as const;

/** Java's Integer.parseInt reading of a parameter: an integer, or undefined (TorchServe then uses its default). */
function lenientInteger(value: unknown): number | undefined {
  if (typeof value === 'number') return Number.isInteger(value) ? value : undefined;
  if (typeof value !== 'string' || !/^[+-]?\d+$/.test(value.trim())) return undefined;
  const parsed = Number(value.trim());
  return Number.isSafeInteger(parsed) && Math.abs(parsed) <= 2 ** 31 - 1 ? parsed : undefined;
}

/**
 * Register parameters read as TorchServe reads them: a non-integer number is its default, a
 * negative `initial_workers` means none, and a `startup_timeout` or `response_timeout` below 1 s,
 * which TorchServe accepts, is the server's default (a zero timeout would fail every start).
 */
function lenientRegisterParams(params: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = { ...params };
  for (const name of LENIENT_REGISTER_INTEGERS) {
    const value = lenientInteger(params[name]);
    if (value === undefined) delete out[name];
    else out[name] = value;
  }
  if (typeof out.initial_workers === 'number' && out.initial_workers < 0) out.initial_workers = 0;
  if (typeof out.batch_size === 'number' && out.batch_size < 1) delete out.batch_size;
  if (typeof out.max_batch_delay === 'number' && out.max_batch_delay < 0) delete out.max_batch_delay;
  for (const name of ['startup_timeout', 'response_timeout'])
    if (typeof out[name] === 'number' && (out[name] as number) < 1) delete out[name];
  return out;
}

interface RegisterParams {
  url?: string;
  model_name?: string;
  handler?: string;
  runtime?: string;
  batch_size?: number;
  max_batch_delay?: number;
  initial_workers?: number;
  synchronous?: boolean | string;
  response_timeout?: number;
  startup_timeout?: number;
}

interface ScaleQuery {
  min_worker?: number;
  max_worker?: number;
  synchronous?: boolean | string;
  model_version?: string;
  pinned?: boolean;
}

/** Response schemas (documentation; the handlers send TorchServe's pretty-printed JSON text as is). */
const statusSchema = {
  type: 'object',
  required: ['status'],
  properties: { status: { type: 'string', description: 'What was done.' } },
} as const;
const errorSchema = {
  type: 'object',
  required: ['code', 'type', 'message'],
  properties: {
    code: { type: 'integer', description: 'Error code.' },
    type: { type: 'string', description: 'Error type.' },
    message: { type: 'string', description: "Error message: TorchServe's exact text where it has one." },
    marinaCode: { type: 'string', description: "Marina's stable MARINA_ERR_* code." },
    hint: { type: 'string', description: "What Marina knows beyond TorchServe's text: what was wrong and what to do." },
  },
} as const;
const errorResponses = { 400: errorSchema, 404: errorSchema, 500: errorSchema } as const;
const listSchema = {
  type: 'object',
  required: ['models'],
  properties: {
    nextPageToken: { type: 'string', description: 'Pass as next_page_token to get the next page.' },
    models: {
      type: 'array',
      items: {
        type: 'object',
        required: ['modelName', 'modelUrl'],
        properties: { modelName: { type: 'string' }, modelUrl: { type: 'string' } },
      },
    },
  },
} as const;
const describeSchema = {
  type: 'array',
  items: {
    type: 'object',
    required: ['modelName', 'modelVersion', 'modelUrl', 'minWorkers', 'maxWorkers', 'workers'],
    properties: {
      modelName: { type: 'string' },
      modelVersion: { type: 'string' },
      modelUrl: { type: 'string' },
      runtime: { type: 'string' },
      minWorkers: { type: 'integer' },
      maxWorkers: { type: 'integer' },
      batchSize: { type: 'integer' },
      maxBatchDelay: { type: 'integer' },
      responseTimeout: { type: 'integer' },
      loadedAtStartup: { type: 'boolean' },
      workers: {
        type: 'array',
        items: {
          type: 'object',
          properties: {
            id: { type: 'string' },
            startTime: { type: 'string' },
            status: { type: 'string' },
            memoryUsage: { type: 'integer' },
            pid: { type: 'integer' },
          },
        },
      },
      jobQueueStatus: {
        type: 'object',
        properties: { remainingCapacity: { type: 'integer' }, pendingRequests: { type: 'integer' } },
      },
    },
  },
} as const;
const TRAFFIC_RESPONSE_SCHEMA = {
  ...TRAFFIC_POLICY_SCHEMA,
  properties: { ...TRAFFIC_POLICY_SCHEMA.properties, status: { type: 'string', description: 'What was done (PUT).' } },
} as const;
const readinessSchema = {
  type: 'object',
  required: ['name', 'ready'],
  properties: { name: { type: 'string' }, ready: { type: 'boolean' } },
} as const;

const nameParams = {
  type: 'object',
  properties: { model_name: { type: 'string', minLength: 1, description: 'Name of the model.' } },
  required: ['model_name'],
} as const;
const versionParams = {
  type: 'object',
  properties: {
    model_name: { type: 'string', minLength: 1, description: 'Name of the model.' },
    model_version: {
      type: 'string',
      minLength: 1,
      description: 'Version of the model ("all" to describe every version).',
    },
  },
  required: ['model_name', 'model_version'],
} as const;
const scaleQuery = {
  type: 'object',
  properties: {
    min_worker: { type: 'integer', minimum: 0 },
    max_worker: { type: 'integer', minimum: 0 },
    synchronous: SYNCHRONOUS_SCHEMA,
    model_version: { type: 'string', minLength: 1 },
    number_gpu: { type: 'integer' },
    timeout: { type: 'integer' },
    pinned: {
      type: 'boolean',
      description:
        'Marina extension: true keeps the version resident (never evicted nor idle-unloaded; a version not resident is loaded), false lets it go again. Alone it changes only the pin, no workers.',
    },
  },
} as const;

/**
 * Fastify plugin with every management endpoint. Register it without fastify-plugin so its error
 * handler (TorchServe's error bodies) stays scoped to these routes.
 */
export async function managementRoutes(app: FastifyInstance, options: ManagementRoutesOptions): Promise<void> {
  const { registry, config } = options;
  // Before the schemas check them (they stay TorchServe's integers, and describe the API so).
  const lenientRegister = async (request: FastifyRequest) => {
    if (config.strictParameters) return;
    request.query = lenientRegisterParams(request.query as Record<string, unknown>);
    if (request.body && typeof request.body === 'object')
      request.body = lenientRegisterParams(request.body as Record<string, unknown>);
  };
  declareRouteAuth(app, 'management');
  const limits = resourceLimitsOf(config);
  const resolve =
    options.resolveModelUrl ??
    createModelUrlResolver({
      modelStore: config.modelStore,
      allowedUrls: config.allowedUrls,
      downloadTimeoutMs: limits.downloadTimeoutMs,
      downloadIdleTimeoutMs: limits.downloadIdleTimeoutMs,
      downloadSlots: new DownloadSlots(limits.maxConcurrentDownloads),
    });

  app.setErrorHandler((error: FastifyError, _request, reply) => {
    if (error.validation) {
      return sendTorchServeError(reply, createServeError.MARINA_ERR_BAD_REQUEST(`Invalid parameter: ${error.message}`));
    }
    if (!isMarinaError(error) && typeof error.statusCode === 'number' && error.statusCode < 500) {
      return sendTorchServeError(reply, createServeError.MARINA_ERR_BAD_REQUEST(error.message));
    }
    const body = sendTorchServeError(reply, error);
    if (!isMarinaError(error) || error.statusCode >= 500) options.onError?.(error);
    return body;
  });

  // One snapshot per changing call, as TorchServe: its changes are written together by afterChange
  // (or, when it fails, once it has answered).
  const releases = new WeakMap<FastifyRequest, () => void>();
  const release = (request: FastifyRequest) => {
    releases.get(request)?.();
    releases.delete(request);
  };
  app.addHook('preHandler', (request, _reply, done) => {
    if (request.method !== 'GET') {
      const releaseHold = options.holdChanges?.();
      if (releaseHold) releases.set(request, releaseHold);
    }
    done();
  });
  app.addHook('onResponse', (request, _reply, done) => {
    release(request);
    done();
  });

  const status = async (
    request: FastifyRequest,
    reply: FastifyReply,
    code: number,
    text: string,
    extra: Record<string, unknown> = {},
  ) => {
    release(request);
    const problem = request.method === 'GET' ? undefined : await options.afterChange?.();
    const warning =
      problem === undefined
        ? undefined
        : { code: (problem as { code?: string }).code ?? 'MARINA_ERR_INTERNAL', message: problem.message };
    return sendTorchServeJson(
      request,
      reply,
      code,
      warning === undefined ? { status: text, ...extra } : { status: text, ...extra, warning },
    );
  };
  const assertModelApi = (action: string) => {
    if (!config.enableModelApi) {
      throw create.MARINA_ERR_MODEL_API_DISABLED(
        `${METHOD_NOT_ALLOWED} ${action} is disabled: start the server with --enable-model-api or set enable_model_api=true.`,
      );
    }
  };

  // Register: parameters from the query string, or from a JSON body with the same names.
  app.post(
    '/models',
    {
      schema: {
        description:
          'Register a new model in TorchServe: url is an archive or folder in the model store, a file:// or an allowed http(s):// URL.',
        response: {
          200: statusSchema,
          202: statusSchema,
          206: statusSchema,
          405: errorSchema,
          409: errorSchema,
          ...errorResponses,
        },
        querystring: { type: 'object', properties: registerProperties },
        body: { type: ['object', 'null'], properties: registerProperties },
      },
      preValidation: lenientRegister,
    },
    async (request, reply) => {
      assertModelApi('Registering models');
      const params: RegisterParams = {
        ...(request.query as RegisterParams),
        ...((request.body as RegisterParams | null) ?? {}),
      };
      if (params.url === undefined || params.url === '') {
        // TorchServe: no url is a 400; `url=` with an empty value reaches its model lookup, a 404 (its Postman suite).
        if (hasQueryKey(request.url, 'url')) {
          throw downloadErrors.create.MARINA_ERR_MODEL_FILE_NOT_FOUND(
            'Model not found at: (the url parameter is empty; give an archive or folder name in the model store, a file:// or an allowed http(s):// URL)',
          );
        }
        throw create.MARINA_ERR_URL_REQUIRED('Parameter url is required.');
      }
      if (params.runtime !== undefined && !REGISTER_RUNTIMES.includes(params.runtime)) {
        throw createServeError.MARINA_ERR_BAD_REQUEST(
          `Invalid RuntimeType value: ${params.runtime} (one of ${REGISTER_RUNTIMES.join(', ')})`,
        );
      }
      // A download stops when its client goes away: nobody would see the answer, and it holds a slot and disk.
      const clientGone = new AbortController();
      const onClose = () => {
        if (!reply.raw.writableFinished) clientGone.abort();
      };
      reply.raw.once('close', onClose);
      let resolved: Awaited<ReturnType<ModelUrlResolver>>;
      try {
        resolved = await resolve(params.url, { signal: clientGone.signal });
      } finally {
        reply.raw.off('close', onClose);
      }
      const synchronous = isTrue(params.synchronous, true);
      const registerOptions: RegisterModelOptions = {
        url: params.url,
        archivePath: resolved.archivePath,
        isDownloaded: resolved.isDownloaded,
        synchronous,
        ...(params.model_name !== undefined && { modelName: params.model_name }),
        ...(params.handler !== undefined && { handler: params.handler }),
        ...(params.runtime !== undefined && { runtime: params.runtime }),
        ...(params.batch_size !== undefined && { batchSize: params.batch_size }),
        ...(params.max_batch_delay !== undefined && { maxBatchDelayMs: params.max_batch_delay }),
        // TorchServe: initial_workers defaults to default_workers_per_model when set; Marina then lets
        // model-config.yaml's minWorkers apply (the documented precedence), and else starts 0 workers
        // ("registered with 0 initial workers").
        ...((params.initial_workers ?? config.defaultWorkersPerModel) !== undefined && {
          initialWorkers: params.initial_workers ?? config.defaultWorkersPerModel,
        }),
        fallbackWorkers: 0,
        ...(params.response_timeout !== undefined && { responseTimeoutSec: params.response_timeout }),
        ...(params.startup_timeout !== undefined && { startupTimeoutSec: params.startup_timeout }),
      };
      let result: Awaited<ReturnType<ModelRegistryApi['register']>>;
      try {
        result = await registry.register(registerOptions);
      } catch (error) {
        // A download that never got registered must not stay in the store (it would block a retry with 500 "already exists").
        if (resolved.isDownloaded) await unlink(resolved.archivePath).catch(() => undefined);
        throw error;
      }
      const { modelName, modelVersion, workersRequested, workersReady } = result;
      if (workersRequested === 0) {
        return status(
          request,
          reply,
          200,
          `Model "${modelName}" Version: ${modelVersion} registered with 0 initial workers. Use scale workers API to add workers for the model.`,
        );
      }
      if (!synchronous) return status(request, reply, 202, 'Processing worker updates...');
      if (workersReady < workersRequested) return status(request, reply, 206, 'Workers scaling in progress...');
      return status(
        request,
        reply,
        200,
        `Model "${modelName}" Version: ${modelVersion} registered with ${workersReady} initial workers`,
      );
    },
  );

  // List: only default versions, sorted by name, offset paging.
  app.get(
    '/models',
    {
      schema: {
        description: 'List registered models (their default versions), sorted by name, paged.',
        response: { 200: listSchema, 500: errorSchema },
        querystring: {
          type: 'object',
          properties: { limit: { type: 'integer' }, next_page_token: { type: 'integer' } },
        },
      },
    },
    async (request, reply) => {
      const query = request.query as { limit?: number; next_page_token?: number };
      let limit = query.limit ?? 100;
      if (limit > 100 || limit < 0) limit = 100;
      const offset = Math.max(0, query.next_page_token ?? 0);
      const all = registry.list();
      const page = all.slice(offset, offset + limit);
      const end = offset + page.length;
      return sendTorchServeJson(request, reply, 200, {
        ...(end < all.length && { nextPageToken: String(end) }),
        models: page.map((m) => ({ modelName: m.modelName, modelUrl: m.modelUrl })),
      });
    },
  );

  const describe = async (request: FastifyRequest, reply: FastifyReply) => {
    const { model_name: name, model_version: version } = request.params as {
      model_name: string;
      model_version?: string;
    };
    const descriptions = registry.describe(name, version).map((d) => {
      const autoscaling = options.autoscaling?.(d.modelName, d.modelVersion);
      return autoscaling === undefined ? d : { ...d, autoscaling };
    });
    return sendTorchServeJson(request, reply, 200, descriptions);
  };
  const describeQuery = { type: 'object', properties: { customized: { type: 'boolean' } } } as const;
  const describeDescription = 'Describe the default version of a model, the version named, or every version ("all").';
  app.get(
    '/models/:model_name',
    {
      schema: {
        description: describeDescription,
        params: nameParams,
        querystring: describeQuery,
        response: { 200: describeSchema, ...errorResponses },
      } as FastifySchema,
    },
    describe,
  );
  app.get(
    '/models/:model_name/:model_version',
    {
      schema: {
        description: describeDescription,
        params: versionParams,
        querystring: describeQuery,
        response: { 200: describeSchema, ...errorResponses },
      } as FastifySchema,
    },
    describe,
  );

  const scale = async (request: FastifyRequest, reply: FastifyReply) => {
    const { model_name: paramName, model_version: paramVersion } = request.params as {
      model_name: string;
      model_version?: string;
    };
    const params = { name: paramName, version: paramVersion };
    const query = request.query as ScaleQuery;
    const modelVersion = params.version ?? query.model_version;
    // `pinned` alone changes only the pin: TorchServe's min_worker default of 1 applies to a scale, not to a pin.
    if (query.pinned !== undefined && query.min_worker === undefined && query.max_worker === undefined)
      return pin(request, reply, params.name, modelVersion, query);
    const minWorkers = query.min_worker ?? 1;
    const maxWorkers = query.max_worker ?? minWorkers;
    if (maxWorkers < minWorkers)
      throw createServeError.MARINA_ERR_INVALID_WORKER_COUNT('max_worker cannot be less than min_worker.');
    const synchronous = isTrue(query.synchronous, false);
    // With synchronous=false the registry resolves once the change is accepted (after checking
    // name and version, so an unknown model is still a 404 as in TorchServe).
    const { workers } = await registry.scale(params.name, modelVersion, { minWorkers, maxWorkers, synchronous });
    if (query.pinned !== undefined) await registry.setPinned(params.name, modelVersion, query.pinned);
    if (!synchronous) return status(request, reply, 202, 'Processing worker updates...');
    if (workers < minWorkers) return status(request, reply, 206, 'Workers scaling in progress...');
    return status(
      request,
      reply,
      200,
      `Workers scaled to ${workers} for model: ${params.name}${modelVersion === undefined ? '' : `, version: ${modelVersion}`}`,
    );
  };
  /**
   * PUT /models/{name}[/{version}]?pinned=true|false: the pin is one more serving setting of the
   * version, next to its workers, so it lives on the route that sets those (same key, same version
   * addressing, one snapshot per change); TorchServe's clients never send it. Pinning a version that
   * is not resident loads it; the call answers once it is.
   */
  const pin = async (
    request: FastifyRequest,
    reply: FastifyReply,
    modelName: string,
    modelVersion: string | undefined,
    query: ScaleQuery,
  ) => {
    const isPinned = query.pinned === true;
    await registry.setPinned(modelName, modelVersion, isPinned);
    const [description] = registry.describe(modelName, modelVersion);
    return status(
      request,
      reply,
      200,
      `Model "${modelName}" Version: ${description?.modelVersion ?? modelVersion ?? ''} ${isPinned ? 'pinned' : 'unpinned'} (state: ${description?.state ?? 'unknown'})`,
    );
  };
  const scaleSchema = (params: typeof nameParams | typeof versionParams) =>
    ({
      description:
        'Scale the workers of a model version (min_worker, max_worker); synchronous=true waits for them. pinned=true|false (Marina) pins or unpins it.',
      params,
      querystring: scaleQuery,
      response: { 200: statusSchema, 202: statusSchema, 206: statusSchema, ...errorResponses },
    }) as FastifySchema;
  // TorchServe reads min_worker and max_worker with getIntParameter too: not an integer is the default.
  const lenientScale = async (request: FastifyRequest) => {
    if (config.strictParameters) return;
    const query = { ...(request.query as Record<string, unknown>) };
    for (const name of ['min_worker', 'max_worker']) {
      if (query[name] === undefined) continue;
      const value = lenientInteger(query[name]);
      if (value === undefined) delete query[name];
      else query[name] = value;
    }
    request.query = query;
  };
  app.put('/models/:model_name', { schema: scaleSchema(nameParams), preValidation: lenientScale }, scale);
  app.put(
    '/models/:model_name/:model_version',
    { schema: scaleSchema(versionParams), preValidation: lenientScale },
    scale,
  );

  const unregister = async (request: FastifyRequest, reply: FastifyReply) => {
    assertModelApi('Unregistering models');
    const { model_name: name, model_version: version } = request.params as {
      model_name: string;
      model_version?: string;
    };
    await registry.unregister(name, version);
    return status(request, reply, 200, `Model "${name}" unregistered`);
  };
  const unregisterSchema = (params: typeof nameParams | typeof versionParams) =>
    ({
      description: 'Unregister a model version (the default one when none is named); in-flight requests finish first.',
      params,
      response: { 200: statusSchema, 403: errorSchema, 405: errorSchema, ...errorResponses },
    }) as FastifySchema;
  app.delete('/models/:model_name', { schema: unregisterSchema(nameParams) }, unregister);
  app.delete('/models/:model_name/:model_version', { schema: unregisterSchema(versionParams) }, unregister);

  app.put(
    '/models/:model_name/:model_version/set-default',
    {
      schema: {
        description: 'Make this version the default version of the model.',
        params: versionParams,
        response: { 200: statusSchema, ...errorResponses },
      } as FastifySchema,
    },
    async (request, reply) => {
      const { model_name: name, model_version: version } = request.params as {
        model_name: string;
        model_version: string;
      };
      registry.setDefault(name, version);
      return status(request, reply, 200, `Default version successfully updated for model "${name}" to "${version}"`);
    },
  );

  // Traffic policy: a static segment, so it wins over the /models/{name}/{version} routes (a version
  // named 'traffic' is still reachable with ?model_version= on scale, and through describe 'all').
  const trafficSchema = (description: string, body?: object) =>
    ({
      description,
      params: nameParams,
      ...(body ? { body } : {}),
      response: { 200: TRAFFIC_RESPONSE_SCHEMA, ...errorResponses, 409: errorSchema },
    }) as FastifySchema;
  app.get(
    '/models/:model_name/traffic',
    { schema: trafficSchema("The model's traffic policy in force (without one: 100% to the default version).") },
    async (request, reply) => {
      const { model_name: name } = request.params as { model_name: string };
      return sendTorchServeJson(request, reply, 200, registry.getTrafficPolicy(name));
    },
  );
  const setTraffic = async (request: FastifyRequest, reply: FastifyReply, policy: TrafficPolicy) => {
    const { model_name: name } = request.params as { model_name: string };
    const inForce = registry.setTrafficPolicy(name, policy);
    return status(request, reply, 200, `Traffic policy of model "${name}" updated`, { ...inForce });
  };
  app.put(
    '/models/:model_name/traffic',
    {
      schema: trafficSchema(
        'Set the traffic policy: weights per version for unversioned requests (integers summing to 100), an optional shadow and sticky header. Requests in flight keep their version.',
        TRAFFIC_POLICY_SCHEMA,
      ),
      // The body is checked by the policy's own strict schema (no coercion, unknown keys refused),
      // and a bad one is answered with MARINA_ERR_TRAFFIC_POLICY_INVALID, not the generic code.
      validatorCompiler:
        ({ httpPart }) =>
        (data: unknown) => {
          if (httpPart !== 'body') return { value: data };
          try {
            return { value: parseTrafficPolicy(data) };
          } catch (error) {
            return { error: error as Error };
          }
        },
    },
    async (request, reply) => setTraffic(request, reply, request.body as TrafficPolicy),
  );
  app.delete(
    '/models/:model_name/traffic',
    { schema: trafficSchema('Remove the traffic policy: every unversioned request goes to the default version.') },
    async (request, reply) => setTraffic(request, reply, {}),
  );

  // KServe v1 readiness: ready when the default version has at least one worker.
  app.get(
    '/v1/models/:model_name',
    {
      schema: {
        description: 'KServe v1 readiness: ready when the default version has a worker up.',
        params: nameParams,
        response: { 200: readinessSchema },
      } as FastifySchema,
    },
    async (request, reply) => {
      const { model_name: name } = request.params as { model_name: string };
      const [description] = registry.describe(name);
      const ready = (description?.workers ?? []).some((w) => w.status === 'READY' || w.status === 'BUSY');
      return sendTorchServeJson(request, reply, 200, { name, ready });
    },
  );

  // TorchServe's workflow management API: accepted, answered 501 until workflows exist.
  const notImplemented = async () => {
    throw workflowsNotImplemented();
  };
  app.route({
    method: ['GET', 'POST'],
    url: '/workflows',
    schema: { description: 'Workflow management: not implemented in Marina yet (501).' } as FastifySchema,
    handler: notImplemented,
  });
  app.route({
    method: ['GET', 'PUT', 'DELETE'],
    url: '/workflows/:workflow_name',
    schema: { description: 'Workflow management: not implemented in Marina yet (501).' } as FastifySchema,
    handler: notImplemented,
  });

  // A path of this API asked with a method it does not accept is answered 405 by the listener's
  // not-found handler (app.ts), the same way on every API.
}
