/**
 * A small, fast, seeded pseudo-random generator (sfc32, seeded through splitmix32).
 * Same seed, same sequence on every platform, which is what makes written models
 * byte-identical across runs. Not for cryptography.
 */
export interface Prng {
  /** Uniform float in [0, 1). */
  next(): number;
  /** Fills `out` with uniform floats in [-bound, bound). */
  fillUniform(out: Float32Array, bound: number): void;
}

function splitmix32(state: number): () => number {
  let s = state >>> 0;
  return () => {
    s = (s + 0x9e3779b9) >>> 0;
    let z = s;
    z = Math.imul(z ^ (z >>> 16), 0x85ebca6b) >>> 0;
    z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35) >>> 0;
    return (z ^ (z >>> 16)) >>> 0;
  };
}

/** Creates a generator from a 32-bit integer seed (other numbers are truncated to 32 bits). */
export function createPrng(seed: number): Prng {
  const init = splitmix32(seed);
  let a = init();
  let b = init();
  let c = init();
  let d = init();
  const nextUint32 = (): number => {
    const t = (((a + b) >>> 0) + d) >>> 0;
    d = (d + 1) >>> 0;
    a = b ^ (b >>> 9);
    b = (c + (c << 3)) >>> 0;
    c = ((c << 21) | (c >>> 11)) >>> 0;
    c = (c + t) >>> 0;
    return t;
  };
  // Discard the first outputs: sfc32 mixes weakly during its first few steps.
  for (let i = 0; i < 12; i += 1) nextUint32();
  return {
    next: () => nextUint32() / 4294967296,
    fillUniform(out, bound) {
      const scale = (2 * bound) / 4294967296;
      for (let i = 0; i < out.length; i += 1) out[i] = nextUint32() * scale - bound;
    },
  };
}
