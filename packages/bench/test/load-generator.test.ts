import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Pool } from 'undici';
import { runLoad } from '../src/load-generator.ts';
import { isMarinaError } from '@marina/errors';
import { startProcessSampler } from '../src/process-sampler.ts';

describe('closed-loop load generator', () => {
  let server: Server;
  let origin: string;
  let inFlight = 0;
  let maxInFlight = 0;
  let bodiesSeen = 0;

  beforeAll(async () => {
    server = createServer((request, response) => {
      inFlight += 1;
      maxInFlight = Math.max(maxInFlight, inFlight);
      let bytes = 0;
      request.on('data', (chunk: Buffer) => {
        bytes += chunk.length;
      });
      request.on('end', () => {
        if (bytes === 5) bodiesSeen += 1;
        setTimeout(() => {
          inFlight -= 1;
          response.statusCode = request.url === '/fail' ? 503 : 200;
          response.end('{}');
        }, 2);
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });

  afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

  it('sends exactly the measured requests after the warm-up, never more than `concurrency` at once', async () => {
    bodiesSeen = 0;
    maxInFlight = 0;
    const result = await runLoad({
      origin,
      path: '/ok',
      body: Buffer.from('hello'),
      concurrency: 4,
      requests: 40,
      warmupRequests: 8,
    });
    expect(result.latenciesMs).toHaveLength(40);
    expect(result.errors).toBe(0);
    expect(bodiesSeen).toBe(48);
    expect(maxInFlight).toBeLessThanOrEqual(4);
    expect(maxInFlight).toBeGreaterThan(1);
  });

  it('sends through a given pool and leaves it open, so blocks measured one after another share one connection', async () => {
    let connections = 0;
    const onConnection = () => {
      connections += 1;
    };
    server.on('connection', onConnection);
    const pool = new Pool(origin, { connections: 1, pipelining: 1, keepAliveTimeout: 60_000 });
    try {
      for (let block = 0; block < 3; block++) {
        const result = await runLoad({
          origin,
          path: '/ok',
          body: Buffer.from('hello'),
          concurrency: 1,
          requests: 5,
          collectHeader: 'content-length',
          pool,
        });
        expect(result.latenciesMs).toHaveLength(5);
        expect(result.headerValues).toEqual(['2', '2', '2', '2', '2']);
      }
      expect(pool.closed).toBe(false);
      expect(connections).toBe(1);
    } finally {
      server.off('connection', onConnection);
      await pool.close();
    }
  });

  it('throws a typed error naming the status when every request fails', async () => {
    const error = await runLoad({
      origin,
      path: '/fail',
      body: Buffer.from('hello'),
      concurrency: 2,
      requests: 4,
    }).catch((e: unknown) => e);
    expect(isMarinaError(error) && error.code).toBe('MARINA_ERR_BENCH_REQUESTS_FAILED');
    expect((error as Error).message).toContain('HTTP 503');
  });
});

describe('process sampler', () => {
  it('reads this process memory from /proc and reports PSS when asked', () => {
    const sampler = startProcessSampler({ getPids: () => [process.pid], isPssSampled: true });
    const usage = sampler.stop();
    expect(usage.peakRssBytes).toBeGreaterThan(10 * 1024 * 1024);
    expect(usage.lastPssBytes).toBeGreaterThan(0);
    expect(usage.samples).toBeGreaterThanOrEqual(2);
  });

  it('skips processes that have exited instead of failing', () => {
    const sampler = startProcessSampler({ getPids: () => [2 ** 22 + 12345] });
    expect(sampler.stop().peakRssBytes).toBe(0);
  });
});
