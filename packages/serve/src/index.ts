export {
  buildApp,
  listStartupModels,
  type MarinaApp,
  type BuildAppOptions,
  type AppPlugin,
  type ApiName,
  type StartupLoadResult,
} from './app.ts';
export { startServer, type StartServerOptions, type RunningServer } from './start-server.ts';
export { createServerPlugins, type OperatorContext } from './server-plugins.ts';
export { createProgram, runCli, type ServeCommand } from './cli.ts';
export { MARINA_VERSION } from './version.ts';
export {
  loadConfig,
  configFromProperties,
  assertModelStoreConfigured,
  type LoadConfigOptions,
  type ConfigFileSource,
} from './config/load-config.ts';
export type { ServeCliOptions } from './config/serve-cli-options.ts';
export { configErrors, configError } from './config/config-errors.ts';
export type * from './config/server-config.ts';
export { serveErrors, createServeError, toMarinaError, type ServeErrorCode } from './errors.ts';
export {
  sendError,
  torchServeErrorBody,
  torchServeErrorType,
  isRetryable,
  RETRYABLE_CODES,
  type TorchServeErrorBody,
} from './protocols/error-map.ts';
export { ModelRegistry, type PredictOptions, type ModelRegistryOptions } from './registry/model-registry.ts';
export type * from './registry/model-registry-api.ts';
export {
  resolveModelSettings,
  type ModelSettings,
  type ApiModelSettings,
  type ResolveModelSettingsOptions,
  type SettingSource,
} from './model-settings.ts';
export { resolveIntraOpThreads, type ThreadSource } from './workers/thread-defaults.ts';
export { createSessionOptions } from './backend/ort-session.ts';
export {
  DataPlane,
  SERVER_NAME,
  type InferRequest,
  type InferResponse,
  type ModelMetadata,
  type TensorMetadata,
} from './protocols/data-plane.ts';
export { startGrpcServers, type GrpcServers, type StartGrpcServersOptions } from './protocols/grpc-server.ts';
export { loadProto, PROTO_LOADER_OPTIONS } from './protocols/grpc-common.ts';
