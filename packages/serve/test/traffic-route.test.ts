/**
 * The pure parts of versions in production: the policy's strict check, the compiled route's picks
 * (weights, weight 0, sticky keys, shadow share) and the answer comparisons (top-1, IoU, cosine).
 */
import { joinBinaryBody } from '@marina/handlers';
import { describe, expect, it } from 'vitest';
import { compareAnswers, cosineAgreement, maskIou } from '../src/registry/output-agreement.ts';
import {
  checkTrafficPolicy,
  hashRouteKey,
  parseTrafficPolicy,
  TrafficRoute,
  type TrafficPolicy,
} from '../src/registry/traffic-policy.ts';
import { TextJobResult, type JobResult } from '../src/scheduling/job.ts';
import { configFromProperties } from '../src/config/load-config.ts';
import { isMarinaError, type MarinaError } from '@marina/errors';

/** The MarinaError `run` throws; fails the test when it returns or throws anything else. */
function marinaErrorOf(run: () => unknown): MarinaError {
  try {
    run();
  } catch (error) {
    if (isMarinaError(error)) return error;
    throw error;
  }
  throw new Error('expected a MarinaError, but nothing was thrown');
}

describe('parseTrafficPolicy', () => {
  it('normalises a good policy: the header lower-case, the shadow at 100 % unless given', () => {
    expect(
      parseTrafficPolicy({ weights: { '2.0': 10, '1.0': 90 }, shadow: { version: '3.0' }, stickyHeader: 'X-Key' }),
    ).toEqual({ weights: { '2.0': 10, '1.0': 90 }, shadow: { version: '3.0', percent: 100 }, stickyHeader: 'x-key' });
    expect(parseTrafficPolicy({})).toEqual({});
  });

  it.each([
    [{ weights: { '1.0': 90, '2.0': 20 } }, 'sum to 110'],
    [{ weights: { '1.0': 99.5, '2.0': 0.5 } }, 'must be integer'],
    [{ weights: { '1.0': '100' } }, 'must be integer'],
    [{ weights: { '1.0': 101 } }, 'must be <= 100'],
    [{ weights: {} }, 'must NOT have fewer than 1 properties'],
    [{ weights: { '../x': 100 } }, "'../x' is not a version name"],
    [{ weight: { '1.0': 100 } }, "('weight')"],
    [{ shadow: { version: '2.0', percent: 0.5 } }, 'shadow.percent must be integer'],
    [{ shadow: {} }, "must have required property 'version'"],
    [{ stickyHeader: 'two words' }, 'stickyHeader must match pattern'],
    [[], 'must be object'],
    [null, 'must be object'],
  ])('refuses %j with MARINA_ERR_TRAFFIC_POLICY_INVALID naming the problem', (value, words) => {
    const error = marinaErrorOf(() => parseTrafficPolicy(value));
    expect(error.code).toBe('MARINA_ERR_TRAFFIC_POLICY_INVALID');
    expect(error.statusCode).toBe(400);
    expect(error.message).toContain(words);
  });

  it('checks the versions against the model: registered, and a shadow that is not the whole traffic', () => {
    const versions = ['1.0', '2.0'];
    expect(() => checkTrafficPolicy('m', { weights: { '1.0': 50, '2.0': 50 } }, versions)).not.toThrow();
    expect(marinaErrorOf(() => checkTrafficPolicy('m', { weights: { '3.0': 100 } }, versions)).message).toContain(
      "version '3.0', which is not registered (model 'm' has versions: 1.0, 2.0)",
    );
    expect(marinaErrorOf(() => checkTrafficPolicy('m', { shadow: { version: '4', percent: 1 } }, versions)).code).toBe(
      'MARINA_ERR_TRAFFIC_POLICY_INVALID',
    );
    expect(
      marinaErrorOf(() =>
        checkTrafficPolicy('m', { weights: { '1.0': 100 }, shadow: { version: '1.0', percent: 100 } }, versions),
      ).message,
    ).toContain('shadow itself');
  });
});

describe('TrafficRoute', () => {
  /** Picks at evenly spaced points of [0, 1): exactly the share each weight asks for. */
  function shares(policy: TrafficPolicy, points = 1000): Map<string | undefined, number> {
    const route = new TrafficRoute(policy);
    const counts = new Map<string | undefined, number>();
    for (let i = 0; i < points; i++) {
      const v = route.pick(undefined, () => (i + 0.5) / points);
      counts.set(v, (counts.get(v) ?? 0) + 1);
    }
    return counts;
  }

  it('splits by weight and never picks a version of weight 0', () => {
    expect(shares({ weights: { '1.0': 95, '2.0': 5, '3.0': 0 } })).toEqual(
      new Map([
        ['1.0', 950],
        ['2.0', 50],
      ]),
    );
    expect(shares({ weights: { b: 1, a: 99 } })).toEqual(
      new Map([
        ['a', 990],
        ['b', 10],
      ]),
    );
  });

  it('picks nothing without weights (the registry then uses the default version)', () => {
    expect(new TrafficRoute({ shadow: { version: '2', percent: 100 } }).pick(undefined)).toBeUndefined();
  });

  it('maps a sticky key to one version whatever the order the weights were written in', () => {
    const a = new TrafficRoute({ weights: { '1.0': 50, '2.0': 50 }, stickyHeader: 'k' });
    const b = new TrafficRoute({ weights: { '2.0': 50, '1.0': 50 }, stickyHeader: 'k' });
    const never = () => {
      throw new Error('a sticky pick must not draw a random number');
    };
    const picked = new Set<string | undefined>();
    for (let key = 0; key < 200; key++) {
      const headers = { k: `user-${key}` };
      const v = a.pick(headers, never);
      expect(b.pick(headers, never)).toBe(v);
      picked.add(v);
    }
    expect(picked).toEqual(new Set(['1.0', '2.0']));
  });

  it('moves only the keys in the shifted share when the weights change', () => {
    const before = new TrafficRoute({ weights: { a: 90, b: 10 }, stickyHeader: 'k' });
    const after = new TrafficRoute({ weights: { a: 80, b: 20 }, stickyHeader: 'k' });
    for (let key = 0; key < 500; key++) {
      const headers = { k: String(key) };
      // a's share shrank from the top: a key on b stays on b.
      if (before.pick(headers) === 'b') expect(after.pick(headers)).toBe('b');
    }
  });

  it('hashes keys evenly enough for a 1 % weight', () => {
    const buckets = new Array(100).fill(0) as number[];
    for (let i = 0; i < 20_000; i++) buckets[Math.floor((hashRouteKey(`key-${i}`) % 10_000) / 100)]!++;
    // Binomial(20 000, 0.01): mean 200, sd 14.1; ±6 sd holds with overwhelming probability.
    for (const count of buckets) expect(Math.abs(count - 200)).toBeLessThan(85);
  });

  it('copies the shadow share of requests, and says which versions are in use', () => {
    const route = new TrafficRoute({ weights: { a: 100, b: 0 }, shadow: { version: 'c', percent: 25 } });
    let copied = 0;
    for (let i = 0; i < 100; i++) if (route.isShadowed(() => (i + 0.5) / 100)) copied++;
    expect(copied).toBe(25);
    expect([route.isInUse('a'), route.isInUse('b'), route.isInUse('c')]).toEqual([true, false, true]);
    expect(route.without('b').policy.weights).toEqual({ a: 100 });
  });
});

describe('compareAnswers', () => {
  const json = (value: unknown): JobResult => new TextJobResult(200, JSON.stringify(value), 'application/json', {});
  const binary = (values: number[]): JobResult => {
    const raw = Buffer.from(new Float32Array(values).buffer);
    const { body, headerLength } = joinBinaryBody(
      {
        outputs: [
          { name: 'y', datatype: 'FP32', shape: [values.length], parameters: { binary_data_size: raw.length } },
        ],
      },
      [raw],
    );
    return {
      statusCode: 200,
      body,
      contentType: 'application/octet-stream',
      headers: { 'inference-header-content-length': String(headerLength) },
    };
  };

  it('top-1 for classifiers', () => {
    expect(compareAnswers('top1', json({ cat: 0.6, dog: 0.4 }), json({ dog: 0.3, cat: 0.7 }))).toEqual({
      agreement: 1,
    });
    expect(compareAnswers('top1', json({ cat: 0.6, dog: 0.4 }), json({ dog: 0.9, cat: 0.1 }))).toEqual({
      agreement: 0,
    });
  });

  it('IoU for masks', () => {
    expect(maskIou([0, 0, 1, 1], [0, 1, 1, 1])).toBeCloseTo((1 / 2 + 2 / 3) / 2, 12);
    expect(compareAnswers('iou', json([[0, 1]]), json([[0, 1]]))).toEqual({ agreement: 1 });
    expect(compareAnswers('iou', json([[[0, 0.9]], [[1, 0.8]]]), json([[[0, 0.7]], [[0, 0.6]]]))!.agreement).toBe(
      (1 / 2 + 0) / 2,
    );
  });

  it('cosine and max |difference| for tensors, in the binary layout and in JSON', () => {
    const a = [1, 2, 3];
    const b = [1, 2, 4];
    const expected = cosineAgreement(a, b);
    expect(expected).toBeCloseTo(17 / Math.sqrt(14 * 21), 12);
    expect(compareAnswers('cosine', binary(a), binary(b))).toEqual({ agreement: expected, maxAbsDiff: 1 });
    expect(
      compareAnswers(
        'cosine',
        json({ outputs: { y: { shape: [3], data: a } } }),
        json({ outputs: [{ name: 'y', data: b }] }),
      ),
    ).toEqual({ agreement: expected, maxAbsDiff: 1 });
    expect(cosineAgreement([1, 0], [-1, 0])).toBe(0);
  });

  it('does not compare what it cannot read, or answers of different shapes', () => {
    expect(compareAnswers('cosine', binary([1, 2]), binary([1, 2, 3]))).toBeUndefined();
    expect(compareAnswers('cosine', json('text'), json('text'))).toBeUndefined();
    expect(
      compareAnswers('top1', json({ cat: 1 }), new TextJobResult(500, '{}', 'application/json', {})),
    ).toBeUndefined();
  });
});

describe("the models JSON's $traffic", () => {
  const load = (models: unknown) =>
    configFromProperties({ model_store: '/tmp', models: JSON.stringify(models) }, { cwd: '/tmp' });

  it('becomes the model’s policy, and is not read as a version', () => {
    const config = load({
      m: { '1.0': { minWorkers: 1 }, $traffic: { weights: { '1.0': 100 }, stickyHeader: 'X-Route' } },
    });
    expect(config.trafficPolicies).toEqual({ m: { weights: { '1.0': 100 }, stickyHeader: 'x-route' } });
    expect(Object.keys(config.models.m!)).toEqual(['1.0']);
  });

  it('stops the start with MARINA_ERR_CONFIG_MODELS_INVALID when it is wrong', () => {
    const error = marinaErrorOf(() => load({ m: { '1.0': {}, $traffic: { weights: { '1.0': 50 } } } }));
    expect(error.code).toBe('MARINA_ERR_CONFIG_MODELS_INVALID');
    expect(error.message).toContain('models: m > $traffic is invalid: the weights sum to 50');
  });
});
