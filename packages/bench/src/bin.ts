import { runCli } from './cli.ts';

await runCli(process.argv);
