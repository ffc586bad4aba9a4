/**
 * Many instances on one machine, as a stand-in for a cluster: two real `serve --foreground`
 * processes behind nginx (Debian's package, started here on loopback with a config of its own),
 * sharing one token_key_file as replicas share a Kubernetes Secret. Load goes through nginx; one
 * server is killed with SIGKILL while requests are in flight on it:
 * - no request hangs: every client gets an HTTP answer;
 * - only the requests in flight on the killed server fail, with nginx's 502;
 * - everything else, and everything sent after the kill, is answered 200 by the other server
 *   (nginx passes a request on when the dead server refuses the connection).
 * nginx's access log says which server each request went to.
 * .ci/run installs nginx when it is missing (apt-get install -y nginx).
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmSync, watch, writeFileSync } from 'node:fs';
import { once } from 'node:events';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startForegroundServer, writeGatedModel, type ForegroundServer } from './deploy-helpers.ts';
import { freePort, makeTempDir } from './helpers.ts';

const KEYS = {
  management: { key: 'shared-management-key' },
  inference: { key: 'shared-inference-key' },
  API: { key: 'shared-api-key' },
};

function findNginx(): string {
  for (const dir of [...(process.env.PATH ?? '').split(':'), '/usr/sbin', '/usr/local/sbin']) {
    const candidate = path.join(dir, 'nginx');
    if (dir && existsSync(candidate)) return candidate;
  }
  throw new Error('nginx is not installed: apt-get install -y nginx (.ci/run does this in CI)');
}

let root: string;
const servers: ForegroundServer[] = [];
let nginx: ChildProcess | undefined;
let nginxExited: Promise<void> | undefined;
let proxyUrl: string;

beforeAll(async () => {
  const nginxBin = findNginx();
  root = makeTempDir('nginx');
  mkdirSync(path.join(root, 'secret'));
  writeFileSync(path.join(root, 'secret', 'key_file.json'), JSON.stringify(KEYS));
  for (const name of ['a', 'b']) {
    const cwd = path.join(root, name);
    const store = path.join(cwd, 'store');
    mkdirSync(store, { recursive: true });
    writeGatedModel(store);
    // MALLOC_MMAP_THRESHOLD_ set: one process per server (no re-exec), so SIGKILL hits the server itself.
    servers.push(
      await startForegroundServer(cwd, {
        store,
        extraConfig: [`token_key_file=${path.join(root, 'secret', 'key_file.json')}`],
        env: { MALLOC_MMAP_THRESHOLD_: '1048576' },
      }),
    );
  }

  const port = await freePort();
  proxyUrl = `http://127.0.0.1:${port}`;
  const dir = path.join(root, 'nginx');
  mkdirSync(dir);
  writeFileSync(
    path.join(dir, 'nginx.conf'),
    `
worker_processes 1;
pid ${dir}/nginx.pid;
error_log ${dir}/error.log warn;
events { worker_connections 256; }
http {
  log_format marina '$http_x_test_id $status "$upstream_addr" "$upstream_status"';
  access_log ${dir}/access.log marina;
  client_body_temp_path ${dir}/body;
  proxy_temp_path ${dir}/proxy;
  fastcgi_temp_path ${dir}/fastcgi;
  uwsgi_temp_path ${dir}/uwsgi;
  scgi_temp_path ${dir}/scgi;
  upstream marina {
${servers.map((server) => `    server ${new URL(server.inferenceUrl).host};`).join('\n')}
  }
  server {
    listen 127.0.0.1:${port};
    location / {
      proxy_pass http://marina;
      proxy_http_version 1.1;
      proxy_read_timeout 300s;
      # nginx's default: a connection error or timeout passes the request to the next server;
      # a POST that already reached a server is not sent again.
      proxy_next_upstream error timeout;
    }
  }
}
`,
  );
  const check = spawnSync(nginxBin, ['-t', '-p', dir, '-c', path.join(dir, 'nginx.conf')], { encoding: 'utf8' });
  expect(check.status, check.stderr).toBe(0);
  nginx = spawn(nginxBin, ['-p', dir, '-c', path.join(dir, 'nginx.conf'), '-g', 'daemon off;'], {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  nginxExited = new Promise((resolve) => nginx!.on('exit', () => resolve()));
  // Ready once it answers /ping through the proxy.
  for (;;) {
    const answer = await fetch(`${proxyUrl}/ping`).then(
      (r) => r.status,
      () => 0,
    );
    if (answer === 200) break;
    if (nginx.exitCode !== null) throw new Error(`nginx exited: ${readFileSync(path.join(dir, 'error.log'), 'utf8')}`);
    await new Promise((resolve) => setImmediate(resolve));
  }
}, 180_000);

afterAll(async () => {
  if (nginx && nginx.exitCode === null) {
    nginx.kill('SIGQUIT');
    await nginxExited;
  }
  for (const server of servers) {
    if (server.child.exitCode === null && server.child.signalCode === null) {
      server.child.kill('SIGTERM');
      await server.exited;
    }
  }
  if (root) rmSync(root, { recursive: true, force: true });
});

interface Answer {
  id: string;
  status: number;
  sentAfterKill: boolean;
}

let nextId = 0;
async function predict(body: object, sentAfterKill: boolean): Promise<Answer> {
  const id = `r${nextId++}`;
  const response = await fetch(`${proxyUrl}/predictions/gated`, {
    method: 'POST',
    headers: { authorization: `Bearer ${KEYS.inference.key}`, 'content-type': 'application/json', 'x-test-id': id },
    body: JSON.stringify(body),
  });
  await response.arrayBuffer();
  return { id, status: response.status, sentAfterKill };
}

async function busyWorkers(server: ForegroundServer): Promise<number> {
  const text = await (await fetch(`${server.metricsUrl}/metrics?name[]=marina_busy_workers`)).text();
  return Number(/^marina_busy_workers\{[^}]*model_name="gated"[^}]*\} (\d+)/m.exec(text)?.[1] ?? 0);
}

describe('two servers behind nginx, one killed with SIGKILL mid-load', { timeout: 180_000 }, () => {
  it('answers every request; only those in flight on the killed server fail, with 502', async () => {
    const [victim, survivor] = servers as [ForegroundServer, ForegroundServer];
    const gate = path.join(root, 'gate');
    let killed = false;
    let answeredAfterKill = 0;
    let isPaused = false;
    // Steady load from three clients, each sending one request after another.
    const client = async (answers: Answer[]) => {
      while (!isPaused && answeredAfterKill < 30) {
        const sentAfterKill = killed;
        answers.push(await predict({ value: 'load' }, sentAfterKill));
        if (sentAfterKill) answeredAfterKill++;
      }
    };
    const loadAnswers: Answer[][] = [[], [], []];
    let load = loadAnswers.map((answers) => client(answers));
    while (loadAnswers.flat().length < 12) await new Promise((resolve) => setImmediate(resolve));
    isPaused = true;
    await Promise.all(load);

    // Two requests held in flight until the gate opens: with nothing else in flight nginx's round
    // robin sends one to each server.
    const held = [predict({ gate, value: 'held' }, false), predict({ gate, value: 'held' }, false)];
    while ((await busyWorkers(victim)) < 1 || (await busyWorkers(survivor)) < 1)
      await new Promise((resolve) => setImmediate(resolve));
    // The load resumes and queues behind them on both servers.
    isPaused = false;
    const sentBefore = nextId;
    load = loadAnswers.map((answers) => client(answers));
    while (nextId < sentBefore + 3) await new Promise((resolve) => setImmediate(resolve));

    victim.child.kill('SIGKILL');
    expect(await victim.exited).toEqual({ code: null, signal: 'SIGKILL' });
    killed = true;
    writeFileSync(gate, '');
    await Promise.all(load);

    const answers = [...(await Promise.all(held)), ...loadAnswers.flat()];
    // Which server each request went to, from nginx's access log. nginx writes a request's line
    // after it has sent the response, so a client can hold its answer before the line is there:
    // read it again on each change of the file until every answered request has its line (the
    // watcher exists before the first read, so no line written after that read goes unnoticed).
    const logPath = path.join(root, 'nginx', 'access.log');
    const readLog = () =>
      new Map(
        readFileSync(logPath, 'utf8')
          .trim()
          .split('\n')
          .map((line) => /^(\S+) (\d+) "([^"]*)" "([^"]*)"$/.exec(line))
          .filter((match): match is RegExpExecArray => match !== null)
          .map(([, id, status, upstreams, upstreamStatuses]) => [
            id!,
            {
              status: Number(status),
              upstreams: upstreams!.split(', '),
              upstreamStatuses: upstreamStatuses!.split(', '),
            },
          ]),
      );
    const watcher = watch(logPath);
    let log = readLog();
    try {
      while (!answers.every((answer) => log.has(answer.id))) {
        await once(watcher, 'change');
        log = readLog();
      }
    } finally {
      watcher.close();
    }
    const victimHost = new URL(victim.inferenceUrl).host;
    const survivorHost = new URL(survivor.inferenceUrl).host;

    const failed = answers.filter((answer) => answer.status !== 200);
    expect(failed.length, 'the requests in flight on the killed server').toBeGreaterThanOrEqual(1);
    for (const answer of answers) {
      const entry = log.get(answer.id)!;
      expect(entry.status).toBe(answer.status);
      if (answer.status === 200) {
        expect(entry.upstreamStatuses.at(-1)).toBe('200');
      } else {
        // Failed: it was sent to the killed server only, and nginx answered 502 for it.
        expect(answer.status).toBe(502);
        expect(entry.upstreams).toEqual([victimHost]);
        expect(answer.sentAfterKill, `request ${answer.id} was sent after the kill`).toBe(false);
      }
    }
    // After the kill, the survivor answers everything, including requests nginx first tried on the dead server.
    const afterKill = answers.filter((answer) => answer.sentAfterKill);
    expect(afterKill.length).toBeGreaterThanOrEqual(30);
    for (const answer of afterKill) {
      expect(answer.status, answer.id).toBe(200);
      expect(log.get(answer.id)!.upstreams.at(-1)).toBe(survivorHost);
    }
    // The held requests on the survivor finished once the gate opened.
    expect(
      answers.filter((answer) => answer.status === 200 && log.get(answer.id)!.upstreams.at(-1) === survivorHost).length,
    ).toBeGreaterThan(0);
  });
});
