/**
 * The largest of the last `size` values given. A version's serving size (ModelVersion.servingBytes)
 * is a difference of the process's memory taken while other models may serve, and their batches
 * move the process meanwhile: an unload's measure reads low when they grow it, a load's when they
 * shrink it. A budget that reserves a low reading lets the process pass it, so a load reserves the
 * largest recent measure; one high reading is forgotten after `size` more measures.
 */
export class RecentMax {
  readonly #size: number;
  readonly #values: number[] = [];

  constructor(size: number) {
    this.#size = size;
  }

  add(value: number): void {
    this.#values.push(value);
    if (this.#values.length > this.#size) this.#values.shift();
  }

  /** The largest value kept; 0 before any was added. */
  get value(): number {
    let max = 0;
    for (const v of this.#values) if (v > max) max = v;
    return max;
  }
}
