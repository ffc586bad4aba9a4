// Self-time by function and by url from a .cpuprofile
import { readFileSync } from 'node:fs';
const p = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const self = new Map(); const byId = new Map(p.nodes.map((n) => [n.id, n]));
const dt = new Map(); for (let i = 0; i < p.samples.length; i++) dt.set(p.samples[i], (dt.get(p.samples[i]) ?? 0) + (p.timeDeltas[i] ?? 0));
let total = 0;
for (const n of p.nodes) { const t = dt.get(n.id) ?? 0; total += t; const cf = n.callFrame; const k = `${cf.functionName || '(anon)'} ${cf.url.replace(/.*node_modules\/.pnpm\/[^/]+\/node_modules\//, '').replace('/work/main/packages/', '')}:${cf.lineNumber}`; self.set(k, (self.get(k) ?? 0) + t); }
const top = [...self].sort((a, b) => b[1] - a[1]).slice(0, +(process.argv[3] ?? 40));
for (const [k, t] of top) console.log((100 * t / total).toFixed(1).padStart(5), '%', k);
// by package
const byPkg = new Map();
for (const n of p.nodes) { const t = dt.get(n.id) ?? 0; const u = n.callFrame.url; const m = u.match(/node_modules\/\.pnpm\/[^/]+\/node_modules\/((@[^/]+\/)?[^/]+)/); const k = m ? m[1] : u.startsWith('node:') ? 'node:' + u.slice(5).split('/')[0] : u ? u.replace('/work/main/packages/', '').split('/').slice(0, 3).join('/') : n.callFrame.functionName; byPkg.set(k, (byPkg.get(k) ?? 0) + t); }
console.log('--- by package');
for (const [k, t] of [...byPkg].sort((a, b) => b[1] - a[1]).slice(0, 25)) console.log((100 * t / total).toFixed(1).padStart(5), '%', k);
