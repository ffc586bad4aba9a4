import { describe, expect, it } from 'vitest';
import { RecentMax } from '../src/scheduling/recent-max.ts';

describe('RecentMax', () => {
  it('is 0 before any value, then the largest of the last values given', () => {
    const sizes = new RecentMax(3);
    expect(sizes.value).toBe(0);
    sizes.add(190);
    // A measure taken while another model's batch grew the process reads low: the reservation stays.
    sizes.add(60);
    expect(sizes.value).toBe(190);
    sizes.add(170);
    expect(sizes.value).toBe(190);
    // Three later measures push the high one out.
    sizes.add(165);
    expect(sizes.value).toBe(170);
    sizes.add(150);
    sizes.add(155);
    expect(sizes.value).toBe(165);
  });
});
