import { keepTickObjectShape } from './keep-tick-object-shape.ts';

// Before the server's modules load: see keepTickObjectShape.
keepTickObjectShape();
const { runCli } = await import('./cli.ts');
await runCli(process.argv);
