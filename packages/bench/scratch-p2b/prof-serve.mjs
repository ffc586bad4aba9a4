import { Session } from 'node:inspector';
import { writeFileSync } from 'node:fs';
const session = new Session();
session.connect();
session.post('Profiler.enable');
session.post('Profiler.setSamplingInterval', { interval: 200 });
session.post('Profiler.start');
process.on('exit', () => {
  session.post('Profiler.stop', (err, { profile }) => { writeFileSync(`/tmp/p2b/main-${process.pid}.cpuprofile`, JSON.stringify(profile)); });
});
process.argv.splice(1, 1, '/work/main/packages/serve/bin/serve.js');
await import('/work/main/packages/serve/bin/serve.js');
