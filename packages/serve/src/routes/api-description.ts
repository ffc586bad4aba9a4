/**
 * TorchServe's API descriptions, generated from the routes' own fastify schemas (one source of
 * truth): `OPTIONS /` and `GET /api-description` on each listener answer an OpenAPI 3.0.1
 * document in TorchServe's shape (`{openapi, info: {title: "TorchServe APIs", …}, paths}`);
 * `OPTIONS /predictions/{model}` and `OPTIONS /models/{model}` answer the same for one model.
 * A route is described when its schema has a `description`; routes without one (the 405 answers)
 * are left out.
 */
import { readFileSync } from 'node:fs';
import type { FastifyInstance, FastifyReply, FastifyRequest, RouteOptions } from 'fastify';
import { sendTorchServeJson } from '../auth/torchserve-response.ts';
import { boundText } from '../bounded-text.ts';
import { createServeError } from '../errors.ts';
import { sendTorchServeError } from '../protocols/error-map.ts';
import type { ModelRegistryApi } from '../registry/model-registry-api.ts';

const SERVE_VERSION = (
  JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }
).version;

/** One route as fastify registered it, kept for the description. */
interface DescribedRoute {
  methods: string[];
  /** fastify's form: `/predictions/:model_name`, `/v1/models/:model_name::predict`. */
  url: string;
  schema: RouteSchema | undefined;
}

interface JsonSchemaObject {
  type?: string | string[];
  description?: string;
  properties?: Record<string, Record<string, unknown>>;
  required?: readonly string[];
  [key: string]: unknown;
}

interface RouteSchema {
  description?: string;
  params?: JsonSchemaObject;
  querystring?: JsonSchemaObject;
  body?: JsonSchemaObject;
  response?: Record<string, JsonSchemaObject>;
}

export interface OpenApiDocument {
  openapi: '3.0.1';
  info: { title: string; description: string; version: string };
  paths: Record<string, Record<string, unknown>>;
}

const routesOf = new WeakMap<FastifyInstance, DescribedRoute[]>();

/** Starts recording the routes of `app` (call before any route is added); the description reads them. */
export function recordRoutes(app: FastifyInstance): void {
  const routes: DescribedRoute[] = [];
  routesOf.set(app, routes);
  app.addHook('onRoute', (route: RouteOptions) => {
    const methods = (Array.isArray(route.method) ? route.method : [route.method])
      .map(String)
      .filter((m) => m !== 'HEAD');
    if (methods.length === 0) return;
    // A route serving several documented paths (KServe's `{m}:predict` and `{m}:explain`) lists them in config.describedAs.
    const describedAs = (route.config as { describedAs?: Array<{ url: string; description: string }> } | undefined)
      ?.describedAs;
    if (describedAs) {
      const { params: _params, ...rest } = (route.schema ?? {}) as RouteSchema;
      const params = {
        type: 'object',
        properties: { model_name: { type: 'string', minLength: 1 } },
        required: ['model_name'],
      };
      for (const d of describedAs)
        routes.push({ methods, url: d.url, schema: { ...rest, params, description: d.description } });
      return;
    }
    routes.push({ methods, url: route.url, schema: route.schema as RouteSchema | undefined });
  });
}

/** The description of everything `instance` serves (see recordRoutes). */
export function buildOpenApiOf(instance: FastifyInstance): OpenApiDocument {
  return buildOpenApi(routesOf.get(instance) ?? []);
}

/** `/v1/models/:model_name::predict` → `/v1/models/{model_name}:predict`. */
function openApiPath(url: string): string {
  let out = '';
  for (let i = 0; i < url.length; i++) {
    const c = url[i]!;
    if (c === ':' && url[i + 1] === ':') {
      out += ':';
      i++;
    } else if (c === ':') {
      let j = i + 1;
      while (j < url.length && /[A-Za-z0-9_]/.test(url[j]!)) j++;
      out += `{${url.slice(i + 1, j)}}`;
      i = j - 1;
    } else out += c;
  }
  return out;
}

const STATUS_TEXT: Record<string, string> = {
  200: 'OK',
  202: 'Accepted',
  206: 'Partial Content',
  400: 'Bad request',
  401: 'Unauthorized',
  403: 'Forbidden',
  404: 'Not found',
  405: 'Method not allowed',
  409: 'Conflict',
  413: 'Request entity too large',
  500: 'Internal Server Error',
  501: 'Not implemented',
  503: 'Service unavailable',
  504: 'Gateway timeout',
  507: 'Insufficient storage',
};

function operationId(method: string, path: string): string {
  const words = `${method.toLowerCase()} ${path.replace(/[{}]/g, '').replace(/[^A-Za-z0-9]+/g, ' ')}`
    .trim()
    .split(/\s+/);
  return words.map((w, i) => (i === 0 ? w : w[0]!.toUpperCase() + w.slice(1))).join('');
}

function parametersOf(schema: RouteSchema, path: string): Array<Record<string, unknown>> {
  const out: Array<Record<string, unknown>> = [];
  for (const [where, s] of [
    ['path', schema.params],
    ['query', schema.querystring],
  ] as const) {
    for (const [name, property] of Object.entries(s?.properties ?? {})) {
      // A params schema shared by `/x/{a}` and `/x/{a}/{b}` describes only the segments this path has.
      if (where === 'path' && !path.includes(`{${name}}`)) continue;
      const { description, ...rest } = property as { description?: string };
      out.push({
        in: where,
        name,
        ...(description ? { description } : {}),
        required: where === 'path' ? true : (s?.required ?? []).includes(name),
        schema: rest,
      });
    }
  }
  return out;
}

function responsesOf(schema: RouteSchema): Record<string, unknown> {
  const responses: Record<string, unknown> = {};
  for (const [code, s] of Object.entries(schema.response ?? {})) {
    const { description, ...rest } = s;
    const hasSchema = rest.type !== undefined || rest.properties !== undefined || rest.items !== undefined;
    responses[code] = {
      description: description ?? STATUS_TEXT[code] ?? 'Response',
      ...(hasSchema ? { content: { 'application/json': { schema: rest } } } : {}),
    };
  }
  if (Object.keys(responses).length === 0) responses['200'] = { description: 'OK' };
  return responses;
}

/** The OpenAPI 3.0.1 document of `routes`, in TorchServe's shape. */
function buildOpenApi(routes: readonly DescribedRoute[]): OpenApiDocument {
  const paths: OpenApiDocument['paths'] = {};
  const sorted = [...routes]
    .filter((r) => r.schema?.description !== undefined)
    .sort((a, b) => (openApiPath(a.url) < openApiPath(b.url) ? -1 : 1));
  for (const route of sorted) {
    const path = openApiPath(route.url);
    const schema = route.schema!;
    for (const method of route.methods) {
      const item = paths[path] ?? {};
      paths[path] = item;
      item[method.toLowerCase()] = {
        description: schema.description,
        operationId: operationId(method, path),
        parameters: parametersOf(schema, path),
        ...(schema.body ? { requestBody: { content: { 'application/json': { schema: schema.body } } } } : {}),
        responses: responsesOf(schema),
      };
    }
  }
  return {
    openapi: '3.0.1',
    info: {
      title: 'TorchServe APIs',
      description: 'TorchServe is a flexible and easy to use tool for serving deep learning models (served by Marina)',
      version: SERVE_VERSION,
    },
    paths,
  };
}

/** The description of one model: the paths with `{model_name}` under `prefix`, the name filled in. */
function modelOpenApi(document: OpenApiDocument, modelName: string, prefixes: readonly string[]): OpenApiDocument {
  const paths: OpenApiDocument['paths'] = {};
  for (const [path, operations] of Object.entries(document.paths)) {
    if (!path.includes('{model_name}') || !prefixes.some((p) => path.startsWith(p))) continue;
    const concrete = path.replace('{model_name}', encodeURIComponent(modelName));
    paths[concrete] = Object.fromEntries(
      Object.entries(operations).map(([method, op]) => {
        const operation = op as { parameters?: Array<{ name: string; in: string }> };
        return [
          method,
          {
            ...operation,
            parameters: (operation.parameters ?? []).filter((p) => !(p.in === 'path' && p.name === 'model_name')),
          },
        ];
      }),
    );
  }
  return { ...document, paths };
}

const documentSchema = {
  description: 'A openapi 3.0.1 descriptor',
  type: 'object',
  required: ['openapi', 'info', 'paths'],
  properties: { openapi: { type: 'string' }, info: { type: 'object' }, paths: { type: 'object' } },
} as const;
const errorSchema = {
  type: 'object',
  required: ['code', 'type', 'message'],
  properties: {
    code: { type: 'integer', description: 'Error code.' },
    type: { type: 'string', description: 'Error type.' },
    message: { type: 'string', description: 'Error message.' },
  },
} as const;
const modelParams = {
  type: 'object',
  properties: { model_name: { type: 'string', minLength: 1, description: 'Name of the model.' } },
  required: ['model_name'],
} as const;

/**
 * The paths and methods TorchServe's `OPTIONS /` lists on each of its ports, exactly
 * (pytorch/serve openapi/OpenApiUtils.java, listApis: the inference and management lists, and
 * `/metrics`, which it adds on every port; the metrics port lists `/metrics` alone).
 */
const TORCHSERVE_PATHS: Readonly<Record<'inference' | 'management', ReadonlyArray<readonly [string, string[]]>>> = {
  inference: [
    ['/', ['options']],
    ['/ping', ['get']],
    ['/v1/models/{model_name}:predict', ['post']],
    ['/v2/models/{model_name}/infer', ['post']],
    ['/predictions/{model_name}', ['post']],
    ['/predictions/{model_name}/{model_version}', ['post']],
    ['/api-description', ['get']],
  ],
  management: [
    ['/', ['options']],
    ['/models', ['get', 'post']],
    ['/models/{model_name}', ['get', 'put', 'delete']],
    ['/models/{model_name}/{model_version}', ['get', 'put', 'delete']],
    ['/models/{model_name}/{model_version}/set-default', ['put']],
    ['/api-description', ['get']],
  ],
};
const TORCHSERVE_METRICS_PATH = ['/metrics', ['get']] as const;
/** Operations TorchServe lists on a port where Marina serves them elsewhere (its `/metrics` on every port). */
const TORCHSERVE_ONLY_OPERATIONS: Readonly<Record<string, Record<string, unknown>>> = {
  '/metrics': {
    description: 'Get TorchServe application metrics in prometheus format.',
    operationId: 'metrics',
    parameters: [],
    responses: { '200': { description: 'TorchServe application metrics' } },
  },
};

/**
 * TorchServe's own description of a port that serves `apis`: its paths and methods only, each
 * operation as Marina documents it. Marina's other routes are in `GET /api-description` and the explorer.
 */
function torchServeOpenApi(full: OpenApiDocument, apis: ReadonlyArray<'inference' | 'management'>): OpenApiDocument {
  const paths: OpenApiDocument['paths'] = {};
  const listed = [...apis.flatMap((api) => TORCHSERVE_PATHS[api]), TORCHSERVE_METRICS_PATH];
  for (const [path, methods] of listed) {
    for (const method of methods) {
      const operation =
        path === '/' || path === '/api-description'
          ? (full.paths['/']?.options ?? full.paths['/api-description']?.get)
          : (full.paths[path]?.[method] ?? TORCHSERVE_ONLY_OPERATIONS[path]);
      if (operation === undefined) continue;
      paths[path] ??= {};
      paths[path][method] = operation;
    }
  }
  return { ...full, paths };
}

export interface ApiDescriptionRoutesOptions {
  /** The instance whose routes are described (the one this plugin is registered on). */
  instance: FastifyInstance;
  /** TorchServe's APIs this listener serves, for `OPTIONS /` (none: the metrics port, `/metrics` alone). */
  torchServeApis: ReadonlyArray<'inference' | 'management'>;
  registry: ModelRegistryApi;
  /** Per-model descriptions to serve on this listener. */
  perModel: Array<{
    url: '/predictions/:model_name' | '/models/:model_name';
    auth: 'inference' | 'management';
    prefixes: string[];
  }>;
}

/** Registers `OPTIONS /`, `GET /api-description` (open, as TorchServe) and the per-model OPTIONS routes. */
export async function apiDescriptionRoutes(app: FastifyInstance, options: ApiDescriptionRoutesOptions): Promise<void> {
  const document = () => buildOpenApiOf(options.instance);
  const describeAll = async (request: FastifyRequest, reply: FastifyReply) =>
    sendTorchServeJson(request, reply, 200, document());
  // OPTIONS / is TorchServe's list of its own paths on this port, exactly; GET /api-description describes every route.
  const describeTorchServe = async (request: FastifyRequest, reply: FastifyReply) =>
    sendTorchServeJson(request, reply, 200, torchServeOpenApi(document(), options.torchServeApis));
  const schema = {
    description: "The OpenAPI 3.0.1 description of this API, generated from the routes' schemas.",
    response: { 200: documentSchema, 500: errorSchema },
  };
  app.route({
    method: 'OPTIONS',
    url: '/',
    schema: {
      ...schema,
      description:
        "TorchServe's OpenAPI 3.0.1 description of this port: TorchServe's own paths only (GET /api-description has every route).",
    },
    config: { auth: 'none' },
    handler: describeTorchServe,
  });
  app.get('/api-description', { schema, config: { auth: 'none' } }, describeAll);
  for (const perModel of options.perModel) {
    app.route({
      method: 'OPTIONS',
      url: perModel.url,
      schema: {
        description: "The OpenAPI description of this model's routes.",
        params: modelParams,
        response: { 200: documentSchema, 404: errorSchema },
      },
      config: { auth: perModel.auth },
      handler: async (request, reply) => {
        const { model_name: modelName } = request.params as { model_name: string };
        if (options.registry.list().every((m) => m.modelName !== modelName)) {
          // The name is the client's: quoted bounded.
          return sendTorchServeError(
            reply,
            createServeError.MARINA_ERR_MODEL_NOT_FOUND(`Model not found: ${boundText(modelName)}`),
          );
        }
        return sendTorchServeJson(request, reply, 200, modelOpenApi(document(), modelName, perModel.prefixes));
      },
    });
  }
}
