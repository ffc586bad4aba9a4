/**
 * TorchServe's ManagementAPIsService, translated call by call to the REST management API on the
 * same server (fastify `inject`, in process): the same parameter checks, allowed_urls rules,
 * messages and JSON, with no second implementation to drift. `msg` carries the REST body, as in
 * TorchServe; a REST error becomes the gRPC status of its HTTP code with the REST message.
 */
import type * as grpc from '@grpc/grpc-js';
import type { FastifyInstance } from 'fastify';
import { MarinaError } from '@marina/errors';
import { createServeError } from '../../errors.ts';
import { grpcServiceError } from '../error-map.ts';
import type { KeyCheck } from '../grpc-common.ts';

type Query = Record<string, string | number | boolean | undefined>;

function path(...parts: Array<string | undefined>): string {
  return `/${parts
    .filter((p): p is string => p !== undefined && p !== '')
    .map(encodeURIComponent)
    .join('/')}`;
}

/** proto3 has no "unset": 0 and '' mean "not given", as in TorchServe's gRPC management. */
function given(value: string | number | undefined): string | number | undefined {
  return value === 0 || value === '' ? undefined : value;
}

/**
 * One gRPC management call as a REST management request on the same server (fastify `inject`, in
 * process): `msg` carries the REST body; a REST error keeps its code on the gRPC side.
 */
function createRestCall(management: FastifyInstance, checkKey: KeyCheck) {
  return (method: 'GET' | 'POST' | 'PUT' | 'DELETE', url: string, query: Query = {}, body?: unknown) =>
    (rpc: grpc.ServerUnaryCall<unknown, unknown>, callback: grpc.sendUnaryData<unknown>) => {
      const denied = checkKey(rpc);
      if (denied) return callback(grpcServiceError(denied, 'torchserve'));
      const search = new URLSearchParams();
      for (const [k, v] of Object.entries(query)) if (v !== undefined) search.set(k, String(v));
      const authorization = rpc.metadata.get('authorization')[0];
      management
        .inject({
          method,
          url: `${url}${search.size > 0 ? `?${search}` : ''}`,
          headers: {
            ...(authorization ? { authorization: String(authorization) } : {}),
            ...(body === undefined ? {} : { 'content-type': 'application/json' }),
          },
          ...(body === undefined ? {} : { payload: JSON.stringify(body) }),
        })
        .then(
          (res) => {
            if (res.statusCode < 300) return callback(null, { msg: res.body });
            let message = res.body;
            let code: string | undefined;
            try {
              const parsed = JSON.parse(res.body) as { message?: string; marinaCode?: string };
              message = parsed.message ?? message;
              code = parsed.marinaCode;
            } catch {
              /* not JSON: keep the body */
            }
            // The REST answer's error, as it was before the REST form: one map gives its gRPC form.
            callback(
              grpcServiceError(new MarinaError(code ?? 'MARINA_ERR_INTERNAL', message, res.statusCode), 'torchserve'),
            );
          },
          (error: unknown) => callback(grpcServiceError(error, 'torchserve')),
        );
    };
}

/** Answers INVALID_ARGUMENT when a required field is empty (proto3 has no "unset"). */
function requiredField(name: string | undefined, field: string, callback: grpc.sendUnaryData<unknown>): boolean {
  if (name) return true;
  callback(grpcServiceError(createServeError.MARINA_ERR_BAD_REQUEST(`Parameter ${field} is required.`), 'torchserve'));
  return false;
}

export function createTorchServeManagementService(options: {
  management: FastifyInstance;
  checkKey: KeyCheck;
}): grpc.UntypedServiceImplementation {
  const { management, checkKey } = options;

  const call = createRestCall(management, checkKey);
  const required = requiredField;

  type R<T> = grpc.ServerUnaryCall<T, unknown>;
  return {
    DescribeModel: (
      rpc: R<{ model_name: string; model_version: string; customized: boolean }>,
      cb: grpc.sendUnaryData<unknown>,
    ) => {
      const r = rpc.request;
      if (required(r.model_name, 'model_name', cb)) call('GET', path('models', r.model_name, r.model_version))(rpc, cb);
    },
    ListModels: (rpc: R<{ limit: number; next_page_token: number }>, cb: grpc.sendUnaryData<unknown>) =>
      call('GET', '/models', { limit: given(rpc.request.limit), next_page_token: given(rpc.request.next_page_token) })(
        rpc,
        cb,
      ),
    RegisterModel: (
      rpc: R<{
        url: string;
        model_name: string;
        handler: string;
        runtime: string;
        batch_size: number;
        max_batch_delay: number;
        initial_workers: number;
        synchronous: boolean;
        response_timeout: number;
        startup_timeout: number;
      }>,
      cb: grpc.sendUnaryData<unknown>,
    ) => {
      const r = rpc.request;
      if (!required(r.url, 'url', cb)) return;
      call('POST', '/models', {
        url: r.url,
        model_name: given(r.model_name),
        handler: given(r.handler),
        runtime: given(r.runtime),
        batch_size: given(r.batch_size),
        max_batch_delay: given(r.max_batch_delay),
        initial_workers: given(r.initial_workers),
        response_timeout: given(r.response_timeout),
        startup_timeout: given(r.startup_timeout),
        synchronous: r.synchronous,
      })(rpc, cb);
    },
    ScaleWorker: (
      rpc: R<{
        model_name: string;
        model_version: string;
        min_worker: number;
        max_worker: number;
        synchronous: boolean;
      }>,
      cb: grpc.sendUnaryData<unknown>,
    ) => {
      const r = rpc.request;
      if (required(r.model_name, 'model_name', cb))
        call('PUT', path('models', r.model_name, r.model_version), {
          min_worker: given(r.min_worker),
          max_worker: given(r.max_worker),
          synchronous: r.synchronous,
        })(rpc, cb);
    },
    SetDefault: (rpc: R<{ model_name: string; model_version: string }>, cb: grpc.sendUnaryData<unknown>) => {
      const r = rpc.request;
      if (required(r.model_name, 'model_name', cb) && required(r.model_version, 'model_version', cb))
        call('PUT', `${path('models', r.model_name, r.model_version)}/set-default`)(rpc, cb);
    },
    UnregisterModel: (rpc: R<{ model_name: string; model_version: string }>, cb: grpc.sendUnaryData<unknown>) => {
      const r = rpc.request;
      if (required(r.model_name, 'model_name', cb))
        call('DELETE', path('models', r.model_name, r.model_version))(rpc, cb);
    },
  };
}

/**
 * Marina's TrafficAPIsService (marina_management.proto): SetTrafficPolicy and GetTrafficPolicy,
 * translated to PUT and GET /models/{name}/traffic.
 */
export function createTrafficManagementService(options: {
  management: FastifyInstance;
  checkKey: KeyCheck;
}): grpc.UntypedServiceImplementation {
  const call = createRestCall(options.management, options.checkKey);
  type R<T> = grpc.ServerUnaryCall<T, unknown>;
  return {
    SetTrafficPolicy: (
      rpc: R<{
        model_name: string;
        weights: Record<string, number>;
        shadow: { version: string; percent: number } | null;
        sticky_header: string;
      }>,
      cb: grpc.sendUnaryData<unknown>,
    ) => {
      const r = rpc.request;
      if (!requiredField(r.model_name, 'model_name', cb)) return;
      const body = {
        ...(Object.keys(r.weights ?? {}).length > 0 ? { weights: r.weights } : {}),
        ...(r.shadow ? { shadow: { version: r.shadow.version, percent: r.shadow.percent || 100 } } : {}),
        ...(r.sticky_header ? { stickyHeader: r.sticky_header } : {}),
      };
      call('PUT', `${path('models', r.model_name)}/traffic`, {}, body)(rpc, cb);
    },
    GetTrafficPolicy: (rpc: R<{ model_name: string }>, cb: grpc.sendUnaryData<unknown>) => {
      if (requiredField(rpc.request.model_name, 'model_name', cb))
        call('GET', `${path('models', rpc.request.model_name)}/traffic`)(rpc, cb);
    },
  };
}

/**
 * Marina's ResidencyAPIsService (protos/marina_residency.proto): SetPinned, translated to
 * `PUT /models/{name}[/{version}]?pinned=true|false` on the REST management API.
 */
export function createResidencyManagementService(options: {
  management: FastifyInstance;
  checkKey: KeyCheck;
}): grpc.UntypedServiceImplementation {
  const call = createRestCall(options.management, options.checkKey);
  return {
    SetPinned: (
      rpc: grpc.ServerUnaryCall<{ model_name: string; model_version: string; pinned: boolean }, unknown>,
      cb: grpc.sendUnaryData<unknown>,
    ) => {
      const r = rpc.request;
      if (!requiredField(r.model_name, 'model_name', cb)) return;
      call('PUT', path('models', r.model_name, r.model_version), { pinned: r.pinned === true })(rpc, cb);
    },
  };
}
