/**
 * Shadow traffic: copies of live requests run on a shadow version after the live answer is
 * sent, their answers compared with the live ones and then thrown away.
 *
 * A copy never delays or fails a live request, and it is the first work shed under load: copies
 * wait in this one bounded queue (not in the shadow version's job queue) and one is handed to the
 * shadow version only while it has an idle worker, the live version has nothing waiting and the
 * machine's CPU pressure (PSI) is below `maxCpuPressurePercent`. A
 * copy that finds the queue full pushes out the oldest, which is counted as dropped; so is one
 * that waited longer than SHADOW_MAX_WAIT_MS, or that the shadow version refused.
 */
import type { MarinaError } from '@marina/errors';
import { scheduleOf } from '../scheduling/queue-policy.ts';
import { Job, type JobInput, type JobResult } from '../scheduling/job.ts';
import type { BodyDecoding } from '../workers/worker-protocol.ts';
import { agreementMethodOf, compareAnswers, type AgreementMethod } from './output-agreement.ts';
import type { ModelVersion } from '../scheduling/model-version.ts';
import type { ShadowOutcome, ShadowStats } from './model-registry-api.ts';

/** Copies waiting for a shadow version with room, over all models (each holds one request's input). */
export const SHADOW_QUEUE_CAPACITY = 16;
/** shadow_max_cpu_pressure's default: copies wait while CPU pressure (PSI some avg10) is 50 % or more. */
export const DEFAULT_SHADOW_MAX_CPU_PRESSURE_PERCENT = 50;
/** A copy that could not start within this long is dropped: the machine had no headroom. */
const SHADOW_MAX_WAIT_MS = 10_000;

/** What the registry hands over once a live request was answered. */
export interface ShadowCopy {
  live: ModelVersion;
  shadow: ModelVersion;
  requestId: string;
  input: JobInput;
  headers: Record<string, string> | undefined;
  bodyDecoding: BodyDecoding;
  liveResult: JobResult;
}

interface Waiting extends ShadowCopy {
  queuedAt: number;
}

export class ShadowTraffic {
  readonly #stats = new Map<string, ShadowStats>();
  /** A ring of waiting copies: oldest at #head. */
  readonly #ring: Array<Waiting | undefined> = new Array(SHADOW_QUEUE_CAPACITY);
  #head = 0;
  #count = 0;
  /** Versions whose 'progress' event pumps the queue while a copy waits for room. */
  readonly #watched = new Set<ModelVersion>();
  readonly #onProgress = () => this.#pump();
  readonly #onOutcome: (outcome: ShadowOutcome) => void;
  readonly #log: (level: 'warn', message: string) => void;
  readonly #cpuPressure: () => number | undefined;
  readonly #maxCpuPressurePercent: number;

  /**
   * @param options.cpuPressure the machine's CPU pressure, percent (createCpuPressureReader); undefined: unknown, not gated.
   * @param options.maxCpuPressurePercent copies wait while the pressure is at or above this; 100 turns the gate off. Default 100.
   */
  constructor(options: {
    onOutcome: (outcome: ShadowOutcome) => void;
    log?: (level: 'warn', message: string) => void;
    cpuPressure?: () => number | undefined;
    maxCpuPressurePercent?: number;
  }) {
    this.#onOutcome = options.onOutcome;
    this.#log = options.log ?? (() => undefined);
    this.#cpuPressure = options.cpuPressure ?? (() => undefined);
    this.#maxCpuPressurePercent = options.maxCpuPressurePercent ?? 100;
  }

  /** Copies waiting now. */
  get waiting(): number {
    return this.#count;
  }

  #statsOf(version: ModelVersion, method?: AgreementMethod): ShadowStats {
    const key = `${version.modelName}\u0000${version.modelVersion}`;
    let stats = this.#stats.get(key);
    if (!stats) {
      stats = {
        modelName: version.modelName,
        modelVersion: version.modelVersion,
        requests: 0,
        failed: 0,
        dropped: 0,
        compared: 0,
        agreementSum: 0,
        maxAbsDiff: 0,
        method,
      };
      this.#stats.set(key, stats);
    }
    if (method !== undefined) stats.method = method;
    return stats;
  }

  /** The numbers of one shadow version, or undefined when it never shadowed. */
  stats(modelName: string, modelVersion: string): ShadowStats | undefined {
    return this.#stats.get(`${modelName}\u0000${modelVersion}`);
  }

  /** Forgets a version's numbers (it was unregistered). */
  forget(modelName: string, modelVersion: string): void {
    this.#stats.delete(`${modelName}\u0000${modelVersion}`);
  }

  /** Queues a copy; when the queue is full the oldest copy is dropped to make room. */
  offer(copy: ShadowCopy): void {
    if (this.#count === SHADOW_QUEUE_CAPACITY) this.#drop(this.#shift()!);
    this.#ring[(this.#head + this.#count) % SHADOW_QUEUE_CAPACITY] = { ...copy, queuedAt: performance.now() };
    this.#count++;
    this.#pump();
  }

  #shift(): Waiting | undefined {
    if (this.#count === 0) return undefined;
    const item = this.#ring[this.#head];
    this.#ring[this.#head] = undefined;
    this.#head = (this.#head + 1) % SHADOW_QUEUE_CAPACITY;
    this.#count--;
    return item;
  }

  #drop(copy: ShadowCopy): void {
    this.#statsOf(copy.shadow).dropped++;
    this.#emit(copy.shadow, 'dropped');
  }

  #emit(version: ModelVersion, outcome: ShadowOutcome['outcome'], agreement?: number): void {
    this.#onOutcome({
      modelName: version.modelName,
      modelVersion: version.modelVersion,
      outcome,
      ...(agreement === undefined ? {} : { agreement }),
    });
  }

  /** Room for a copy: the shadow version has an idle worker, the live version has no request waiting, and the CPU is not contended. */
  #hasRoom(copy: Waiting): boolean {
    if (copy.shadow.pendingJobs >= copy.shadow.pool.readyCount || copy.live.queue.waiting > 0) return false;
    if (this.#maxCpuPressurePercent >= 100) return true;
    const pressure = this.#cpuPressure();
    return pressure === undefined || pressure < this.#maxCpuPressurePercent;
  }

  #pump(): void {
    const now = performance.now();
    while (this.#count > 0) {
      const head = this.#ring[this.#head]!;
      if (now - head.queuedAt > SHADOW_MAX_WAIT_MS) {
        this.#drop(this.#shift()!);
        continue;
      }
      if (!this.#hasRoom(head)) break;
      this.#run(this.#shift()!);
    }
    this.#watch(this.#count === 0 ? undefined : this.#ring[this.#head]);
  }

  /** Listens to the versions the head copy waits on (their 'progress' says when room may have come), and to nothing else. */
  #watch(head: Waiting | undefined): void {
    const wanted = new Set<ModelVersion>(head ? [head.shadow, head.live] : []);
    for (const version of this.#watched) {
      if (wanted.has(version)) continue;
      version.off('progress', this.#onProgress);
      this.#watched.delete(version);
    }
    for (const version of wanted) {
      if (this.#watched.has(version)) continue;
      version.on('progress', this.#onProgress);
      this.#watched.add(version);
    }
  }

  #run(copy: Waiting): void {
    const { live, shadow } = copy;
    const method = live.handler === shadow.handler ? agreementMethodOf(live.handler) : undefined;
    const stats = this.#statsOf(shadow, method);
    const job = new Job({
      requestId: `${copy.requestId}-shadow`,
      input: copy.input,
      ...(copy.headers ? { headers: copy.headers } : {}),
      bodyDecoding: copy.bodyDecoding,
      // A copy nobody waits for goes at the shadow's lowest priority level (its policy's timeout applies).
      schedule: scheduleOf(
        shadow.settings.queue,
        { priority: shadow.settings.queue.priorityLevels },
        performance.now(),
        shadow.label,
      ),
    });
    try {
      shadow.submit(job);
    } catch {
      // Full, removed or without workers: the copy is shed, the live request never knew.
      this.#drop(copy);
      return;
    }
    job.promise.then(
      (result) => {
        stats.requests++;
        let agreement: number | undefined;
        if (method !== undefined) {
          try {
            const compared = compareAnswers(method, copy.liveResult, result);
            if (compared) {
              agreement = compared.agreement;
              stats.compared++;
              stats.agreementSum += compared.agreement;
              if (compared.maxAbsDiff !== undefined) stats.maxAbsDiff = Math.max(stats.maxAbsDiff, compared.maxAbsDiff);
            }
          } catch (error) {
            this.#log('warn', `${shadow.label}: comparing a shadow answer failed: ${(error as Error).message}`);
          }
        }
        this.#emit(shadow, 'answered', agreement);
        this.#pump();
      },
      (_error: MarinaError) => {
        stats.requests++;
        stats.failed++;
        this.#emit(shadow, 'failed');
        this.#pump();
      },
    );
  }

  /** Drops every waiting copy (the server is closing) and stops listening. */
  close(): void {
    while (this.#count > 0) this.#drop(this.#shift()!);
    this.#watch(undefined);
  }
}
