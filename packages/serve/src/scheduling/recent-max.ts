/**
 * The largest of the last `size` values given. A version's serving size (ModelVersion.servingBytes)
 * is a measure of the process's memory taken while other models may serve: their batches can grow
 * the process during it (the measure reads low) or shrink it (reads high). A budget that reserves
 * a low reading lets the process pass it, so a load reserves the largest recent measure; one high
 * reading is forgotten after `size` more measures.
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
