/**
 * A count of events that forgets: each event adds 1, and the total halves every `halfLifeMs`.
 * A version's recent demand (ModelVersion.demand), so that a model asked for ten times a second
 * outweighs one asked for once a minute, whatever arrived last.
 */
export class DecayingCounter {
  readonly #halfLifeMs: number;
  #value = 0;
  #at = 0;

  constructor(halfLifeMs: number) {
    this.#halfLifeMs = halfLifeMs;
  }

  /** Counts one event at `now` (ms, any monotonic clock the caller keeps to). */
  add(now: number): void {
    this.#value = this.valueAt(now) + 1;
    this.#at = now;
  }

  /** The decayed count at `now`: events of one half-life ago count one half, two half-lives ago one quarter. */
  valueAt(now: number): number {
    if (this.#value === 0) return 0;
    return this.#value * 2 ** (-Math.max(0, now - this.#at) / this.#halfLifeMs);
  }
}
