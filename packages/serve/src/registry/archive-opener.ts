import {
  assertModelIdentity,
  extractToCache,
  type Manifest,
  normalizeManifest,
  type QuantizationSummary,
  readModelConfig,
  readQuantizationSummary,
  resolveInside,
  resolveManifestFiles,
} from '@marina/archive';
import { fixedBatchWarning } from '@marina/handlers';
import {
  allowSpinningDefaultFrom,
  cacheOptimizedModelDefaultFrom,
  forceSpinningStopDefaultFrom,
} from '../backend/ort-session.ts';
import type { ServerConfig } from '../config/server-config.ts';
import { createServeError } from '../errors.ts';
import { type ModelSettings, resolveModelSettings } from '../model-settings.ts';
import type { ModelVersion } from '../scheduling/model-version.ts';
import { MARINA_VERSION } from '../version.ts';
import type { WorkerInit } from '../workers/worker-protocol.ts';
import { estimateModelBytes } from './memory-estimate.ts';
import type { RegisterModelOptions } from './model-registry-api.ts';
import { readModelSignature, type SignatureRead } from './read-model-signature.ts';

/** Everything read from an extracted archive that a model version is built from. */
export interface OpenedArchive {
  modelName: string;
  modelVersion: string;
  modelDir: string;
  digest: string;
  manifest: Manifest;
  modelYamlConfig: Record<string, unknown>;
  quantization: QuantizationSummary | undefined;
  /** The version's settings from the API, model-config.yaml, the models JSON and the server's defaults. */
  settings: ModelSettings;
  /** Memory the version is expected to take with its minimum workers, bytes. */
  estimatedBytes: number;
  signature: SignatureRead;
  handler: string;
}

/** What the registry decides while an archive is opened. */
export interface OpenHooks {
  /** Throws when the server is closing; called after each wait, as close() may have run meanwhile. */
  assertOpen: () => void;
  /** Claims the name and version until the returned release is called; throws when they are taken. */
  reserve: (modelName: string, modelVersion: string) => () => void;
}

export interface ArchiveOpenerOptions {
  config: ServerConfig;
  log: (level: 'info' | 'warn' | 'error', message: string) => void;
  /** Environment read for the ORT session defaults (MARINA_ORT_*). */
  env: Record<string, string | undefined>;
}

/**
 * The archive side of a model version: extracts and reads an archive into an OpenedArchive, and
 * tells a worker how to load the version (its init message). Owns the list of extractions in
 * progress, which the caches must not remove.
 */
export class ArchiveOpener {
  readonly #config: ServerConfig;
  readonly #log: ArchiveOpenerOptions['log'];
  readonly #cacheOptimizedModelDefault: boolean | undefined;
  readonly #allowSpinningDefault: boolean | undefined;
  readonly #forceSpinningStopDefault: boolean | undefined;
  /** Extraction folders of opens in progress (not yet versions). */
  readonly #opening: string[] = [];

  constructor(options: ArchiveOpenerOptions) {
    this.#config = options.config;
    this.#log = options.log;
    this.#cacheOptimizedModelDefault = cacheOptimizedModelDefaultFrom(options.env);
    this.#allowSpinningDefault = allowSpinningDefaultFrom(options.env);
    this.#forceSpinningStopDefault = forceSpinningStopDefaultFrom(options.env);
  }

  /** Extraction folders of opens in progress. */
  get dirsInUse(): readonly string[] {
    return this.#opening;
  }

  /**
   * Extracts the archive, reads it, and calls `use` with the result while the extraction still
   * counts as in use and the name and version are still reserved.
   *
   * @throws MARINA_ERR_MODEL_LOAD_FAILED (no handler), MARINA_ERR_MODEL_SETTINGS_INVALID, archive
   *   errors, and what the hooks throw.
   */
  async open<T>(options: {
    request: RegisterModelOptions;
    hooks: OpenHooks;
    use: (opened: OpenedArchive) => Promise<T>;
  }): Promise<T> {
    const extracted = await extractToCache({
      archivePath: options.request.archivePath,
      cacheDir: this.#config.extractionCacheDir,
    });
    this.#opening.push(extracted.modelDir);
    try {
      options.hooks.assertOpen();
      const manifest = normalizeManifest(extracted.manifest, {
        archivePath: options.request.archivePath,
        modelName: options.request.modelName,
        handler: options.request.handler,
      });
      const { modelName, modelVersion } = manifest.model;
      assertModelIdentity(modelName, modelVersion);
      const release = options.hooks.reserve(modelName, modelVersion);
      try {
        const opened = await this.#read({ ...options, extracted, manifest });
        return await options.use(opened);
      } finally {
        release();
      }
    } finally {
      this.#opening.splice(this.#opening.indexOf(extracted.modelDir), 1);
    }
  }

  /** Reads the archive's files, settings, memory estimate and signature. */
  async #read(options: {
    request: RegisterModelOptions;
    hooks: OpenHooks;
    extracted: { modelDir: string; digest: string };
    manifest: Manifest;
  }): Promise<OpenedArchive> {
    const { request, extracted, manifest } = options;
    const { modelName, modelVersion } = manifest.model;
    // Every file the manifest names must lie inside the archive (the validator's helper).
    await resolveManifestFiles(extracted.modelDir, manifest.model);
    const modelYamlConfig = await readModelConfig(extracted.modelDir, manifest);
    const quantization = await readQuantizationSummary(extracted.modelDir);
    options.hooks.assertOpen();
    const settings = this.#settings({ request, modelName, modelVersion, modelYamlConfig });
    // Refused before it is registered: a version the budget can never hold would only fail later.
    const estimatedBytes = await estimateModelBytes({
      modelDir: extracted.modelDir,
      workers: Math.max(1, settings.minWorkers),
    });
    // Read once here, off the request path: the data plane's metadata and input checks use it.
    const signature = await readModelSignature({
      modelDir: extracted.modelDir,
      serializedFile: manifest.model.serializedFile,
    });
    options.hooks.assertOpen();
    // The same rule and words as model-archiver validate: served, with a warning.
    const batchWarning =
      'signature' in signature ? fixedBatchWarning(signature.signature, settings.batchSize) : undefined;
    if (batchWarning !== undefined)
      this.#log(
        'warn',
        `model '${modelName}' version '${modelVersion}': ${batchWarning.code}: ${batchWarning.message}`,
      );
    const handler = manifest.model.handler;
    if (!handler) {
      throw createServeError.MARINA_ERR_MODEL_LOAD_FAILED(
        `${modelName} (${request.url}) has no handler: set one in the manifest (model-archiver --handler) or pass handler= when registering`,
      );
    }
    return {
      modelName,
      modelVersion,
      modelDir: extracted.modelDir,
      digest: extracted.digest,
      manifest,
      modelYamlConfig,
      quantization,
      settings,
      estimatedBytes,
      signature,
      handler,
    };
  }

  #settings(options: {
    request: RegisterModelOptions;
    modelName: string;
    modelVersion: string;
    modelYamlConfig: Record<string, unknown>;
  }): ModelSettings {
    const { request, modelName, modelVersion } = options;
    return resolveModelSettings({
      modelName,
      modelVersion,
      server: this.#config,
      modelYamlConfig: options.modelYamlConfig,
      modelsJson: this.#config.models[modelName]?.[modelVersion],
      api: {
        batchSize: request.batchSize,
        maxBatchDelayMs: request.maxBatchDelayMs,
        responseTimeoutSec: request.responseTimeoutSec,
        startupTimeoutSec: request.startupTimeoutSec,
        initialWorkers: request.initialWorkers,
        minWorkers: request.minWorkers,
        maxWorkers: request.maxWorkers,
        fallbackWorkers: request.fallbackWorkers,
        pinned: request.pinned,
        idleUnloadSeconds: request.idleUnloadSeconds,
      },
    });
  }

  /**
   * The message a worker loads the version from: where its files are, its handler and batch size,
   * and the server's session defaults and bounds.
   *
   * @param intraOpNumThreads the thread budget's split for this worker.
   * @param isBackground the version is its model's shadow: the worker runs at background CPU priority.
   */
  workerInit(version: ModelVersion, options: { intraOpNumThreads: number; isBackground: boolean }): WorkerInit {
    return {
      modelName: version.modelName,
      modelVersion: version.modelVersion,
      modelDir: version.modelDir,
      manifest: version.manifest as unknown as Record<string, unknown>,
      handler: version.handler,
      serializedFilePath: version.manifest.model.serializedFile
        ? resolveInside(version.modelDir, version.manifest.model.serializedFile, 'model.serializedFile')
        : undefined,
      batchSize: version.settings.batchSize,
      modelYamlConfig: version.modelYamlConfig,
      intraOpNumThreads: options.intraOpNumThreads,
      isBackground: options.isBackground,
      cacheOptimizedModelDefault: this.#cacheOptimizedModelDefault,
      allowSpinningDefault: this.#allowSpinningDefault,
      forceSpinningStopDefault: this.#forceSpinningStopDefault,
      limitMaxImagePixels: this.#config.limitMaxImagePixels,
      maxResponseBytes: this.#config.maxResponseBytes,
      serverVersion: MARINA_VERSION,
      ...('graph' in version.signature && version.signature.graph ? { onnxGraph: version.signature.graph } : {}),
    };
  }
}
