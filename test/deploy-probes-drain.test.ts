/**
 * What Kubernetes (and the Dockerfile's `serve --foreground` as PID 1) relies on, on the real
 * process with token authorization on (the default):
 * - the probes' paths, GET /ping and the Open Inference Protocol's /v2/health/live and
 *   /v2/health/ready on the inference port, need no key, and /metrics needs none either (the
 *   ServiceMonitor scrapes it); predictions, the rest of v2 and the management API still need theirs;
 * - on SIGTERM the server stops accepting (new connections are refused, so readiness turns false),
 *   lets the requests in flight finish with their answers, and exits 0.
 */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { getOnNewConnection, startForegroundServer, writeGatedModel, type ForegroundServer } from './deploy-helpers.ts';
import { makeTempDir } from './helpers.ts';

const servers: ForegroundServer[] = [];
const dirs: string[] = [];
afterEach(async () => {
  for (const server of servers.splice(0)) {
    if (server.child.exitCode === null && server.child.signalCode === null) {
      server.child.kill('SIGKILL');
      await server.exited;
    }
  }
  const { rmSync } = await import('node:fs');
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

async function start(modelConfigYaml?: string, setUp: (cwd: string) => string[] = () => []): Promise<ForegroundServer> {
  const cwd = makeTempDir('deploy-drain');
  dirs.push(cwd);
  const store = path.join(cwd, 'store');
  mkdirSync(store);
  writeGatedModel(store, modelConfigYaml);
  const server = await startForegroundServer(cwd, { store, extraConfig: setUp(cwd) });
  servers.push(server);
  return server;
}

describe('probes with token authorization on', { timeout: 60_000 }, () => {
  it('leaves /ping, /v2/health/* and /metrics open, and keeps predictions and management behind their keys', async () => {
    const server = await start();
    expect(server.output()).toContain('Token authorization is on');
    const ping = await fetch(`${server.inferenceUrl}/ping`);
    expect(ping.status).toBe(200);
    expect(await ping.json()).toEqual({ status: 'Healthy' });
    expect((await fetch(`${server.metricsUrl}/metrics`)).status).toBe(200);
    const predict = (headers: Record<string, string>) =>
      fetch(`${server.inferenceUrl}/predictions/gated`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...headers },
        body: '{"value":1}',
      });
    expect((await predict({})).status).toBe(401);
    expect((await predict({ authorization: `Bearer ${server.keys.inference}` })).status).toBe(200);
    expect((await fetch(`${server.managementUrl}/models`)).status).toBe(401);
    expect(
      (
        await fetch(`${server.managementUrl}/models`, {
          headers: { authorization: `Bearer ${server.keys.management}` },
        })
      ).status,
    ).toBe(200);
    // A probe that sends a header anyway is not refused.
    expect((await fetch(`${server.inferenceUrl}/ping`, { headers: { authorization: 'Bearer wrong' } })).status).toBe(
      200,
    );
    // The Open Inference Protocol's health routes (KServe's v2 probes) are open too; the rest of v2 is not.
    const live = await fetch(`${server.inferenceUrl}/v2/health/live`);
    expect(live.status).toBe(200);
    expect(await live.json()).toEqual({ live: true });
    const ready = await fetch(`${server.inferenceUrl}/v2/health/ready`);
    expect(ready.status).toBe(200);
    expect(await ready.json()).toEqual({ ready: true });
    expect((await fetch(`${server.inferenceUrl}/v2`)).status).toBe(401);
    expect((await fetch(`${server.inferenceUrl}/v2/models/gated/ready`)).status).toBe(401);
    expect(
      (
        await fetch(`${server.inferenceUrl}/v2/models/gated/ready`, {
          headers: { authorization: `Bearer ${server.keys.inference}` },
        })
      ).status,
    ).toBe(200);
  });
});

describe('token_key_file (keys from a Kubernetes Secret)', { timeout: 60_000 }, () => {
  it('takes the keys from the file, writes no key_file.json, and refuses to rotate them', async () => {
    const keys = {
      management: { key: 'management-key-from-secret' },
      inference: { key: 'inference-key-from-secret' },
      API: { key: 'api-key-from-secret' },
    };
    const server = await start(undefined, (cwd) => {
      mkdirSync(path.join(cwd, 'secret'));
      writeFileSync(path.join(cwd, 'secret', 'key_file.json'), JSON.stringify(keys));
      return ['token_key_file=secret/key_file.json'];
    });
    expect(server.output()).toContain(`keys in ${path.join(server.cwd, 'secret', 'key_file.json')}.`);
    expect(existsSync(path.join(server.cwd, 'key_file.json'))).toBe(false);
    const predict = (key: string) =>
      fetch(`${server.inferenceUrl}/predictions/gated`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: '{"value":1}',
      });
    expect((await predict('inference-key-from-secret')).status).toBe(200);
    expect((await predict('management-key-from-secret')).status).toBe(401);
    const rotate = await fetch(`${server.managementUrl}/token?type=inference`, {
      headers: { authorization: 'Bearer api-key-from-secret' },
    });
    expect(rotate.status).toBe(409);
    expect(await rotate.json()).toMatchObject({ code: 409, marinaCode: 'MARINA_ERR_KEY_FILE_PROVIDED' });
    expect((await predict('inference-key-from-secret')).status).toBe(200);
    server.child.kill('SIGTERM');
    expect((await server.exited).code).toBe(0);
    expect(JSON.parse(readFileSync(path.join(server.cwd, 'secret', 'key_file.json'), 'utf8'))).toEqual(keys);
  });
});

describe('SIGTERM', { timeout: 90_000 }, () => {
  it('stops accepting (readiness false), finishes the requests in flight with their answers, then exits 0', async () => {
    // Two workers, so that both requests run at once and the test can see that both arrived.
    const server = await start('minWorkers: 2\nmaxWorkers: 2\n');
    const gate = path.join(server.cwd, 'gate');
    const auth = { authorization: `Bearer ${server.keys.inference}`, 'content-type': 'application/json' };
    // Two requests in flight, one in each worker.
    const inFlight = [1, 2].map((value) =>
      fetch(`${server.inferenceUrl}/predictions/gated`, {
        method: 'POST',
        headers: auth,
        body: JSON.stringify({ gate, value }),
      }).then(async (r) => ({ status: r.status, body: await r.text() })),
    );
    for (;;) {
      const metrics = await (await fetch(`${server.metricsUrl}/metrics?name[]=marina_busy_workers`)).text();
      if (/^marina_busy_workers\{[^}]*model_name="gated"[^}]*\} 2$/m.test(metrics)) break;
      await new Promise((resolve) => setImmediate(resolve));
    }
    server.child.kill('SIGTERM');
    await server.waitForOutput('SIGTERM received');
    // Readiness turns false: a probe on a new connection fails (500 Unhealthy, fastify's 503, or a
    // reset) while the listener closes, then the connection is refused. Nothing new is accepted from then on.
    const probes = new Set<number | string>();
    for (let probe: number | string = 200; probe !== 'ECONNREFUSED'; ) {
      probe = await getOnNewConnection(`${server.inferenceUrl}/ping`);
      probes.add(probe);
    }
    // (ECONNRESET: a connection the kernel accepted just before the listener closed.)
    expect([...probes].filter((probe) => ![500, 503, 'ECONNRESET', 'ECONNREFUSED'].includes(probe))).toEqual([]);
    expect(await getOnNewConnection(`${server.inferenceUrl}/predictions/gated`)).toBe('ECONNREFUSED');
    // Still draining: the requests in flight have not been answered, the process has not exited.
    expect(server.child.exitCode).toBeNull();
    expect(existsSync(gate)).toBe(false);

    writeFileSync(gate, '');
    const answers = await Promise.all(inFlight);
    for (const [index, answer] of answers.entries()) {
      expect(answer.status, answer.body).toBe(200);
      expect(JSON.parse(answer.body)).toMatchObject({ value: index + 1 });
    }
    expect(await server.exited).toEqual({ code: 0, signal: null });
    expect(server.output()).toContain('Marina has stopped.');
  });
});
