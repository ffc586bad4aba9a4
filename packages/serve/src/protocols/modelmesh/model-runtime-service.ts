/**
 * KServe ModelMesh's model-runtime SPI (`mmesh.ModelRuntime`, protos/model-runtime.proto), the
 * contract a serving runtime implements to run under ModelMesh: ModelMesh decides which models live
 * in which pod and calls loadModel/unloadModel; inference then reaches Marina's own gRPC data
 * endpoint (the Open Inference Protocol on grpc_inference_port), with the model id put in the
 * request's model name field (methodInfos' idInjectionPath), as ModelMesh's Triton adapter does.
 *
 * loadModel registers `modelPath` under the name `modelId` (every protocol then knows the model by
 * that name) and makes it resident; unloadModel unregisters it. Models registered otherwise
 * (load_models, the management API) are never touched: a loadModel whose modelId names one is refused.
 */
import { join } from 'node:path';
import type * as grpc from '@grpc/grpc-js';
import { assertModelIdentity } from '@marina/archive';
import type { ServerConfig } from '../../config/server-config.ts';
import { createServeError } from '../../errors.ts';
import type { ModelDescription, RegisterModelOptions } from '../../registry/model-registry-api.ts';
import { MARINA_VERSION } from '../../version.ts';
import { grpcError, modelMeshRefusedLoadError } from '../error-map.ts';
import { removeWrapped, resolveModelPath, type ResolvedModelPath } from './resolve-model-path.ts';

/**
 * ModelMesh's conservative default size of a model, for models it has not sized yet: most ONNX
 * models Marina serves need less resident (ResNet-50 with one worker: about 250 MB).
 */
const DEFAULT_MODEL_SIZE_BYTES = 256 * 1024 ** 2;

/** What the SPI needs of the registry (the core's ModelRegistry implements it). */
export interface ModelRuntimeRegistry {
  register(options: RegisterModelOptions): Promise<unknown>;
  /** Makes a registered version resident (bounded by the budget and startupTimeout). */
  load(
    modelName: string,
    modelVersion?: string,
    options?: { reason?: 'startup' | 'demand' | 'api' },
  ): Promise<ModelDescription>;
  unregister(modelName: string, modelVersion?: string): Promise<void>;
  describe(modelName: string, modelVersion?: string): ModelDescription[];
  list(): Array<{ modelName: string }>;
  /** model_memory_budget in bytes; undefined without a budget. */
  readonly memoryBudgetBytes: number | undefined;
  /** A conservative size before anything is loaded (predictModelSize). */
  estimateModelBytes(options: { modelDir: string }): Promise<number>;
}

export interface ModelRuntimeServiceOptions {
  registry: ModelRuntimeRegistry;
  config: Pick<
    ServerConfig,
    'modelStore' | 'allowedUrls' | 'extractionCacheDir' | 'cpuCount' | 'defaultStartupTimeoutSec'
  >;
  log?: (level: 'info' | 'warn' | 'error', message: string) => void;
}

interface LoadModelRequest {
  modelId: string;
  modelType: string;
  modelPath: string;
  modelKey: string;
}

interface LoadModelResponse {
  sizeInBytes: number;
  maxConcurrency: number;
}

/** The inference methods ModelMesh may forward, each with the field number of the model name to set. */
const ID_INJECTED_METHODS: Record<string, number[]> = Object.fromEntries(
  [
    ...['inference.GRPCInferenceService', 'org.pytorch.serve.grpc.openinference.GRPCInferenceService'].flatMap(
      (service) => ['ModelInfer', 'ModelMetadata', 'ModelReady'].map((method) => `${service}/${method}`),
    ),
    'org.pytorch.serve.grpc.inference.InferenceAPIsService/Predictions',
  ].map((name) => [name, [1]]),
);

/** uint32's largest value (modelLoadingTimeoutMs). */
const UINT32_MAX = 2 ** 32 - 1;

export class ModelRuntimeService {
  readonly #registry: ModelRuntimeRegistry;
  readonly #config: ModelRuntimeServiceOptions['config'];
  readonly #log: NonNullable<ModelRuntimeServiceOptions['log']>;
  /** modelId → how it was resolved, for the models this SPI registered (and only those). */
  readonly #owned = new Map<string, ResolvedModelPath>();
  /** modelId → its loadModel in progress: a second call shares it, unloadModel waits for it. */
  readonly #loading = new Map<string, Promise<LoadModelResponse>>();
  /** Errors of loadModel calls that failed before registering anything (answered as such, see modelMeshRefusedLoadError). */
  readonly #beforeAttempt = new WeakSet<object>();

  constructor(options: ModelRuntimeServiceOptions) {
    this.#registry = options.registry;
    this.#config = options.config;
    this.#log = options.log ?? (() => undefined);
  }

  get #wrapDir(): string {
    return join(this.#config.extractionCacheDir, '.modelmesh-onnx');
  }

  #isRegistered(modelId: string): boolean {
    return this.#registry.list().some((m) => m.modelName === modelId);
  }

  /**
   * Registers and loads `modelPath` as `modelId`; answers once it is resident, with the bytes its
   * load measured (0 when not measured yet: ModelMesh then asks modelSize).
   */
  loadModel(request: LoadModelRequest): Promise<LoadModelResponse> {
    const running = this.#loading.get(request.modelId);
    if (running) return running;
    const loading = this.#load(request).finally(() => this.#loading.delete(request.modelId));
    this.#loading.set(request.modelId, loading);
    return loading;
  }

  async #load(request: LoadModelRequest): Promise<LoadModelResponse> {
    const { modelId } = request;
    if (this.#owned.has(modelId) && this.#isRegistered(modelId))
      return this.#answer(await this.#registry.load(modelId));
    let resolved: ResolvedModelPath;
    try {
      assertModelIdentity(modelId, '1.0');
      if (this.#isRegistered(modelId))
        throw createServeError.MARINA_ERR_MODEL_VERSION_CONFLICT(
          `a model named ${modelId} is already registered by other means (load_models or the management API); ModelMesh's modelId must name a model of its own`,
        );
      resolved = await resolveModelPath({
        modelPath: request.modelPath,
        modelId,
        modelStore: this.#config.modelStore,
        allowedUrls: this.#config.allowedUrls,
        wrapDir: this.#wrapDir,
      });
    } catch (error) {
      if (error !== null && typeof error === 'object') this.#beforeAttempt.add(error);
      throw error;
    }
    this.#owned.set(modelId, resolved);
    let isRegistered = false;
    try {
      await this.#registry.register({
        url: request.modelPath.slice(0, 1000),
        archivePath: resolved.archivePath,
        modelName: modelId,
        // Registered first, then loaded once: a load that waits for room in the budget waits one startupTimeout, not two.
        load: false,
        synchronous: true,
        // A wrapped .onnx folder is Marina's own copy: unregister deletes it.
        isDownloaded: resolved.kind === 'wrapped-onnx',
      });
      isRegistered = true;
      const description = await this.#registry.load(modelId, undefined, { reason: 'api' });
      this.#log('info', `ModelMesh loaded model ${modelId} (${description.residentBytes ?? 0} bytes resident)`);
      return this.#answer(description);
    } catch (error) {
      this.#owned.delete(modelId);
      // Only what this call registered: a failed register may have met a model someone else registered meanwhile.
      if (isRegistered) await this.#registry.unregister(modelId).catch(() => undefined);
      await removeWrapped(resolved).catch(() => undefined);
      throw error;
    }
  }

  #answer(description: ModelDescription): LoadModelResponse {
    return { sizeInBytes: Math.max(0, Math.round(description.residentBytes ?? 0)), maxConcurrency: 0 };
  }

  /** Unregisters a model this SPI loaded (after its load in progress settles); anything else answers at once. */
  async unloadModel(request: { modelId: string }): Promise<Record<string, never>> {
    const { modelId } = request;
    await this.#loading.get(modelId)?.catch(() => undefined);
    if (!this.#owned.has(modelId)) return {};
    const resolved = this.#owned.get(modelId)!;
    this.#owned.delete(modelId);
    if (this.#isRegistered(modelId)) await this.#registry.unregister(modelId);
    await removeWrapped(resolved).catch(() => undefined);
    this.#log('info', `ModelMesh unloaded model ${modelId}`);
    return {};
  }

  /** The model's measured resident bytes. @throws MARINA_ERR_MODEL_NOT_FOUND */
  modelSize(request: { modelId: string }): { sizeInBytes: number } {
    if (!this.#owned.has(request.modelId))
      throw createServeError.MARINA_ERR_MODEL_NOT_FOUND(
        `Model not found: ${request.modelId} (ModelMesh loaded no such model)`,
      );
    const [description] = this.#registry.describe(request.modelId);
    return { sizeInBytes: Math.max(0, Math.round(description?.residentBytes ?? 0)) };
  }

  /** An estimate before loading, from what is on disk; reads no model and writes nothing. */
  async predictModelSize(request: LoadModelRequest): Promise<{ sizeInBytes: number }> {
    const resolved = await resolveModelPath({
      modelPath: request.modelPath,
      modelId: request.modelId,
      modelStore: this.#config.modelStore,
      allowedUrls: this.#config.allowedUrls,
      wrapDir: this.#wrapDir,
      isWrapping: false,
    });
    return { sizeInBytes: Math.round(await this.#registry.estimateModelBytes({ modelDir: resolved.archivePath })) };
  }

  /**
   * READY with the budget as capacity, once every model this SPI loaded before is unloaded (the
   * SPI's rule: a runtimeStatus call means ModelMesh restarted and knows of no loaded model).
   */
  async runtimeStatus(): Promise<Record<string, unknown>> {
    await Promise.all([...this.#loading.values()].map((p) => p.catch(() => undefined)));
    for (const modelId of [...this.#owned.keys()]) await this.unloadModel({ modelId });
    const startupMs = this.#config.defaultStartupTimeoutSec * 1000;
    return {
      status: 'READY',
      capacityInBytes: this.#registry.memoryBudgetBytes ?? 0,
      maxLoadingConcurrency: Math.max(1, this.#config.cpuCount),
      // A load may first wait for room in the budget (up to startupTimeout), then load (up to startupTimeout).
      modelLoadingTimeoutMs: Math.min(UINT32_MAX, 2 * startupMs),
      defaultModelSizeInBytes: DEFAULT_MODEL_SIZE_BYTES,
      runtimeVersion: MARINA_VERSION,
      numericRuntimeVersion: 0,
      methodInfos: Object.fromEntries(
        Object.entries(ID_INJECTED_METHODS).map(([name, path]) => [name, { idInjectionPath: path }]),
      ),
      limitModelConcurrency: false,
      allowAnyMethod: false,
    };
  }

  /** The grpc-js implementation of mmesh.ModelRuntime. */
  implementation(): grpc.UntypedServiceImplementation {
    const handle =
      <Req, Res>(run: (request: Req) => Res | Promise<Res>): grpc.handleUnaryCall<Req, Res> =>
      (call, callback) => {
        Promise.resolve()
          .then(() => run(call.request))
          .then(
            (value) => callback(null, value),
            (error: unknown) => {
              const isEarly = error !== null && typeof error === 'object' && this.#beforeAttempt.has(error);
              const status = isEarly ? modelMeshRefusedLoadError(error) : grpcError(error);
              callback(Object.assign(new Error(status.details), status));
            },
          );
      };
    return {
      loadModel: handle((r: LoadModelRequest) => this.loadModel(r)),
      unloadModel: handle((r: { modelId: string }) => this.unloadModel(r)),
      modelSize: handle((r: { modelId: string }) => this.modelSize(r)),
      predictModelSize: handle((r: LoadModelRequest) => this.predictModelSize(r)),
      runtimeStatus: handle(() => this.runtimeStatus()),
    };
  }
}
