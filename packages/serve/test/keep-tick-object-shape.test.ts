/**
 * keepTickObjectShape keeps one of Node's own nextTick entries: what it holds must be a TickObject
 * (the object nextTick queued, with its callback and async ids), or the maps every later entry is
 * built with are not kept alive. Waits: a nextTick queued after the keeper's runs after it.
 */
import { describe, expect, it } from 'vitest';
import { keepTickObjectShape, keptTickObject } from '../src/keep-tick-object-shape.ts';

const nextTick = () => new Promise<void>((resolve) => process.nextTick(resolve));

describe('keepTickObjectShape', () => {
  it('keeps the TickObject of its own nextTick callback, once, whatever the number of calls', async () => {
    keepTickObjectShape();
    await nextTick();
    const kept = keptTickObject();
    expect(kept).toBeDefined();
    // A TickObject: { [async_id_symbol], [trigger_async_id_symbol], callback, args } (Node's task_queues).
    expect(Object.keys(kept!).sort()).toEqual(['args', 'callback']);
    expect(typeof (kept as { callback: unknown }).callback).toBe('function');
    expect(
      Object.getOwnPropertySymbols(kept!)
        .map((s) => s.description)
        .sort(),
    ).toEqual(['async_id_symbol', 'trigger_async_id_symbol']);
    keepTickObjectShape();
    await nextTick();
    expect(keptTickObject()).toBe(kept);
  });
});
