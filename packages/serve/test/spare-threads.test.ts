/**
 * The spare threads (workers/spare-threads.ts) with a real worker thread: a thread that leaves a
 * model for the next, again and again, as under model_memory_budget churn.
 */
import { once } from 'node:events';
import { Worker as NodeWorker } from 'node:worker_threads';
import { describe, expect, it } from 'vitest';
import { SpareThreads } from '../src/workers/spare-threads.ts';
import { bootstrapUrl } from '../src/workers/worker.ts';

describe('spare threads', () => {
  it('keeps no listener of its own on a thread once it is taken, however often the thread comes back', async () => {
    // Under Zipf traffic a thread recycled from model to model kept one more 'exit' listener (and
    // the spare it closed over) each time it was offered: Node warned of a leak at the eleventh.
    const thread = new NodeWorker('setInterval(() => {}, 1 << 30);', { eval: true });
    await once(thread, 'online');
    const spares = new SpareThreads({ bootstrapUrl, maxHeapMb: 64, hasRoomForLoad: () => false });
    const counts = () => ({ exit: thread.listenerCount('exit'), error: thread.listenerCount('error') });
    const before = counts();
    try {
      for (let i = 0; i < 20; i++) {
        expect(spares.offer(thread, 64)).toBe(true);
        expect(await spares.take(64)).toBe(thread);
      }
      expect(counts()).toEqual(before);
    } finally {
      await spares.close();
      await thread.terminate();
    }
  });
});
