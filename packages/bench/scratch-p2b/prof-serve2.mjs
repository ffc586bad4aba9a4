import { spawn } from 'node:child_process';
const child = spawn(process.execPath, ['--cpu-prof', '--cpu-prof-dir=/tmp/p2b/prof', '--cpu-prof-interval', '250', '/work/main/packages/serve/bin/serve.js', ...process.argv.slice(2)], { stdio: 'inherit' });
process.on('SIGTERM', () => {});
child.on('exit', (c) => process.exit(c ?? 0));
