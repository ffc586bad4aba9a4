// glibc's MALLOC_MMAP_THRESHOLD_ for the serving process, set by bin/serve.js's re-exec and by the
// background launcher (src/launcher.ts) unless the environment already has it. Plain JavaScript so
// that bin/serve.js can read it before any TypeScript runs.
// 1 MiB, not 128 KiB: the same PSS with the shared optimised copy (about 25 MB more per worker without it),
// and a model's run slowed far less by a busy neighbour process (packages/bench/docs/measurements.md, 2026-11-27).
export const MALLOC_MMAP_THRESHOLD_BYTES = '1048576';
