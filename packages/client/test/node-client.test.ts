import { readFile } from 'node:fs/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createMarinaClient, MarinaClientError, type RetryEvent } from '../src/index.ts';
import { startRealServer, type RealServer } from './real-server.ts';

// Against a real `serve --foreground` on 127.0.0.1 with token authorization on.
describe('@marina/client against a real server', { timeout: 120_000 }, () => {
  let server: RealServer;

  beforeAll(async () => {
    server = await startRealServer();
  }, 120_000);

  afterAll(async () => {
    await server?.stop();
  });

  /**
   * Holds sleepy's only worker until `sleepMs` has passed; resolves once the worker is busy with it.
   * The blocking request's answer comes back wrapped: an async function that returned the promise
   * itself would adopt it, and the caller would wait for the worker to be free again.
   */
  async function blockWorker(sleepMs: number): Promise<{ answer: Promise<unknown> }> {
    const client = createMarinaClient({ url: server.url, keyFile: server.keyFile });
    const answer = client.predict('sleepy', { sleepMs, value: 'blocker' });
    await server.waitUntilBusy('sleepy');
    return { answer };
  }

  it('reads the token from the key file and predicts JSON and image bodies', async () => {
    const client = createMarinaClient({ url: server.url, keyFile: server.keyFile });
    expect(await client.ping()).toBe(true);
    expect(await client.predict('sleepy', { value: 42 })).toEqual({ echo: 42 });
    const top = await client.predict('tiny', await readFile(server.imagePath));
    expect(top).toBeTypeOf('object');
    expect(Object.keys(top as object)).toHaveLength(5);
  });

  it('takes the token from MARINA_TOKEN, and a wrong one is a 401 that is not retried', async () => {
    const key = (JSON.parse(await readFile(server.keyFile, 'utf8')) as { inference: { key: string } }).inference.key;
    const previous = process.env.MARINA_TOKEN;
    try {
      process.env.MARINA_TOKEN = key;
      expect(await createMarinaClient({ url: server.url }).predict('sleepy', { value: 1 })).toEqual({ echo: 1 });
      process.env.MARINA_TOKEN = 'not-the-key';
      const error = await createMarinaClient({ url: server.url })
        .predict('sleepy', { value: 1 })
        .catch((e: unknown) => e);
      expect(error).toBeInstanceOf(MarinaClientError);
      expect(error).toMatchObject({
        statusCode: 401,
        code: 'MARINA_ERR_TOKEN_INVALID',
        type: 'InvalidKeyException',
        attempts: 1,
      });
    } finally {
      if (previous === undefined) delete process.env.MARINA_TOKEN;
      else process.env.MARINA_TOKEN = previous;
    }
  });

  it("gives the server's code for an unknown model, without retrying", async () => {
    const retries: RetryEvent[] = [];
    const client = createMarinaClient({
      url: server.url,
      keyFile: server.keyFile,
      onRetry: (event) => retries.push(event),
    });
    const error = await client.predict('no-such-model', { value: 1 }).catch((e: unknown) => e);
    expect(error).toMatchObject({
      name: 'MarinaClientError',
      statusCode: 404,
      code: 'MARINA_ERR_MODEL_NOT_FOUND',
      attempts: 1,
    });
    expect(retries).toEqual([]);
  });

  it('reports a full queue as MARINA_ERR_QUEUE_FULL with Retry-After when retries are off', async () => {
    const blocker = await blockWorker(3_000);
    const client = createMarinaClient({ url: server.url, keyFile: server.keyFile, maxRetries: 0 });
    const inputs = Array.from({ length: 12 }, (_, i) => ({ value: i }));
    const outcomes = await client.predictMany('sleepy', inputs, { concurrency: inputs.length, settle: true });
    const rejected = outcomes.filter((o) => !o.ok);
    const served = outcomes.filter((o) => o.ok);
    // The worker is held, so only what the queue (and the worker's pipeline) can take is admitted.
    expect(rejected.length).toBeGreaterThan(0);
    expect(served.length).toBeGreaterThanOrEqual(server.jobQueueSize);
    for (const outcome of rejected) {
      if (outcome.ok) continue;
      expect(outcome.error).toMatchObject({
        statusCode: 503,
        code: 'MARINA_ERR_QUEUE_FULL',
        type: 'ServiceUnavailableException',
        retryAfterS: 1,
        attempts: 1,
      });
    }
    outcomes.forEach((o, i) => {
      if (o.ok) expect(o.value).toEqual({ echo: i });
    });
    expect(await blocker.answer).toEqual({ echo: 'blocker' });
  });

  it('predictMany retries the 503s of a full queue after Retry-After and returns every answer in order', async () => {
    const blocker = await blockWorker(2_000);
    const retries: RetryEvent[] = [];
    const client = createMarinaClient({
      url: server.url,
      keyFile: server.keyFile,
      maxRetries: 20,
      onRetry: (event) => retries.push(event),
    });
    const inputs = Array.from({ length: 12 }, (_, i) => ({ value: i }));
    const finished: number[] = [];
    const results = await client.predictMany('sleepy', inputs, {
      concurrency: inputs.length,
      onResult: (index) => finished.push(index),
    });
    expect(results).toEqual(inputs.map((_, i) => ({ echo: i })));
    expect(finished.sort((a, b) => a - b)).toEqual(inputs.map((_, i) => i));
    expect(retries.length).toBeGreaterThan(0);
    for (const event of retries) {
      expect(event.error.code).toBe('MARINA_ERR_QUEUE_FULL');
      expect(event.attempt).toBeGreaterThanOrEqual(2);
    }
    await blocker.answer;
  });

  it('keeps at most `concurrency` requests in flight', async () => {
    const client = createMarinaClient({ url: server.url, keyFile: server.keyFile });
    let inFlight = 0;
    let mostInFlight = 0;
    async function* inputs() {
      for (let i = 0; i < 10; i++) {
        inFlight += 1;
        mostInFlight = Math.max(mostInFlight, inFlight);
        yield { value: i };
      }
    }
    const results = await client.predictMany('sleepy', inputs(), { concurrency: 3, onResult: () => (inFlight -= 1) });
    expect(results).toHaveLength(10);
    expect(mostInFlight).toBeLessThanOrEqual(3);
    expect(mostInFlight).toBeGreaterThan(0);
  });

  it('stops starting requests after the first failure unless settle is set', async () => {
    const client = createMarinaClient({ url: server.url, keyFile: server.keyFile });
    // The tiny image classifier answers 400 to bytes that are not an image.
    const inputs = [Buffer.from('not an image'), ...Array.from({ length: 20 }, () => Buffer.from('still not'))];
    let started = 0;
    function* counted() {
      for (const input of inputs) {
        started += 1;
        yield input;
      }
    }
    const error = await client.predictMany('tiny', counted(), { concurrency: 1 }).catch((e: unknown) => e);
    expect(error).toMatchObject({ statusCode: 400, code: 'MARINA_ERR_IMAGE_DECODE_FAILED' });
    expect(started).toBe(1);
  });

  it('times out a request the server has not answered, with MARINA_ERR_CLIENT_RESPONSE_TIMEOUT', async () => {
    const client = createMarinaClient({ url: server.url, keyFile: server.keyFile, timeoutMs: 200 });
    // The handler blocks for 5 s, so no answer can come within the 200 ms.
    const error = await client.predict('sleepy', { sleepMs: 5_000, value: 'slow' }).catch((e: unknown) => e);
    expect(error).toMatchObject({ code: 'MARINA_ERR_CLIENT_RESPONSE_TIMEOUT', statusCode: 0 });
  });

  it('reports a refused connection and bad options with their codes', async () => {
    const closed = createMarinaClient({ url: 'http://127.0.0.1:9', maxRetries: 3 });
    await expect(closed.predict('sleepy', { value: 1 })).rejects.toMatchObject({
      code: 'MARINA_ERR_CLIENT_CONNECTION_FAILED',
      attempts: 1,
    });
    expect(() => createMarinaClient({ url: 'ftp://x' })).toThrow(
      expect.objectContaining({ code: 'MARINA_ERR_CLIENT_OPTION_INVALID' }),
    );
    expect(() => createMarinaClient({ url: server.url, keyFile: '/nonexistent/key_file.json' })).toThrow(
      expect.objectContaining({ code: 'MARINA_ERR_CLIENT_KEY_FILE_INVALID' }),
    );
    await expect(
      createMarinaClient({ url: server.url }).predictMany('sleepy', [], { concurrency: 0 }),
    ).rejects.toMatchObject({ code: 'MARINA_ERR_CLIENT_OPTION_INVALID' });
  });
});
