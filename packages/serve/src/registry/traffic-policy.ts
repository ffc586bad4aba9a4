/**
 * A model's traffic policy: how requests that name no version are split between its versions
 * (integer weights summing to 100), an optional shadow version that receives copies, and an
 * optional sticky header whose value always picks the same version under the same weights.
 *
 * The schema is the edge check (management REST body, the models JSON's `$traffic`, snapshots);
 * `checkTrafficPolicy` adds what a schema cannot say (the sum, versions that exist) and
 * `TrafficRoute` is the compiled, immutable form the registry picks versions with.
 */
import { Ajv } from 'ajv';
import { defineErrors } from '@marina/errors';

/** Error codes of traffic policies (listed in docs/reference/errors.md). */
export const trafficErrors = defineErrors({
  MARINA_ERR_TRAFFIC_POLICY_INVALID: {
    statusCode: 400,
    description:
      'A traffic policy is malformed or does not fit the model: weights must be integers from 0 to 100 summing to 100, every version named (weights, shadow) must be registered, the shadow must not be a weighted version with all the traffic, and stickyHeader must be a header name. The message names the field.',
  },
  MARINA_ERR_VERSION_IN_TRAFFIC_POLICY: {
    statusCode: 409,
    description:
      "The version cannot be unregistered because the model's traffic policy still sends it traffic (a weight above 0) or shadows it; give it weight 0 and remove it as the shadow (PUT /models/{name}/traffic), then unregister it.",
  },
});

/** The shadow: a version that gets a copy of `percent` % of the live requests after they are answered. */
interface ShadowPolicy {
  version: string;
  /** Share of live requests copied, integer 0–100. Default 100. */
  percent: number;
}

/** A model's traffic policy as the API, the models JSON and snapshots carry it. */
export interface TrafficPolicy {
  /** Version → integer weight (0–100), summing to 100; absent: every unversioned request goes to the default version. */
  weights?: Record<string, number>;
  shadow?: ShadowPolicy;
  /** Lower-case request header (HTTP header, gRPC metadata key) whose value picks the version. */
  stickyHeader?: string;
}

const VERSION_PATTERN = '^[A-Za-z0-9][A-Za-z0-9._-]*$';
/** RFC 9110 token characters: a header name (also a valid gRPC metadata key once lower-cased). */
const HEADER_PATTERN = "^[A-Za-z0-9!#$%&'*+.^_`|~-]+$";

/** JSON Schema of a traffic policy (the PUT /models/{name}/traffic body, `$traffic` in the models JSON). */
export const TRAFFIC_POLICY_SCHEMA = {
  type: 'object',
  additionalProperties: false,
  description: 'How requests that name no version are split, shadowed and kept sticky.',
  properties: {
    weights: {
      type: 'object',
      description: 'Version → integer weight 0–100; the weights sum to 100. Weight 0: only requests that name it.',
      minProperties: 1,
      maxProperties: 64,
      propertyNames: { pattern: VERSION_PATTERN, maxLength: 64 },
      additionalProperties: { type: 'integer', minimum: 0, maximum: 100 },
    },
    shadow: {
      type: 'object',
      additionalProperties: false,
      required: ['version'],
      description: 'A version that gets a copy of `percent` % of live requests after they are answered.',
      properties: {
        version: { type: 'string', pattern: VERSION_PATTERN, maxLength: 64 },
        percent: { type: 'integer', minimum: 0, maximum: 100, description: 'Default 100.' },
      },
    },
    stickyHeader: {
      type: 'string',
      pattern: HEADER_PATTERN,
      maxLength: 128,
      description: 'Request header whose value always picks the same version under the same weights.',
    },
  },
} as const;

// Strict and without coercion: "90" is not a weight. Compiled once, at start-up.
const validate = new Ajv({ allErrors: true, strict: true, coerceTypes: false, useDefaults: false }).compile(
  TRAFFIC_POLICY_SCHEMA,
);

const bounded = (text: string, max = 200) => (text.length > max ? `${text.slice(0, max)}…` : text);

/**
 * Checks a value against TRAFFIC_POLICY_SCHEMA and returns it normalised (header lower-case,
 * shadow percent defaulted, weights in version order).
 * @throws MARINA_ERR_TRAFFIC_POLICY_INVALID naming every field that is wrong.
 */
export function parseTrafficPolicy(value: unknown, where = 'the traffic policy'): TrafficPolicy {
  if (!validate(value)) {
    const problems = (validate.errors ?? []).slice(0, 5).map((e) => {
      const path = e.instancePath === '' ? '' : `${e.instancePath.slice(1).replaceAll('/', '.')} `;
      const extra =
        e.keyword === 'additionalProperties'
          ? ` ('${bounded(String((e.params as { additionalProperty: string }).additionalProperty), 64)}')`
          : e.keyword === 'propertyNames'
            ? ` ('${bounded(String((e.params as { propertyName: string }).propertyName), 64)}' is not a version name)`
            : '';
      return `${path}${e.message ?? 'is invalid'}${extra}`;
    });
    throw trafficErrors.create.MARINA_ERR_TRAFFIC_POLICY_INVALID(
      `${where} is invalid: ${problems.join('; ')}. Expected {"weights": {"1.0": 90, "2.0": 10}, "shadow": {"version": "3.0", "percent": 100}, "stickyHeader": "x-marina-route-key"}`,
    );
  }
  const policy = value as TrafficPolicy;
  const out: TrafficPolicy = {};
  if (policy.weights) {
    const sum = Object.values(policy.weights).reduce((a, b) => a + b, 0);
    if (sum !== 100)
      throw trafficErrors.create.MARINA_ERR_TRAFFIC_POLICY_INVALID(
        `${where} is invalid: the weights sum to ${sum}, they must sum to 100 (integers, e.g. {"1.0": 95, "2.0": 5})`,
      );
    out.weights = Object.fromEntries(Object.keys(policy.weights).map((v) => [v, policy.weights![v]!]));
  }
  if (policy.shadow) out.shadow = { version: policy.shadow.version, percent: policy.shadow.percent ?? 100 };
  if (policy.stickyHeader !== undefined) out.stickyHeader = policy.stickyHeader.toLowerCase();
  return out;
}

/**
 * What a schema cannot check: every version named is registered, and the shadow is not the only
 * version with weight (it would shadow itself).
 * @throws MARINA_ERR_TRAFFIC_POLICY_INVALID
 */
export function checkTrafficPolicy(modelName: string, policy: TrafficPolicy, versions: readonly string[]): void {
  const known = new Set(versions);
  const available = `model '${modelName}' has versions: ${versions.slice(0, 20).join(', ')}`;
  for (const version of Object.keys(policy.weights ?? {}))
    if (!known.has(version))
      throw trafficErrors.create.MARINA_ERR_TRAFFIC_POLICY_INVALID(
        `weights name version '${version}', which is not registered (${available}); register it first or leave it out`,
      );
  const shadow = policy.shadow?.version;
  if (shadow !== undefined && !known.has(shadow))
    throw trafficErrors.create.MARINA_ERR_TRAFFIC_POLICY_INVALID(
      `shadow.version '${shadow}' is not registered (${available}); register it first`,
    );
  if (shadow !== undefined && policy.weights?.[shadow] === 100)
    throw trafficErrors.create.MARINA_ERR_TRAFFIC_POLICY_INVALID(
      `shadow.version '${shadow}' has weight 100: it would shadow itself; shadow another version or move the weight`,
    );
}

/** 32-bit FNV-1a of the key's UTF-16 units, finished with murmur3's mix so nearby keys spread evenly. */
export function hashRouteKey(key: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < key.length; i++) {
    h ^= key.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}

/**
 * A policy compiled for picking: cumulative weights over the versions in sorted order, so a
 * sticky key's point in [0, 100) lands on the same version for the same weights, whatever order
 * the weights were written in (a snapshot brings back the same mapping). Immutable: a policy
 * change swaps the whole route, so a request in flight keeps the version it was given.
 */
export class TrafficRoute {
  readonly policy: TrafficPolicy;
  /** Versions with weight > 0 and their cumulative upper bounds (0–100]. */
  readonly #versions: string[] = [];
  readonly #bounds: number[] = [];

  constructor(policy: TrafficPolicy) {
    this.policy = policy;
    let total = 0;
    for (const version of Object.keys(policy.weights ?? {}).sort()) {
      const weight = policy.weights![version]!;
      if (weight === 0) continue;
      total += weight;
      this.#versions.push(version);
      this.#bounds.push(total);
    }
  }

  /** Whether the policy splits traffic (else every unversioned request goes to the default version). */
  get hasWeights(): boolean {
    return this.#versions.length > 0;
  }

  /** Whether `version` receives traffic (weight > 0) or is the shadow: then it must not be removed. */
  isInUse(version: string): boolean {
    return (this.policy.weights?.[version] ?? 0) > 0 || this.policy.shadow?.version === version;
  }

  /**
   * The version for a request that names none, or undefined when the policy has no weights.
   * With the sticky header present the point comes from its value's hash, else from `random`.
   */
  pick(headers: Record<string, string> | undefined, random: () => number = Math.random): string | undefined {
    if (this.#versions.length === 0) return undefined;
    if (this.#versions.length === 1) return this.#versions[0];
    const sticky = this.policy.stickyHeader === undefined ? undefined : headers?.[this.policy.stickyHeader];
    // 10 000 buckets: the key's share is exact to 0.01 %, well below any weight's 1 % step.
    const point = sticky === undefined ? random() * 100 : (hashRouteKey(sticky) % 10_000) / 100;
    for (let i = 0; i < this.#bounds.length; i++) if (point < this.#bounds[i]!) return this.#versions[i];
    return this.#versions[this.#versions.length - 1];
  }

  /** Whether this request's copy goes to the shadow (`percent` % of live requests). */
  isShadowed(random: () => number = Math.random): boolean {
    const percent = this.policy.shadow?.percent ?? 0;
    return percent >= 100 || (percent > 0 && random() * 100 < percent);
  }

  /** The same policy without `version` among the weights (it had weight 0), for unregister. */
  without(version: string): TrafficRoute {
    if (this.policy.weights?.[version] === undefined) return this;
    const weights = { ...this.policy.weights };
    delete weights[version];
    return new TrafficRoute({ ...this.policy, weights });
  }
}
