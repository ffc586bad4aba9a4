import { describe, expect, it } from 'vitest';
import { DecayingCounter } from '../src/scheduling/decaying-counter.ts';

describe('DecayingCounter', () => {
  it('counts events and halves the count every half-life', () => {
    const counter = new DecayingCounter(1000);
    expect(counter.valueAt(0)).toBe(0);
    counter.add(0);
    counter.add(0);
    expect(counter.valueAt(0)).toBe(2);
    expect(counter.valueAt(1000)).toBeCloseTo(1, 10);
    expect(counter.valueAt(3000)).toBeCloseTo(0.25, 10);
    // An event adds 1 to what is left of the earlier ones.
    counter.add(1000);
    expect(counter.valueAt(1000)).toBeCloseTo(2, 10);
    expect(counter.valueAt(2000)).toBeCloseTo(1, 10);
  });

  it('ranks a model asked for often above one asked for last', () => {
    const often = new DecayingCounter(10_000);
    const last = new DecayingCounter(10_000);
    for (let t = 0; t < 5000; t += 100) often.add(t);
    last.add(5000);
    expect(often.valueAt(5000)).toBeGreaterThan(last.valueAt(5000));
    // A clock that reads earlier than the last event never counts more than was added.
    expect(last.valueAt(4000)).toBe(1);
  });
});
