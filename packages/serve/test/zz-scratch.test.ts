import { test } from 'vitest';
import { mkdir, writeFile, symlink } from 'node:fs/promises';
import { join } from 'node:path';
import { createWorkspace, opsConfig, startOps, call } from './ops-harness.ts';

test('scratch', async () => {
  const ws = await createWorkspace();
  const ops = await startOps(opsConfig(ws));
  await writeFile(join(ws.root, 'secret.txt'), 'root:x:0:0');
  await mkdir(join(ws.root, 'dir'));
  for (let i = 0; i < 30; i++) await writeFile(join(ws.root, 'dir', `name${i}`), 'x');
  for (const url of [`file://${ws.root}/secret.txt`, `file://${ws.root}/dir`, `${ws.root}/dir`, 'file:///etc', 'http://user:pass@127.0.0.1:1/x.mar']) {
    const r = await call(ops.api, 'POST', `/models?url=${encodeURIComponent(url)}`);
    console.log(url, r.status, r.text.slice(0, 600));
  }
  const r = await call(ops.api, 'GET', `/models/${'a'.repeat(120)}`);
  console.log(r.status, r.text.slice(0, 300));
  await ops.close(); await ws.cleanup();
}, 60000);
