import type { ServeCliOptions } from './config/serve-cli-options.ts';

/** What one `serve` invocation asks for, after flag normalisation. */
export type ServeCommand =
  | { mode: 'version' }
  | { mode: 'stop' }
  /** --clean-cache: empty the extraction and optimised-model caches (no server may be running). */
  | { mode: 'clean-cache' }
  | {
      mode: 'start';
      /** --foreground: run the server in this process instead of a background child. */
      foreground: boolean;
      cliOptions: ServeCliOptions;
    };
