import { runCli } from './cli.ts';

process.exitCode = await runCli(process.argv);
