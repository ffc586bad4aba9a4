import { executionAsyncResource } from 'node:async_hooks';

/** The one nextTick entry kept; see keepTickObjectShape. */
let kept: object | undefined;

/**
 * Keeps one of Node's nextTick entries (a TickObject) alive for the life of the process, so that
 * V8 keeps the hidden classes (maps) that every nextTick entry is built with.
 *
 * Why: Node's `process.nextTick` builds each entry as an object literal with computed symbol keys,
 * and V8 (Node 20) defines those properties through a per-site cache that holds the maps weakly.
 * When no entry is alive at a full garbage collection (as between requests during start-up), the
 * maps are collected and the next nextTick builds new ones; in some processes, depending on when
 * that collection fell, the cache then went megamorphic for good, and every nextTick (several per
 * HTTP request: socket writes, reads, stream ends) defined its properties through V8's runtime.
 * Measured (session 10 of issue 34, `perf`, packages/bench/docs/measurements.md): about 1 µs of the
 * HTTP thread per request in 5 of 8 server processes; with one entry kept, in none of 14.
 * Keeping it costs one small object (its callback is the one below). Idempotent.
 */
export function keepTickObjectShape(): void {
  if (kept !== undefined) return;
  process.nextTick(() => {
    // Inside a nextTick callback, the execution's async resource is that callback's TickObject.
    kept ??= executionAsyncResource();
  });
}

/** The nextTick entry keepTickObjectShape keeps, once its callback has run (for tests). */
export function keptTickObject(): object | undefined {
  return kept;
}
