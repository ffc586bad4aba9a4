/**
 * IN-MEMORY STAND-IN for ModelRegistryApi, for phase-1 tests of the operator-facing modules
 * (management routes, metrics, snapshots, autoscaler) while the real registry is being written.
 * It keeps names, versions, defaults and worker counts, emits the contract's events, and throws
 * MarinaErrors with the statuses TorchServe uses. No archive is opened and no worker runs:
 * phase 2 replaces it with the real registry in end-to-end tests.
 */
import { EventEmitter } from 'node:events';
import { basename } from 'node:path';
import { MarinaError } from '@marina/errors';
import type {
  ModelDescription,
  ModelListEntry,
  ModelRegistryApi,
  ModelVersionStats,
  RegisterModelOptions,
  RegisterResult,
  RegistryEvents,
  ScaleOptions,
  SnapshotModelVersion,
} from '../src/registry/model-registry-api.ts';
import type { ShadowStats } from '../src/registry/model-registry-api.ts';
import type { TrafficPolicy } from '../src/registry/traffic-policy.ts';

interface Version {
  url: string;
  archivePath: string;
  marName: string;
  minWorkers: number;
  maxWorkers: number;
  workers: number;
  busyWorkers: number;
  queueDepth: number;
  batchSize: number;
  maxBatchDelay: number;
  responseTimeout: number;
  intraOpNumThreads: number;
}

export class StandInRegistry implements ModelRegistryApi {
  readonly events = new EventEmitter<RegistryEvents>();
  readonly models = new Map<string, { defaultVersion: string; versions: Map<string, Version> }>();
  readonly calls: string[] = [];
  /** Workers that become ready on a synchronous register/scale (fewer simulates a 206). */
  readyLimit = Number.POSITIVE_INFINITY;
  jobQueueSize = 100;

  private version(name: string, version?: string): [string, Version] {
    const model = this.models.get(name);
    if (!model) throw new MarinaError('MARINA_ERR_MODEL_NOT_FOUND', `Model not found: ${name}`, 404);
    const v = version ?? model.defaultVersion;
    const entry = model.versions.get(v);
    if (!entry)
      throw new MarinaError(
        'MARINA_ERR_MODEL_VERSION_NOT_FOUND',
        `Model version: ${v} does not exist for model: ${name}`,
        404,
      );
    return [v, entry];
  }

  /** `name_v2.0.mar` → name 'name', version '2.0'; otherwise version '1.0'. */
  async register(o: RegisterModelOptions): Promise<RegisterResult> {
    this.calls.push(`register ${o.url}`);
    const file = basename(o.archivePath).replace(/\.(mar|tar\.gz)$/, '');
    const m = /^(.*)_v([\d.]+)$/.exec(file);
    const modelName = o.modelName ?? (m ? m[1]! : file);
    const modelVersion = m ? m[2]! : '1.0';
    const model = this.models.get(modelName) ?? { defaultVersion: modelVersion, versions: new Map() };
    if (model.versions.has(modelVersion)) {
      throw new MarinaError(
        'MARINA_ERR_MODEL_VERSION_EXISTS',
        `Model version ${modelVersion} is already registered for model ${modelName}`,
        409,
      );
    }
    const minWorkers = o.minWorkers ?? o.initialWorkers ?? 1;
    const requested = o.initialWorkers ?? minWorkers;
    const workers = o.synchronous ? Math.min(requested, this.readyLimit) : requested;
    model.versions.set(modelVersion, {
      url: o.url,
      archivePath: o.archivePath,
      marName: basename(o.archivePath),
      minWorkers,
      maxWorkers: o.maxWorkers ?? Math.max(minWorkers, requested),
      workers,
      busyWorkers: 0,
      queueDepth: 0,
      batchSize: o.batchSize ?? 1,
      maxBatchDelay: o.maxBatchDelayMs ?? 100,
      responseTimeout: o.responseTimeoutSec ?? 120,
      intraOpNumThreads: 1,
    });
    this.models.set(modelName, model);
    this.events.emit('changed');
    return { modelName, modelVersion, workersRequested: requested, workersReady: workers };
  }

  async unregister(name: string, version?: string): Promise<void> {
    const [v] = this.version(name, version);
    const model = this.models.get(name)!;
    if (version !== undefined && v === model.defaultVersion && model.versions.size > 1) {
      throw new MarinaError(
        'MARINA_ERR_DEFAULT_VERSION_REMOVAL',
        `Cannot remove default version for model ${name}`,
        403,
      );
    }
    if (version === undefined) this.models.delete(name);
    else model.versions.delete(v);
    if (model.versions.size === 0) this.models.delete(name);
    this.events.emit('changed');
  }

  async scale(name: string, version: string | undefined, o: ScaleOptions): Promise<{ workers: number }> {
    const [, entry] = this.version(name, version);
    entry.minWorkers = o.minWorkers;
    entry.maxWorkers = o.maxWorkers;
    if (entry.workers < o.minWorkers)
      entry.workers = o.synchronous ? Math.min(o.minWorkers, this.readyLimit) : o.minWorkers;
    if (entry.workers > o.maxWorkers) entry.workers = o.maxWorkers;
    this.events.emit('changed');
    return { workers: entry.workers };
  }

  async load(name: string, version?: string): Promise<ModelDescription> {
    this.calls.push(`load ${name}`);
    return this.describe(name, version)[0]!;
  }

  async unload(name: string, version?: string): Promise<void> {
    this.version(name, version);
    this.calls.push(`unload ${name}`);
  }

  async setPinned(name: string, version: string | undefined, pinned: boolean): Promise<void> {
    this.version(name, version);
    this.calls.push(`pin ${name} ${pinned}`);
  }

  setDefault(name: string, version: string): void {
    this.version(name, version);
    this.models.get(name)!.defaultVersion = version;
    this.events.emit('changed');
  }

  describe(name: string, version?: string): ModelDescription[] {
    const model = this.models.get(name);
    if (!model) throw new MarinaError('MARINA_ERR_MODEL_NOT_FOUND', `Model not found: ${name}`, 404);
    const versions = version === 'all' ? [...model.versions.keys()] : [this.version(name, version)[0]];
    return versions.map((v) => {
      const e = model.versions.get(v)!;
      return {
        modelName: name,
        modelVersion: v,
        modelUrl: e.url,
        runtime: 'onnx',
        minWorkers: e.minWorkers,
        maxWorkers: e.maxWorkers,
        batchSize: e.batchSize,
        maxBatchDelay: e.maxBatchDelay,
        responseTimeout: e.responseTimeout,
        startupTimeout: 120,
        maxRetryTimeoutInSec: 300,
        clientTimeoutInMills: 0,
        parallelType: '',
        parallelLevel: 0,
        deviceType: 'cpu',
        continuousBatching: false,
        useJobTicket: false,
        useVenv: false,
        stateful: false,
        sequenceMaxIdleMSec: 0,
        sequenceTimeoutMSec: 0,
        maxNumSequence: 0,
        maxSequenceJobQueueSize: 0,
        loadedAtStartup: false,
        workers: Array.from({ length: e.workers }, (_, i) => ({
          id: String(9000 + i),
          startTime: '2025-01-01T00:00:00.000Z',
          status: 'READY' as const,
          memoryUsage: 1024,
          pid: process.pid,
          gpu: false as const,
          gpuUsage: 'N/A' as const,
          intraOpNumThreads: e.intraOpNumThreads,
          cpuPriority: 'normal' as const,
        })),
        jobQueueStatus: { remainingCapacity: this.jobQueueSize - e.queueDepth, pendingRequests: e.queueDepth },
      };
    });
  }

  list(): ModelListEntry[] {
    return [...this.models.entries()]
      .sort(([a], [b]) => a.localeCompare(b))
      .map(([name, m]) => ({
        modelName: name,
        modelUrl: m.versions.get(m.defaultVersion)!.url,
        defaultVersion: m.defaultVersion,
        versions: [...m.versions.keys()],
      }));
  }

  stats(): ModelVersionStats[] {
    const out: ModelVersionStats[] = [];
    for (const [name, m] of this.models) {
      for (const [v, e] of m.versions) {
        out.push({
          modelName: name,
          modelVersion: v,
          queueDepth: e.queueDepth,
          runningJobs: 0,
          jobQueueSize: this.jobQueueSize,
          workers: e.workers,
          busyWorkers: e.busyWorkers,
          minWorkers: e.minWorkers,
          maxWorkers: e.maxWorkers,
          intraOpNumThreads: e.intraOpNumThreads,
        });
      }
    }
    return out;
  }

  /** Policies as given (the stand-in checks only that the model exists). */
  readonly traffic = new Map<string, TrafficPolicy>();

  setTrafficPolicy(name: string, policy: TrafficPolicy): TrafficPolicy {
    this.version(name);
    this.traffic.set(name, policy);
    this.events.emit('changed');
    return policy;
  }

  getTrafficPolicy(name: string): TrafficPolicy {
    const [defaultVersion] = this.version(name);
    return this.traffic.get(name) ?? { weights: { [defaultVersion]: 100 } };
  }

  trafficPolicies(): Record<string, TrafficPolicy> {
    return Object.fromEntries(this.traffic);
  }

  shadowStats(): ShadowStats[] {
    return [];
  }

  snapshot(): Record<string, Record<string, SnapshotModelVersion>> {
    const out: Record<string, Record<string, SnapshotModelVersion>> = {};
    for (const [name, m] of this.models) {
      out[name] = {};
      for (const [v, e] of m.versions) {
        out[name][v] = {
          defaultVersion: v === m.defaultVersion,
          marName: e.marName,
          url: e.url,
          minWorkers: e.minWorkers,
          maxWorkers: e.maxWorkers,
          batchSize: e.batchSize,
          maxBatchDelay: e.maxBatchDelay,
          responseTimeout: e.responseTimeout,
        };
      }
    }
    return out;
  }

  async setWorkerCount(name: string, version: string, count: number): Promise<void> {
    this.calls.push(`setWorkerCount ${name} ${version} ${count}`);
    const [, entry] = this.version(name, version);
    entry.workers = Math.max(entry.minWorkers, Math.min(entry.maxWorkers, count));
  }

  /** Test helper: the live state of one version. */
  entry(name: string, version = '1.0'): Version {
    return this.version(name, version)[1];
  }
}
