export { createProgram, runCli, formatReport, EXIT_CODES, type CliIo } from './cli.ts';
